"""Grid Engine: ``qsub -terse`` to submit, one ``qstat`` call for all jobs (``qacct`` once a job
has left the queue, for its exit status), ``qdel`` to cancel.
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
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
    run_command,
)
from hpcbench.spec import JobSpec


class SgeScheduler(Scheduler):
    name = "sge"

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        out = run_command(["qsub", "-terse", str(script_path)], "qsub").strip()
        job_id = out.splitlines()[-1].split(".", 1)[0] if out else ""
        if not job_id.isdigit():
            raise SchedulerError(f"qsub: unexpected answer {out!r}")
        return job_id

    def log_paths(self, spec: JobSpec, job_id: str, cwd: Path) -> tuple[Path, Path]:
        base = cwd / spec.resources.output_dir / spec.resources.file_name
        return Path(f"{base}.o{job_id}"), Path(f"{base}.e{job_id}")

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        out = run_command(["qstat", "-u", "*"], "qstat")
        found: dict[str, JobStatus] = {}
        for line in out.splitlines()[2:]:
            parts = line.split()
            if len(parts) >= 5 and parts[0] in job_ids:
                code = parts[4]
                found[parts[0]] = JobStatus(
                    FAILED if "E" in code else RUNNING if "r" in code or "t" in code else PENDING
                )
        for job_id in job_ids:
            if job_id not in found:
                found[job_id] = self._accounted(job_id)
        return found

    def _accounted(self, job_id: str) -> JobStatus:
        try:
            out = run_command(["qacct", "-j", job_id], "qacct")
        except SchedulerError:
            return JobStatus(UNKNOWN, None, "not in qstat, and qacct does not know it (yet)")
        fields = dict(
            line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2
        )
        code = int(fields.get("exit_status", "1").split()[0])
        failed = fields.get("failed", "0").split()[0] != "0"
        if code == 0 and not failed:
            return JobStatus(COMPLETED, 0)
        if _cancel_mark(job_id).exists():  # qacct does not say who killed it; we remember qdel
            return JobStatus(CANCELLED, code, "deleted with qdel")
        return JobStatus(FAILED, code)

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            run_command(["qdel", *job_ids], "qdel")
            for job_id in job_ids:
                mark = _cancel_mark(job_id)
                mark.parent.mkdir(parents=True, exist_ok=True)
                mark.touch()


def _cancel_mark(job_id: str) -> Path:
    from hpcbench.schedulers.local import state_dir

    return state_dir() / "sge-cancelled" / "".join(c for c in job_id if c.isalnum() or c in "-_.")
