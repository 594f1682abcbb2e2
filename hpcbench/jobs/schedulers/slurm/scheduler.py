"""SLURM, all of it: ``sbatch --parsable`` to submit, one ``squeue`` call for the state of all
jobs, ``scancel``; its time and memory formats, its launch line (``srun``) and its preflight.

``squeue --states=all`` still lists a job for ``MinJobAge`` seconds (300 by default) after it ends,
with its exit code, so no accounting database is needed to learn how a job finished.

Preflight refuses a request the partition can never satisfy, before anything is queued: sbatch
accepts many impossible requests and leaves them PENDING forever (PartitionNodeLimit, "Requested
node configuration is not available" only for some). It reads the partition once (``scontrol show
partition -o``) and its nodes once (``scontrol show node -o``) and compares the job's nodes, GPUs
per node, CPUs per node, memory per node and time with the limits, quoting the limit in the
error. A partition that does not exist is refused the same way.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.jobs.containers import srun_options
from hpcbench.jobs.schedulers.base import (
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
)
from hpcbench.jobs.schedulers.commands import run_command, run_process
from hpcbench.jobs.schedulers.slurm.cluster import (
    check_array_size,
    check_slurm,
    describe_slurm,
    format_time_slurm,
)
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec, SpecError
from hpcbench.jobs.units import format_memory

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
    """SLURM: the core, and of the Scheduler base's parts its ids, logs, detection, node agents,
    script values, arrays, requeueing, preflight, own profile facts, accounting, the cluster's
    description and submitit's executor."""

    name = "slurm"
    label = "SLURM"
    template = "slurm.sbatch.j2"
    script_suffix = ".sbatch"
    directive_prefix = "#SBATCH"
    submit_command = "sbatch"
    # ids
    id_pattern = re.compile(r"[0-9]{1,18}(?:_[0-9]{1,10})?(?:\+[0-9]{1,10})?")
    id_form = "a number as sbatch prints it, e.g. 1234, or 1234_5 for an array task"
    # logs
    log_id_token = "%j"
    log_path_refusals = (("\\", "a backslash", "reads it as 'no substitution'"),)
    # detection
    detect_order = 10
    # arrays
    array_index_var = "SLURM_ARRAY_TASK_ID"
    array_job_id_shell = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'
    array_log_token = "%A_%a"
    # requeueing; requeue.method = "scontrol": the job requeues itself (scontrol requeue) and
    # keeps its id
    stop_warning = (
        "SLURM sends the signal to this shell `lead` before the time limit (--signal=B:), and "
        "SIGTERM on preemption"
    )
    requeue_methods = ("scontrol",)
    # own options, accounting, describing, submitit support
    profile_notes = {"sacct": ("whether SLURM accounting (sacct) answers on this cluster", bool)}
    accounting_command = "sacct"
    describes_cluster = True
    describe_commands = "sinfo, scontrol"
    submitit_cluster = "slurm"

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
        check_slurm(spec)
        if spec.array is not None:
            check_array_size(spec.array.size)

    def describe(self, partition: str | None = None) -> tuple[dict[str, Any], list[str]]:
        return describe_slurm(partition)

    @classmethod
    def escape_log_path(cls, path: str) -> str:
        return path.replace("%", "%%")  # sbatch reads %j, %u… in --output; %% is a literal %

    @classmethod
    def quote_directive(cls, text: str) -> str:
        """sbatch reads ``\\"`` and ``\\\\`` inside double quotes: any value, escaped."""
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    @classmethod
    def submitit_parameters(cls, spec: JobSpec, setup: list[str]) -> dict[str, Any]:
        r = spec.resources
        params: dict[str, Any] = {"slurm_setup": setup}
        for key, value in (
            ("slurm_partition", r.partition),
            ("slurm_account", r.account),
            ("slurm_qos", r.qos),
            ("slurm_constraint", r.constraint),
        ):
            if value:
                params[key] = value
        if r.exclusive:
            params["slurm_exclusive"] = True
        if spec.scheduler.after:
            if any(not job[:1].isdigit() for job in spec.scheduler.after):
                raise SpecError(
                    f"scheduler.after: {', '.join(spec.scheduler.after)}: a SLURM job waits "
                    "only for SLURM job ids"
                )
            params["slurm_additional_parameters"] = {
                "dependency": "afterok:" + ":".join(spec.scheduler.after),
                "kill_on_invalid_dep": "yes",
            }
        return params

    @classmethod
    def submitit_array_parameters(cls, max_parallel: int) -> dict[str, Any]:
        return {"slurm_array_parallelism": max_parallel}

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        nodes = spec.resources.nodes
        words: list[Word] = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1"]
        # the agents in a container that srun starts itself (pyxis)
        return [*words, "--kill-on-bad-exit=1", *srun_options(spec)]

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
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
                    # JobArrayID prints 8_1 for an array task (JobID would print its raw id);
                    # --array: one line per task, pending ones too (not 8_[2-9%2])
                    "--array",
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
        gone = {
            j: JobStatus(UNKNOWN, None, "no longer in squeue, and sacct does not know it")
            for j in job_ids
        }
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) >= 3 and parts[0] in gone:
                state = _STATE_MAP.get(parts[1].split()[0] if parts[1] else "", UNKNOWN)
                why = "; ".join(filter(None, ["from sacct", _PREEMPTED_WHY.get(state)]))
                gone[parts[0]] = JobStatus(state, sacct_exit_code(parts[2]), why)
        return gone

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``scancel --verbose``; a job SLURM does not have is an error naming it (scancel
        exits 0 for it, and says so only when verbose): nothing was cancelled for it."""
        self.check_ids(job_ids)
        if not job_ids:
            return
        proc = run_process(["scancel", "--verbose", *job_ids], "scancel")
        said = " ".join((proc.stderr or "").split())
        if "Invalid job id" in said:
            named = [j for j in job_ids if re.search(rf"\b{re.escape(j)}\b", said)] or job_ids
            raise SchedulerError(
                f"scancel: slurm has no job {', '.join(named)} ({said[:200]}); nothing cancelled "
                "for it"
            )
        if proc.returncode != 0:
            raise SchedulerError(f"scancel refused: {said or f'exit status {proc.returncode}'}")
