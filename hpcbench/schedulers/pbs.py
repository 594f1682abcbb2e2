"""PBS Pro / OpenPBS / Torque: ``qsub`` to submit, one ``qstat -x -f`` call for all jobs, ``qdel``.

There is no PBS server on the project's test machines: this module is exercised by rendering only
(see docs/schedulers.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hpcbench.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
    run_command,
)
from hpcbench.spec import JobSpec

_STATE_MAP = {
    "Q": PENDING,
    "H": PENDING,
    "W": PENDING,
    "T": PENDING,
    "B": RUNNING,
    "R": RUNNING,
    "E": RUNNING,
    "S": RUNNING,
    "U": RUNNING,
    "X": COMPLETED,
    "F": COMPLETED,
    "C": COMPLETED,
}
_JOB_BLOCK = re.compile(r"^Job Id:\s*(\S+)\s*$", re.MULTILINE)


class PbsScheduler(Scheduler):
    name = "pbs"

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        out = run_command(["qsub", str(script_path)], "qsub").strip()
        if not out:
            raise SchedulerError("qsub: no job id in its answer")
        return out.splitlines()[-1].strip()

    def log_paths(self, spec: JobSpec, job_id: str, cwd: Path) -> tuple[Path, Path]:
        seq = job_id.split(".", 1)[0]
        base = cwd / spec.resources.output_dir / spec.resources.letter_first_name
        return Path(f"{base}.o{seq}"), Path(f"{base}.e{seq}")

    def run_dir(self, spec: JobSpec, job_id: str, cwd: Path) -> Path:
        return super().run_dir(spec, job_id.split(".", 1)[0], cwd)

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        try:
            out = run_command(["qstat", "-x", "-f", *job_ids], "qstat")
        except SchedulerError:
            out = ""  # Torque has no -x; finished jobs then simply drop out of qstat
        found: dict[str, JobStatus] = {}
        blocks = _JOB_BLOCK.split(out)[1:]
        for full_id, body in zip(blocks[0::2], blocks[1::2], strict=False):
            attrs = dict(
                (k.strip(), v.strip())
                for k, _, v in (line.partition("=") for line in body.splitlines())
                if _
            )
            state = _STATE_MAP.get(attrs.get("job_state", ""), UNKNOWN)
            code = attrs.get("Exit_status") or attrs.get("exit_status")
            exit_code = int(code) if code and code.lstrip("-").isdigit() else None
            if state == COMPLETED and exit_code not in (None, 0):
                state = CANCELLED if exit_code < 0 else FAILED
            for job_id in job_ids:
                if full_id == job_id or full_id.split(".")[0] == job_id.split(".")[0]:
                    found[job_id] = JobStatus(state, exit_code)
        for job_id in job_ids:
            found.setdefault(job_id, JobStatus(UNKNOWN, None, "no longer known to qstat"))
        return found

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            run_command(["qdel", *job_ids], "qdel")
