"""Grid Engine: ``qsub -terse`` to submit, one ``qstat`` call for all jobs (``qacct`` once a job
has left the queue, for its exit status), ``qdel`` to cancel.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.jobs.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
)
from hpcbench.jobs.schedulers.commands import run_command
from hpcbench.jobs.spec import JobSpec, OwnOption
from hpcbench.jobs.units import format_memory, format_time_hms

GRID_ENGINE_NAMES = ("SGE", "GE", "UGE", "OGS", "SoGE", "AGE")


def qsub_is_grid_engine(qsub: str) -> bool:
    """Whether ``qsub`` is Grid Engine's (its ``-help`` names the product on its first line);
    PBS and Torque have a ``qsub`` too."""
    if os.environ.get("SGE_ROOT"):
        return True
    try:
        proc = subprocess.run(
            [qsub, "-help"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    first = (proc.stdout or proc.stderr).strip().splitlines()[:1]
    return bool(first) and first[0].split()[0] in GRID_ENGINE_NAMES


def parse_qstat(out: str) -> list[tuple[str, str, str]]:
    """(job number, state code, task ids) of each row of ``qstat -u '*'``. Columns are fixed
    width: the task ids (``ja-task-ID``: one task, or ranges such as ``3-10:1`` for pending
    tasks) are read from under their header; a running row has a queue column a pending one
    lacks, so counting fields cannot tell them apart."""
    lines = out.splitlines()
    if not lines:
        return []
    task_at = lines[0].find("ja-task-ID")
    rows = []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) >= 5:
            tasks = line[task_at:].strip() if task_at >= 0 else ""
            rows.append((parts[0], parts[4], tasks))
    return rows


def covers(tasks: str, task: int) -> bool:
    """Whether qstat's task column (``1``, ``3-10:1``, ``1,5-7:2``; empty: not an array)
    includes ``task``."""
    for item in filter(None, tasks.split(",")):
        span, _, step = item.partition(":")
        low, _, high = span.partition("-")
        if not (low.isdigit() and (high or low).isdigit() and (step or "1").isdigit()):
            continue
        first, last, every = int(low), int(high or low), max(1, int(step or "1"))
        if first <= task <= last and (task - first) % every == 0:
            return True
    return False


def _qstat_state(codes: list[str]) -> JobStatus:
    """One state for the rows of a job (several for an array): running while any task runs."""
    if any("r" in c or "t" in c for c in codes):
        return JobStatus(RUNNING)
    if any("E" in c for c in codes):
        return JobStatus(FAILED, None, "in error state (qstat E): qmod -cj clears it")
    return JobStatus(PENDING)


class SgeScheduler(Scheduler):
    """Grid Engine: the core, and of the Scheduler base's parts its ids, logs, detection, script
    values, arrays, requeueing, own options, accounting (with cancel marks) and dependencies."""

    name = "sge"
    label = "Grid Engine"
    template = "sge.qsub.j2"
    script_suffix = ".sge"
    directive_prefix = "#$"
    submit_command = "qsub"
    # logs: qsub -o DIR/ names the files itself: <job name>.o<job id>
    log_names = ("{name}.o{id}", "{name}.e{id}")
    log_path_refusals = (("$", "'$'", "expands it"), (":", "':'", "read HOST:PATH"))
    # detection
    detect_order = 30
    # requeueing
    stop_warning = "Grid Engine sends SIGUSR2 before SIGKILL (-notify; the queue's notify time)"
    # own options: the parallel environment of a job of several slots (qconf -spl lists them)
    options = (OwnOption("scheduler", "sge_pe", "line", profile_key="sge_pe"),)
    # accounting
    accounting_command = "qacct"
    cancel_marks = "sge-cancelled"  # qacct does not say who killed a job; we remember qdel
    cancel_mark_keeps = "-_."
    # dependencies
    after_note = "Grid Engine's -hold_jid waits for its end, successful or not"

    @classmethod
    def detect(cls) -> str | None:
        qsub = shutil.which("qsub")
        return f"qsub at {qsub} is Grid Engine's" if qsub and qsub_is_grid_engine(qsub) else None

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        hostfile = folder / "pe_hostfile"
        hostfile.write_text("".join(f"{h} 2 all.q@{h} UNDEFINED\n" for h in hosts))
        return {"JOB_ID": job_id, "PE_HOSTFILE": str(hostfile)}

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        r = spec.resources
        slots = max(1, r.ranks_per_node * r.cpus_per_task)
        return {
            "time_hms": format_time_hms(r.time_s),
            "memory_per_slot_sge": (
                format_memory(max(1, r.memory_mb // slots)) if r.memory_mb else None
            ),
        }

    # ids and arrays
    id_pattern = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,10})?")
    id_form = "a number as qsub prints it, e.g. 1234, or 1234.5 for an array task"
    array_index_var = "SGE_TASK_ID"
    array_job_id_shell = '"$JOB_ID.$SGE_TASK_ID"'

    @classmethod
    def task_id(cls, array_id: str, index: int) -> str:
        return f"{array_id}.{index}"

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        out = run_command(["qsub", "-terse", str(script_path)], "qsub").strip()
        job_id = out.splitlines()[-1].split(".", 1)[0] if out else ""
        if not job_id.isdigit():
            raise SchedulerError(f"qsub: unexpected answer {out!r}")
        return job_id

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.check_ids(job_ids)
        if not job_ids:
            return {}
        out = run_command(["qstat", "-u", "*"], "qstat")
        rows = parse_qstat(out)
        found: dict[str, JobStatus] = {}
        for job_id in job_ids:
            number, _, task = job_id.partition(".")
            codes = [
                code
                for n, code, tasks in rows
                if n == number and (not task or covers(tasks, int(task)))
            ]
            found[job_id] = _qstat_state(codes) if codes else self._accounted(job_id)
        return found

    def _accounted(self, job_id: str) -> JobStatus:
        number, _, task = job_id.partition(".")
        try:
            out = run_command(["qacct", "-j", number, *(["-t", task] if task else [])], "qacct")
        except SchedulerError:
            return JobStatus(UNKNOWN, None, "not in qstat, and qacct does not know it (yet)")
        fields = dict(
            line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2
        )
        code = int(fields.get("exit_status", "1").split()[0])
        failed = fields.get("failed", "0").split()[0] != "0"
        if code == 0 and not failed:
            return JobStatus(COMPLETED, 0)
        if self.cancel_mark(job_id).exists():  # qacct does not say who killed it; we remember qdel
            return JobStatus(CANCELLED, code, "deleted with qdel")
        return JobStatus(FAILED, code)

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.check_ids(job_ids)
        if job_ids:
            run_command(["qdel", *job_ids], "qdel")
            self.mark_cancelled(job_ids)
