"""The scheduler protocol, the job handle and the polling loop every scheduler shares.

A scheduler knows four things: how to submit a script (returning a job id), how to ask the state of
many jobs in one call, how to cancel, and where a job's logs go. Everything else (waiting with
back-off, failure reports) is written once here.
"""

from __future__ import annotations

import os
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcbench.spec import JobSpec

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
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT})


class SchedulerError(RuntimeError):
    """The scheduler refused or failed a request; the message quotes what it said."""


@dataclass
class JobStatus:
    state: str
    exit_code: int | None = None
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


@dataclass
class Job:
    """A submitted job: its id, scheduler and where its script and logs are."""

    job_id: str
    scheduler: str
    script_path: Path
    stdout_path: Path
    stderr_path: Path
    run_dir: Path
    extra: dict[str, str] = field(default_factory=dict)


def backoff_intervals(start: float, ceiling: float, factor: float = 2.0) -> Iterator[float]:
    """Poll intervals: ``start``, then doubling, then ``ceiling`` for ever (submitit's pattern)."""
    delay = start
    while True:
        yield delay
        delay = min(ceiling, delay * factor)


def run_command(argv: Sequence[str], what: str, timeout: float = 60) -> str:
    """Run a scheduler command; a failure becomes a one-line SchedulerError quoting its stderr."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise SchedulerError(f"{what}: {argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{what}: {argv[0]} did not answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        said = " ".join((proc.stderr or proc.stdout).split()) or f"exit status {proc.returncode}"
        raise SchedulerError(f"{what} refused: {said}")
    return proc.stdout


class Scheduler(ABC):
    """One batch system. Subclasses declare only what differs between systems."""

    name: str = ""
    #: first poll interval and ceiling in seconds for ``wait`` (clusters: gentle on the controller)
    poll_start: float = 1.0
    poll_ceiling: float = 30.0

    @abstractmethod
    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        """Queue the script; return the job id."""

    @abstractmethod
    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """The state of every job in ``job_ids``, from one scheduler call."""

    @abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs."""

    def log_paths(self, spec: JobSpec, job_id: str, cwd: Path) -> tuple[Path, Path]:
        """Where the batch script's stdout and stderr go (as the template's directives say)."""
        base = cwd / spec.resources.output_dir / f"{spec.resources.file_name}-{job_id}"
        return base.with_name(base.name + ".out"), base.with_name(base.name + ".err")

    def run_dir(self, spec: JobSpec, job_id: str, cwd: Path) -> Path:
        return cwd / spec.resources.output_dir / f"{spec.resources.file_name}-{job_id}"

    def wait(self, jobs: Sequence[Job], timeout: float | None = None) -> dict[str, JobStatus]:
        """Poll until every job has finished; one scheduler call per poll, backing off."""
        pending = {j.job_id for j in jobs}
        final: dict[str, JobStatus] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        for delay in backoff_intervals(self.poll_start, self.poll_ceiling):
            for job_id, status in self.statuses(sorted(pending)).items():
                if status.finished and job_id in pending:
                    final[job_id] = status
                    pending.discard(job_id)
            if not pending:
                return final
            if deadline is not None and time.monotonic() + delay > deadline:
                raise TimeoutError(
                    f"jobs still running after {timeout:.0f} s: {', '.join(sorted(pending))}"
                )
            time.sleep(delay)
        raise AssertionError("unreachable")


def tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, or '' when it does not exist (yet)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
