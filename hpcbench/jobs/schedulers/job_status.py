"""What hpcbench says of a submitted job whatever its batch system: the states (named as SLURM
names them; every batch system maps its own onto these), a job's status, an array's status from
its tasks', and the record of where a job's files are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# States, named as SLURM names them; every scheduler maps its own onto these.
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, UNKNOWN = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "UNKNOWN",
)
# Ended by the scheduler for a job of higher priority (SLURM's PREEMPTED): not the user's cancel.
# A job SLURM requeues on preemption shows PENDING again under its own id instead.
PREEMPTED = "PREEMPTED"
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED})


@dataclass
class JobStatus:
    state: str
    exit_code: int | None = None
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


def array_status(tasks: Sequence[JobStatus]) -> JobStatus:
    """One state for an array from its tasks': running while any runs, pending while any waits,
    else completed when all completed, else how the first that did not ended, counted."""
    if not tasks:
        return JobStatus(UNKNOWN, None, "an array without tasks")
    for state in (RUNNING, PENDING, UNKNOWN):
        if any(t.state == state for t in tasks):
            count = sum(t.state == state for t in tasks)
            return JobStatus(state, None, f"{count} of {len(tasks)} tasks {state.lower()}")
    ended = [t for t in tasks if t.state != COMPLETED]
    if not ended:
        return JobStatus(COMPLETED, 0, f"{len(tasks)} tasks completed")
    first = ended[0]
    return JobStatus(
        first.state, first.exit_code, f"{len(ended)} of {len(tasks)} tasks did not complete"
    )


@dataclass(frozen=True)
class JobRecord:
    """Where a submitted job's files are: what :mod:`hpcbench.jobs.job_store` remembers of it, and
    what :class:`hpcbench.jobs.job.Job` reads."""

    job_id: str
    scheduler: str
    script_path: Path
    stdout_path: Path
    stderr_path: Path
    run_dir: Path
    #: an array job's tasks (their ids; each has a record of its own), empty for a plain job
    tasks: tuple[str, ...] = ()
    #: the login node it was submitted to over SSH ('' for this machine's scheduler), the
    #: working directory there, and the local directory it mirrors
    host: str = ""
    remote_dir: str = ""
    local_dir: str = ""
