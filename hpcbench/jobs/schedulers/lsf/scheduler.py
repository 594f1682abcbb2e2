"""IBM Spectrum LSF: ``bsub < script`` to submit, one ``bjobs`` call for all jobs, ``bkill``.

``bsub`` reads the ``#BSUB`` lines only of a script given on its standard input, so the script is
piped to it. ``bjobs -a`` lists finished jobs for ``CLEAN_PERIOD`` (an hour by default) with their
state (``DONE``, ``EXIT``), exit code and exit reason; a job killed with ``bkill`` ends as
``EXIT`` like a failed one, so hpcbench marks the jobs it cancels (as for Grid Engine) and reads
``TERM_RUNLIMIT`` as a time-out.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.jobs.schedulers.base import (
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
)
from hpcbench.jobs.schedulers.commands import run_command, run_process
from hpcbench.jobs.shell import ShellVar, Word
from hpcbench.jobs.spec import JobSpec, SpecError

_STATE_MAP = {
    "PEND": PENDING,
    "PSUSP": PENDING,
    "WAIT": PENDING,
    "RUN": RUNNING,
    "PROV": RUNNING,
    "USUSP": RUNNING,
    "SSUSP": RUNNING,
    "DONE": COMPLETED,
    "EXIT": FAILED,
    "ZOMBI": FAILED,
}
_SUBMITTED = re.compile(r"Job <([0-9]{1,18})> is submitted")
#: the fields asked of bjobs, '|'-separated; the exit reason is free text, so it comes last
BJOBS_FORMAT = "jobid stat exit_code exit_reason delimiter='|'"


def parse_bjobs(out: str, job_ids: Sequence[str]) -> dict[str, JobStatus]:
    """The states ``bjobs -o BJOBS_FORMAT -noheader`` printed for ``job_ids`` (jobs it did not
    list are left out)."""
    found: dict[str, JobStatus] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|", 3)]
        if len(parts) < 3 or parts[0] not in job_ids:
            continue
        reason = parts[3] if len(parts) > 3 and parts[3] != "-" else ""
        state = _STATE_MAP.get(parts[1], UNKNOWN)
        code = int(parts[2]) if parts[2].isdigit() else None
        if state == COMPLETED and code is None:
            code = 0
        if state == FAILED and "TERM_RUNLIMIT" in reason:
            state = TIMEOUT
        elif state == FAILED and re.search(r"TERM_(FORCE_)?(OWNER|ADMIN)", reason):
            state = CANCELLED
        if state == UNKNOWN:
            reason = f"bjobs state {parts[1]!r}"
        found[parts[0]] = JobStatus(state, code, reason)
    return found


class LsfScheduler(Scheduler):
    """LSF: the core, and of the Scheduler base's parts its ids, logs, detection, node agents,
    script values, arrays, requeueing and accounting (with cancel marks)."""

    name = "lsf"
    label = "LSF"
    template = "lsf.bsub.j2"
    script_suffix = ".lsf"
    directive_prefix = "#BSUB"
    submit_command = "bsub"
    # ids
    id_pattern = re.compile(r"[0-9]{1,18}(?:\[[0-9]{1,10}\])?")
    id_form = "a number as bsub prints it, e.g. 1234, or 1234[5] for an array element"
    # logs
    log_id_token = "%J"
    # detection
    detect_order = 20
    # arrays
    array_index_var = "LSB_JOBINDEX"
    array_job_id_shell = '"${LSB_JOBID}[${LSB_JOBINDEX}]"'
    array_log_token = "%J[%I]"
    # requeueing
    stop_warning = "LSF sends the signal `lead` before the run limit (-wa/-wt)"
    # accounting
    accounting_command = "bacct"
    cancel_marks = "lsf-cancelled"  # bkill ends a job as EXIT, like a failure

    @classmethod
    def task_id(cls, array_id: str, index: int) -> str:
        return f"{array_id}[{index}]"

    @classmethod
    def detect(cls) -> str | None:
        bsub = shutil.which("bsub")
        return f"bsub found at {bsub}" if bsub else None

    @classmethod
    def escape_log_path(cls, path: str) -> str:
        """bsub expands %J (job id) and %I (array index) in -o/-e and has no escape for them:
        a directory holding one would send the logs where hpcbench does not look."""
        if re.search(r"%[JI]", path):
            raise SpecError(
                f"resources.output_dir: {path!r} holds %J or %I, which LSF replaces in its log "
                "paths (with no way to escape them): choose a directory without them"
            )
        return path

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        hostfile = folder / "lsb_djob_hostfile"
        hostfile.write_text("".join(f"{h}\n{h}\n" for h in hosts))  # one line per slot
        return {"LSB_JOBID": job_id, "LSB_DJOB_HOSTFILE": str(hostfile)}

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        """One torchrun agent per host of the allocation through ``blaunch`` (LSF's own remote
        start, tracked and killed with the job), given the job's distinct hosts in a file: on
        thousands of nodes their names overflow one argument's 128 KiB (``-z "hosts"``)."""
        if spec.resources.nodes == 1:
            return []
        return ["blaunch", "-u", ShellVar('"$job_hosts_file"')]

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        r = spec.resources
        minutes = max(1, -(-r.time_s // 60))
        return {
            "time_lsf": f"{minutes // 60}:{minutes % 60:02d}",  # bsub -W [hours:]minutes
            "memory_lsf_mb": (
                max(1, r.memory_mb // max(1, r.ranks_per_node * r.cpus_per_task))
                if r.memory_mb
                else None
            ),
            "slots_total": r.nodes * r.ranks_per_node * r.cpus_per_task,
        }

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        # bsub reads the script from its input
        proc = run_process(["bsub"], "bsub", 60, stdin_file=script_path, cwd=cwd)
        said = proc.stdout + proc.stderr
        if proc.returncode != 0 or not (m := _SUBMITTED.search(said)):
            raise SchedulerError(f"bsub refused: {' '.join(said.split()) or proc.returncode}")
        return m.group(1)

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.check_ids(job_ids)
        if not job_ids:
            return {}
        # bjobs exits non-zero when one id is unknown ("Job <7> is not found"), yet lists the rest
        proc = run_process(["bjobs", "-a", "-noheader", "-o", BJOBS_FORMAT, *job_ids], "bjobs")
        found = parse_bjobs(proc.stdout, job_ids)
        for job_id in job_ids:
            status = found.get(job_id)
            if status is None:
                found[job_id] = JobStatus(UNKNOWN, None, "not listed by bjobs -a")
            elif status.state == FAILED and self.cancel_mark(job_id).exists():
                found[job_id] = JobStatus(CANCELLED, status.exit_code, "cancelled by the user")
        return found

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.check_ids(job_ids)
        if job_ids:
            self.mark_cancelled(job_ids)
            run_command(["bkill", *job_ids], "bkill")
