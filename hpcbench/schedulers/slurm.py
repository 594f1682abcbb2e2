"""SLURM: ``sbatch --parsable`` to submit, one ``squeue`` call for the state of all jobs, ``scancel``.

``squeue --states=all`` still lists a job for ``MinJobAge`` seconds (300 by default) after it ends,
with its exit code, so no accounting database is needed to learn how a job finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpcbench.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
    run_command,
)
from hpcbench.spec import JobSpec

_STATE_MAP = {
    "PENDING": PENDING,
    "CONFIGURING": PENDING,
    "REQUEUED": PENDING,
    "REQUEUE_HOLD": PENDING,
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "SUSPENDED": RUNNING,
    "STAGE_OUT": RUNNING,
    "COMPLETED": COMPLETED,
    "FAILED": FAILED,
    "NODE_FAIL": FAILED,
    "BOOT_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "DEADLINE": TIMEOUT,
    "TIMEOUT": TIMEOUT,
    "PREEMPTED": CANCELLED,
    "CANCELLED": CANCELLED,
}


def decode_wait_status(raw: str) -> int | None:
    """squeue's exit_code is a wait(2) status: exit code in the high byte, signal in the low."""
    try:
        status = int(raw)
    except ValueError:
        return None
    if status & 0x7F:
        return 128 + (status & 0x7F)
    return status >> 8


class SlurmScheduler(Scheduler):
    name = "slurm"

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        out = run_command(["sbatch", "--parsable", f"--chdir={cwd}", str(script_path)], "sbatch")
        job_id = out.strip().split(";", 1)[0]  # --parsable prints "id" or "id;cluster"
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch: unexpected answer {out.strip()!r}")
        return job_id

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        out = run_command(
            [
                "squeue",
                "--noheader",
                "--states=all",
                f"--jobs={','.join(job_ids)}",
                "--Format=JobID:|,State:|,Reason:|,exit_code",
            ],
            "squeue",
        )
        found: dict[str, JobStatus] = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 4 or parts[0] not in job_ids:
                continue
            state = _STATE_MAP.get(parts[1].split()[0] if parts[1] else "", UNKNOWN)
            code = decode_wait_status(parts[3]) if state not in (PENDING, RUNNING) else None
            found[parts[0]] = JobStatus(state, code, "" if parts[2] == "None" else parts[2])
        for job_id in job_ids:
            found.setdefault(job_id, JobStatus(UNKNOWN, None, "no longer known to squeue"))
        return found

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            run_command(["scancel", *job_ids], "scancel")
