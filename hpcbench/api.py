"""What a notebook or script imports: load a spec, render it, submit it, watch the job.

    from hpcbench import api
    spec = api.load_spec("jobs/demo.toml", nodes=2, gpus_per_node=2)
    job = api.submit(spec, scheduler="local")
    status = job.wait()
    print(status.state, job.stdout())

Nothing here imports torch: it runs on login nodes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench import schedulers
from hpcbench.atomic import write_atomically
from hpcbench.logs import first_rank_error
from hpcbench.render import render_script
from hpcbench.schedulers.base import Job, JobStatus, Scheduler, tail
from hpcbench.spec import FIELD_KEYWORDS, JobSpec
from hpcbench.spec import load_spec as _load_spec

SCRIPT_SUFFIX = {"slurm": ".sbatch", "pbs": ".pbs", "sge": ".sge", "local": ".sh"}


def load_spec(path: str | Path | None = None, **fields: Any) -> JobSpec:
    """Load a spec file (or the defaults) with keyword overrides, e.g. ``nodes=2``."""
    overrides = {}
    for key, value in fields.items():
        if key not in FIELD_KEYWORDS:
            raise TypeError(f"load_spec() got an unknown field {key!r}")
        overrides[FIELD_KEYWORDS[key]] = (key, value)
    return _load_spec(path, overrides)


def resolve_scheduler(spec: JobSpec, forced: str | None = None) -> tuple[str, str]:
    """(name, why): ``forced``, else the spec's scheduler.name, else what this machine has."""
    if forced and forced != "auto":
        return forced, "chosen with --scheduler"
    if spec.scheduler.name != "auto":
        return spec.scheduler.name, "chosen by the spec (scheduler.name)"
    return schedulers.detect()


def render(
    spec: JobSpec, scheduler: str | None = None, template_dirs: Sequence[str | Path] | None = None
) -> str:
    """The batch script text (for the detected scheduler unless one is named)."""
    name, _ = resolve_scheduler(spec, scheduler)
    return render_script(spec, name, template_dirs)


@dataclass
class SubmittedJob:
    """A handle on a submitted job, in the manner of submitit's ``Job``."""

    job: Job
    scheduler: Scheduler

    @property
    def job_id(self) -> str:
        return self.job.job_id

    def status(self) -> JobStatus:
        return self.scheduler.statuses([self.job_id])[self.job_id]

    @property
    def state(self) -> str:
        return self.status().state

    def wait(self, timeout: float | None = None) -> JobStatus:
        return self.scheduler.wait([self.job], timeout)[self.job_id]

    def cancel(self) -> None:
        self.scheduler.cancel([self.job_id])

    def stdout(self) -> str:
        return _read(self.job.stdout_path)

    def stderr(self) -> str:
        return _read(self.job.stderr_path)

    def failure_report(self, status: JobStatus, lines: int = 30) -> str:
        """How the job ended, the first failing rank's traceback, else the tail of its error log."""
        code = "" if status.exit_code is None else f" with exit code {status.exit_code}"
        why = f" ({status.reason})" if status.reason else ""
        report = [f"job {self.job_id} {status.state.lower()}{code}{why}"]
        err = first_rank_error(self.stderr()) or first_rank_error(self.stdout())
        if err is not None and err.traceback:
            who = f"rank {err.rank}" if err.rank is not None else "a rank"
            report += [f"first failing {who}:", err.traceback]
        elif err_tail := (tail(self.job.stderr_path, lines) or tail(self.job.stdout_path, lines)):
            report += [f"last lines of {self.job.stderr_path}:", err_tail]
        report.append(f"logs: {self.job.stdout_path} and {self.job.stderr_path}")
        return "\n".join(report)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def submit(
    spec: JobSpec,
    scheduler: str | None = None,
    template_dirs: Sequence[str | Path] | None = None,
    cwd: str | Path | None = None,
    preflight: bool = True,
) -> SubmittedJob:
    """Render the script, keep a copy under ``<output_dir>/scripts/`` and submit it.

    On SLURM the request is first checked against the partition's limits (``preflight``)."""
    name, _ = resolve_scheduler(spec, scheduler)
    if preflight and name == "slurm":
        from hpcbench.preflight import check_slurm

        check_slurm(spec)
    text = render_script(spec, name, template_dirs)
    workdir = Path(cwd or os.getcwd()).resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 1_000_000_000:09d}"
    script = (
        workdir
        / spec.resources.output_dir
        / "scripts"
        / (f"{spec.resources.file_name}-{stamp}{SCRIPT_SUFFIX[name]}")
    )
    write_atomically(script, text, 0o755)
    # Batch systems do not create the log directory; a job whose log path is missing dies unseen.
    (workdir / spec.resources.output_dir).mkdir(parents=True, exist_ok=True)
    sched = schedulers.get(name)
    job_id = sched.submit(script, spec, workdir)
    out, err = sched.log_paths(spec, job_id, workdir)
    job = Job(job_id, name, script, out, err, sched.run_dir(spec, job_id, workdir))
    from hpcbench import registry

    registry.record(job)
    return SubmittedJob(job, sched)


def submitit_executor(spec: JobSpec, folder: str | Path | None = None, cluster: str | None = None):  # noqa: ANN201
    """A ``submitit.AutoExecutor`` configured from ``spec`` (see :mod:`hpcbench.submitit_jobs`)."""
    from hpcbench.submitit_jobs import executor

    return executor(spec, folder, cluster)


def submit_training(
    spec: JobSpec,
    trainer_args: Sequence[str] | None = None,
    folder: str | Path | None = None,
    cluster: str | None = None,
):  # noqa: ANN201
    """Submit the trainer as a submitit function; ``job.result()`` returns its metrics dict."""
    from hpcbench.submitit_jobs import submit_training as _submit

    return _submit(spec, list(trainer_args or []), folder, cluster)


def job(job_id: str, scheduler: str | None = None) -> SubmittedJob:
    """The handle of a job submitted earlier from this machine (``hpcbench logs`` uses it)."""
    from hpcbench import registry

    found = registry.lookup(job_id, scheduler)
    if found is None:
        raise schedulers.SchedulerError(
            f"no record of job {job_id} submitted from here (records are in {registry.state_dir() / 'jobs'})"
        )
    return SubmittedJob(found, schedulers.get(found.scheduler))
