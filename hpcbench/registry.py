"""Where submitted jobs are remembered, so that ``hpcbench logs JOB`` and ``api.job(JOB)`` can
find a job's logs and run directory from its id alone: one small JSON file per job under
``<state dir>/jobs/<scheduler>/`` (``$HPCBENCH_STATE_DIR``, else ``$XDG_STATE_HOME/hpcbench``)."""

from __future__ import annotations

import json
from pathlib import Path

from hpcbench.atomic import write_atomically
from hpcbench.schedulers.base import Job
from hpcbench.schedulers.local import state_dir


def _path(scheduler: str, job_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id)
    return state_dir() / "jobs" / scheduler / f"{safe}.json"


def record(job: Job) -> None:
    data = {
        "job_id": job.job_id,
        "scheduler": job.scheduler,
        "script": str(job.script_path),
        "stdout": str(job.stdout_path),
        "stderr": str(job.stderr_path),
        "run_dir": str(job.run_dir),
    }
    write_atomically(_path(job.scheduler, job.job_id), json.dumps(data) + "\n")


def lookup(job_id: str, scheduler: str | None = None) -> Job | None:
    root = state_dir() / "jobs"
    names = [scheduler] if scheduler else sorted(p.name for p in root.glob("*") if p.is_dir())
    for name in names:
        path = _path(name, job_id)
        if path.exists():
            d = json.loads(path.read_text())
            return Job(
                d["job_id"],
                d["scheduler"],
                Path(d["script"]),
                Path(d["stdout"]),
                Path(d["stderr"]),
                Path(d["run_dir"]),
            )
    return None
