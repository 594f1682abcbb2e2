"""What a notebook or script imports: load a spec, render it, submit it, watch the job.

    from hpcbench import api
    spec = api.load_spec("jobs/demo.toml", nodes=2, gpus_per_node=2)
    job = api.submit(spec, scheduler="local")
    status = job.wait()
    print(status.state, job.stdout())
    metrics = job.result()        # rank 0's metrics.json, or JobFailed with the failing traceback

Every way of submitting returns the same handle, :class:`hpcbench.jobs.job.Job`. Nothing here imports
torch: it runs on login nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcbench.jobs.job import Job, JobFailed
from hpcbench.jobs.spec import JobSpec
from hpcbench.jobs.submission import (
    check_job_id,
    input_warnings,
    job,
    lead_warning,
    load_spec,
    render,
    resolve_scheduler,
    submit,
)

if TYPE_CHECKING:
    import submitit

__all__ = [
    "Job",
    "JobFailed",
    "check_job_id",
    "input_warnings",
    "job",
    "lead_warning",
    "load_spec",
    "render",
    "resolve_scheduler",
    "submit",
    "submit_training",
    "submitit_executor",
    "sweep",
]


def submitit_executor(
    spec: JobSpec, folder: str | Path | None = None, cluster: str | None = None
) -> submitit.AutoExecutor:
    """A ``submitit.AutoExecutor`` configured from ``spec`` (see :mod:`hpcbench.jobs.submitit_jobs`)."""
    from hpcbench.jobs.submitit_jobs import executor

    return executor(spec, folder, cluster)


def submit_training(
    spec: JobSpec,
    trainer_args: Sequence[str] | None = None,
    folder: str | Path | None = None,
    cluster: str | None = None,
) -> Job:
    """Submit the trainer as a submitit function; ``job.result()`` returns its metrics dict."""
    from hpcbench.jobs.submitit_jobs import submit_training as _submit

    return _submit(spec, list(trainer_args or []), folder, cluster)


def sweep(
    sweep_file: str | Path,
    results: str | Path | None = None,
    scheduler: str | None = None,
    *,
    smoke: bool = False,
    axes: Sequence[str] = (),
    max_parallel: int | None = None,
    retry_failed: bool = False,
    executor: submitit.AutoExecutor | None = None,
    cwd: str | Path | None = None,
) -> list[Job]:
    """Submit what is left of a sweep (``hpcbench sweep``'s work, without waiting) and return
    one handle per task submitted now (none when every task is done, queued or running).

    With ``executor`` (``api.submitit_executor(spec)``) the tasks go through submitit's
    ``map_array`` instead of a batch script; either way the results directory is the same and
    ``hpcbench report RESULTS`` (or :func:`hpcbench.sweep.report.build_sweep_report`) reads it.
    ``axes`` are ``"OPTION=V,V"`` strings, as ``--axis`` takes."""
    from hpcbench.sweep.plan import read_sweep
    from hpcbench.sweep.runner import SweepRunner

    plan = read_sweep(sweep_file, smoke, list(axes), max_parallel)
    where = results or f"runs/sweep-{plan.name}{'-smoke' if smoke else ''}"
    runner = SweepRunner(plan, where, scheduler, cwd)
    runner.open()
    try:
        if executor is not None:
            from hpcbench.sweep.notebook import submit_with_submitit

            return submit_with_submitit(runner, executor, retry_failed)
        tasks = runner.to_do(retry_failed)
        if not tasks:
            return []
        array = runner.submit(tasks)
        return [job(task_id, array.scheduler_name) for task_id in array.tasks]
    finally:
        runner.close()  # the next api.sweep, or hpcbench sweep, may follow it
