"""SLURM: ``sbatch --parsable`` to submit, one ``squeue`` call for the state of all jobs, ``scancel``.

``squeue --states=all`` still lists a job for ``MinJobAge`` seconds (300 by default) after it ends,
with its exit code, so no accounting database is needed to learn how a job finished.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    PREEMPTED,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
    run_command,
)

if TYPE_CHECKING:
    from hpcbench.launchers import Word
    from hpcbench.spec import JobSpec

_STATE_MAP = {
    "PENDING": PENDING,
    "CONFIGURING": PENDING,
    "REQUEUED": PENDING,
    "REQUEUE_HOLD": PENDING,
    "REQUEUE_FED": PENDING,
    "RESV_DEL_HOLD": PENDING,
    "SPECIAL_EXIT": PENDING,  # held after an exit the site marked special; may run again
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "SUSPENDED": RUNNING,
    "STAGE_OUT": RUNNING,
    "STOPPED": RUNNING,
    "SIGNALING": RUNNING,
    "RESIZING": RUNNING,
    "COMPLETED": COMPLETED,
    "FAILED": FAILED,
    "NODE_FAIL": FAILED,
    "BOOT_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "DEADLINE": TIMEOUT,
    "TIMEOUT": TIMEOUT,
    "PREEMPTED": PREEMPTED,
    "CANCELLED": CANCELLED,
}

# What a PREEMPTED job means for the user (SLURM's own reason column is empty then).
_PREEMPTED_WHY = {
    PREEMPTED: "ended by SLURM for a job of higher priority; with requeue on, its script "
    "checkpointed and requeued or resubmitted it (its log says which), else submit it again "
    "with --resume auto"
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


def sacct_exit_code(raw: str) -> int | None:
    """sacct's ExitCode is ``exit:signal``; a job ended by a signal exits 128 + signal."""
    code, _, sig = raw.partition(":")
    if sig.isdigit() and int(sig):
        return 128 + int(sig)
    return int(code) if code.isdigit() else None


class SlurmScheduler(Scheduler):
    name = "slurm"
    template = "slurm.sbatch.j2"
    script_suffix = ".sbatch"
    directive_prefix = "#SBATCH"
    detect_order = 10
    log_id_token = "%j"
    id_pattern = re.compile(r"[0-9]{1,18}(?:_[0-9]{1,10})?(?:\+[0-9]{1,10})?")
    id_form = "a number as sbatch prints it, e.g. 1234, or 1234_5 for an array task"

    @classmethod
    def detect(cls) -> str | None:
        sbatch = shutil.which("sbatch")
        return f"sbatch found at {sbatch}" if sbatch else None

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        return {
            "SLURM_JOB_ID": job_id,
            "SLURM_JOB_NODELIST": ",".join(hosts),
            "SLURM_CPUS_PER_TASK": "1",
        }

    def preflight(self, spec: JobSpec) -> None:
        from hpcbench.preflight import check_slurm

        check_slurm(spec)

    @classmethod
    def escape_log_path(cls, path: str) -> str:
        return path.replace("%", "%%")  # sbatch reads %j, %u… in --output; %% is a literal %

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        nodes = spec.resources.nodes
        return ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]

    @classmethod
    def launcher_words(cls, spec: JobSpec) -> list[Word] | None:
        from hpcbench.launchers import srun_words

        return srun_words(spec) if spec.launcher.kind == "srun" else None

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        from hpcbench.spec import format_memory, format_time_slurm

        r = spec.resources
        return {
            "time_slurm": format_time_slurm(r.time_s),
            "memory_slurm": format_memory(r.memory_mb) if r.memory_mb else None,
        }

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        out = run_command(["sbatch", "--parsable", f"--chdir={cwd}", str(script_path)], "sbatch")
        job_id = out.strip().split(";", 1)[0]  # --parsable prints "id" or "id;cluster"
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch: unexpected answer {out.strip()!r}")
        return job_id

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.check_ids(job_ids)
        if not job_ids:
            return {}
        try:
            out = run_command(
                [
                    "squeue",
                    "--noheader",
                    "--states=all",
                    f"--jobs={','.join(job_ids)}",
                    # JobArrayID prints 8_1 for an array task (JobID would print its raw id)
                    "--Format=JobArrayID:|,State:|,Reason:|,exit_code",
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
            reason = "" if parts[2] == "None" else parts[2]
            found[parts[0]] = JobStatus(state, code, reason or _PREEMPTED_WHY.get(state, ""))
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
                why = "; ".join(filter(None, ["from sacct", _PREEMPTED_WHY.get(state)]))
                gone[parts[0]] = JobStatus(state, sacct_exit_code(parts[2]), why)
        return gone

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.check_ids(job_ids)
        if job_ids:
            run_command(["scancel", *job_ids], "scancel")
