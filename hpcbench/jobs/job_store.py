"""Where submitted jobs are remembered, so that ``hpcbench logs JOB`` and ``api.job(JOB)`` can
find a job's logs and run directory from its id alone: one small JSON file per job under
``<state dir>/jobs/<scheduler>/`` (``$HPCBENCH_STATE_DIR``, else ``$XDG_STATE_HOME/hpcbench``)."""

from __future__ import annotations

import json
from pathlib import Path

from hpcbench.atomic import write_atomically
from hpcbench.jobs.schedulers.base import JobRecord, SchedulerError
from hpcbench.jobs.state import MAX_RECORD_BYTES, state_dir
from hpcbench.jsonfile import JsonFileError, read_json

_FIELDS = ("job_id", "scheduler", "script", "stdout", "stderr", "run_dir")
_REMOTE_FIELDS = ("host", "remote_dir", "local_dir")  # a job submitted over SSH


def _path(scheduler: str, job_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id).lstrip(".")
    return state_dir() / "jobs" / scheduler / f"{safe}.json"


def record(job: JobRecord) -> None:
    """Remember ``job``; an OSError (state directory not writable) is left to the caller."""
    data = {
        "job_id": job.job_id,
        "scheduler": job.scheduler,
        "script": str(job.script_path),
        "stdout": str(job.stdout_path),
        "stderr": str(job.stderr_path),
        "run_dir": str(job.run_dir),
        **({"tasks": list(job.tasks)} if job.tasks else {}),
        **(
            {"host": job.host, "remote_dir": job.remote_dir, "local_dir": job.local_dir}
            if job.host
            else {}
        ),
    }
    write_atomically(_path(job.scheduler, job.job_id), json.dumps(data) + "\n")


def _read(path: Path) -> JobRecord:
    try:
        data = read_json(path, max_bytes=MAX_RECORD_BYTES)
    except JsonFileError as err:
        if err.kind != "invalid":
            raise SchedulerError(f"job record {path}: cannot read it: {err.why}") from None
        data = None
    tasks = data.get("tasks", []) if isinstance(data, dict) else None
    remote = [data.get(k, "") for k in _REMOTE_FIELDS] if isinstance(data, dict) else []
    if (
        not isinstance(data, dict)
        or not all(isinstance(data.get(k), str) for k in _FIELDS)
        or not all(isinstance(v, str) for v in remote)
        or not isinstance(tasks, list)
        or not all(isinstance(t, str) for t in tasks)
    ):
        raise SchedulerError(f"job record {path} is damaged (not the JSON hpcbench writes)")
    return JobRecord(
        data["job_id"],
        data["scheduler"],
        Path(data["script"]),
        Path(data["stdout"]),
        Path(data["stderr"]),
        Path(data["run_dir"]),
        tuple(tasks),
        *remote,
    )


def lookup(job_id: str, scheduler: str | None = None) -> JobRecord | None:
    root = state_dir() / "jobs"
    try:
        names = [scheduler] if scheduler else sorted(p.name for p in root.glob("*") if p.is_dir())
    except OSError as err:
        raise SchedulerError(f"job records in {root}: cannot read them: {err.strerror}") from None
    for name in names:
        path = _path(name, job_id)
        if path.is_file():
            return _read(path)
    return None


def recent(limit: int, scheduler: str | None = None) -> list[JobRecord]:
    """The ``limit`` jobs last submitted from here (of ``scheduler``, else of any), newest
    first by the time their record was written; damaged records are left out."""
    root = state_dir() / "jobs"
    try:
        dirs = [root / scheduler] if scheduler else [p for p in root.glob("*") if p.is_dir()]
        files = [(p.stat().st_mtime, p) for d in dirs for p in d.glob("*.json") if p.is_file()]
    except OSError as err:
        raise SchedulerError(f"job records in {root}: cannot read them: {err.strerror}") from None
    found = []
    for _, path in sorted(files, reverse=True):
        if len(found) >= limit:
            break
        try:
            found.append(_read(path))
        except SchedulerError:
            continue
    return found
