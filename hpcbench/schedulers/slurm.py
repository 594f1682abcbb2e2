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
        try:
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
        except SchedulerError as err:
            if "Invalid job id" not in str(err):  # every id has left squeue (MinJobAge)
                raise
            out = ""
        found: dict[str, JobStatus] = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 4 or parts[0] not in job_ids:
                continue
            state = _STATE_MAP.get(parts[1].split()[0] if parts[1] else "", UNKNOWN)
            code = decode_wait_status(parts[3]) if state not in (PENDING, RUNNING) else None
            found[parts[0]] = JobStatus(state, code, "" if parts[2] == "None" else parts[2])
        missing = [j for j in job_ids if j not in found]
        if missing:
            found.update(self._from_accounting(missing))
        return found

    def _from_accounting(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Jobs squeue has forgotten: one sacct call, where the cluster keeps accounting."""
        gone = {
            j: JobStatus(UNKNOWN, None, "no longer in squeue, and no accounting (sacct)")
            for j in job_ids
        }
        try:
            out = run_command(
                [
                    "sacct",
                    "--noheader",
                    "--parsable2",
                    "--allocations",
                    f"--jobs={','.join(job_ids)}",
                    "--format=JobID,State,ExitCode",
                ],
                "sacct",
            )
        except (
            SchedulerError
        ):  # "Slurm accounting storage is disabled" on clusters without slurmdbd
            return gone
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) >= 3 and parts[0] in gone:
                state = _STATE_MAP.get(parts[1].split()[0] if parts[1] else "", UNKNOWN)
                code = parts[2].split(":")[0]
                gone[parts[0]] = JobStatus(
                    state, int(code) if code.isdigit() else None, "from sacct"
                )
        return gone

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            run_command(["scancel", *job_ids], "scancel")
