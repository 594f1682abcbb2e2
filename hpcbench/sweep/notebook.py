"""A sweep from a notebook: its tasks through submitit's ``executor.map_array`` (one SLURM array,
or submitit's local processes), into the same results directory as ``hpcbench sweep``'s, so that
``hpcbench report`` reads either. Each task is the trainer as a checkpointable submitit callable
(:class:`hpcbench.jobs.submitit_jobs.TrainingTask`) given its settings file (``--settings``) and
its run directory (``--output-dir``): a requeued task resumes from its own checkpoint.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hpcbench.jobs.job import Job
from hpcbench.jobs.schedulers import for_submitit_cluster, scheduler_class
from hpcbench.jobs.submitit_jobs import TrainingTask
from hpcbench.sweep.runner import SweepRunner

if TYPE_CHECKING:
    import submitit


def submit_with_submitit(
    runner: SweepRunner, executor: submitit.AutoExecutor, retry_failed: bool = False
) -> list[Job]:
    """Submit what is left of the sweep (:meth:`SweepRunner.to_do`) with ``executor.map_array``,
    at most the sweep's ``max_parallel`` at once on SLURM; one handle per task."""
    tasks = runner.to_do(retry_failed)
    if not tasks:
        return []
    spec = runner.base_spec()
    runner.check_settings(spec)
    folder = runner.write_task_files(tasks)
    program = spec.program
    args = (["--config", os.path.expanduser(program.config)] if program.config else []) + list(
        program.args
    )
    argvs = [
        [*args, "--settings", str(folder / f"{k}.toml"), "--output-dir", str(runner.run_dir(t))]
        for k, t in enumerate(tasks, 1)
    ]
    cluster = getattr(executor, "cluster", "local")
    params: dict[str, object] = {"name": f"sweep-{runner.sweep.name}"}
    batch_system = for_submitit_cluster(cluster)
    if runner.sweep.max_parallel and batch_system is not None:
        cls = scheduler_class(batch_system)
        params.update(cls.submitit_array_parameters(runner.sweep.max_parallel))
    executor.update_parameters(**params)
    jobs = executor.map_array(TrainingTask(), argvs)
    ids = [str(j.job_id) for j in jobs]
    scheduler = batch_system or f"submitit-{cluster}"
    runner.record_submission(ids[0].split("_", 1)[0], scheduler, tasks, ids, "(submitit)")
    return [Job.from_submitit(j) for j in jobs]
