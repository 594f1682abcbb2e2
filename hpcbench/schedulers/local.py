"""The local scheduler: runs the rendered script with bash on this machine, detached.

Job ids (``local-1``, ``local-2`` …) count up in a state directory (``$HPCBENCH_STATE_DIR``, else
``$XDG_STATE_HOME/hpcbench``, else ``~/.local/state/hpcbench``), shared by every project on the
machine. Each job runs in its own session (so that cancel reaches every rank) under a small bash
supervisor that records the script's exit status next to the job's record when it ends. Logs go
where a cluster would put them: ``<output_dir>/<job name>-<id>.out`` and ``.err``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from hpcbench.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    RUNNING,
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
)
from hpcbench.spec import JobSpec

# $1 script, $2 stdout, $3 stderr, $4 exit-status file. Written by hpcbench, not from user input.
_SUPERVISOR = 'bash "$1" >"$2" 2>"$3" </dev/null; rc=$?; echo "$rc" >"$4.tmp" && mv "$4.tmp" "$4"'


ID_PREFIX = "local-"  # local ids never collide with a cluster's numeric ones in the same runs/


def state_dir() -> Path:
    if explicit := os.environ.get("HPCBENCH_STATE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hpcbench"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class LocalScheduler(Scheduler):
    name = "local"
    poll_start = 0.05
    poll_ceiling = 1.0

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or state_dir()) / "local"
        self._children: list[subprocess.Popen] = []  # reaped on each status call

    def _next_id(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        counter = self.root / "last_id"
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            last = int(counter.read_text() or 0) if counter.exists() else 0
            tmp = counter.with_suffix(".tmp")
            tmp.write_text(str(last + 1))
            tmp.replace(counter)
        return f"{ID_PREFIX}{last + 1}"

    def _record(self, job_id: str) -> Path:
        return self.root / f"{job_id}.json"

    def _exit_file(self, job_id: str) -> Path:
        return self.root / f"{job_id}.exit"

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        job_id = self._next_id()
        out, err = self.log_paths(spec, job_id, cwd)
        out.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HPCBENCH_JOB_ID": job_id}
        proc = subprocess.Popen(
            [
                "bash",
                "-c",
                _SUPERVISOR,
                "hpcbench-local",
                str(script_path),
                str(out),
                str(err),
                str(self._exit_file(job_id)),
            ],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        record = {
            "pid": proc.pid,
            "script": str(script_path),
            "cwd": str(cwd),
            "stdout": str(out),
            "stderr": str(err),
            "submitted": time.time(),
        }
        tmp = self._record(job_id).with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self._record(job_id))
        self._children.append(proc)
        return job_id

    def _status(self, job_id: str) -> JobStatus:
        exit_file = self._exit_file(job_id)
        cancelled = (self.root / f"{job_id}.cancelled").exists()
        if exit_file.exists():
            code = int(exit_file.read_text().strip() or 1)
            if cancelled:
                return JobStatus(CANCELLED, code, "cancelled by the user")
            return JobStatus(COMPLETED if code == 0 else FAILED, code)
        try:
            record = json.loads(self._record(job_id).read_text())
        except (OSError, ValueError):
            return JobStatus(UNKNOWN, None, "no such local job")
        for child in self._children:
            child.poll()
        if _alive(record["pid"]):
            return JobStatus(RUNNING)
        if exit_file.exists():  # finished between the two checks
            return self._status(job_id)
        if cancelled:
            return JobStatus(CANCELLED, None, "cancelled by the user")
        return JobStatus(FAILED, None, "the job's supervisor ended without an exit status")

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {job_id: self._status(job_id) for job_id in job_ids}

    def cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            try:
                record = json.loads(self._record(job_id).read_text())
            except (OSError, ValueError):
                raise SchedulerError(f"cancel: no local job {job_id}") from None
            if self._exit_file(job_id).exists():
                continue
            (self.root / f"{job_id}.cancelled").touch()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record["pid"], signal.SIGTERM)
            for _ in range(50):  # 5 s of grace, then SIGKILL, like scancel's KillWait
                if not _alive(record["pid"]):
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(record["pid"], signal.SIGKILL)
