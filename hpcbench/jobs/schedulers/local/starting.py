"""Starting local jobs: a job's supervisor in a session of its own, an array's dispatcher,
and the jobs a job runs after."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.jobs.processes import TOKEN_VAR, boot_id, job_token, proc_stat, signal_if_same
from hpcbench.jobs.schedulers.base import SchedulerError
from hpcbench.jobs.schedulers.local.files import (
    CANCEL_GRACE,
    ID_PREFIX,
    JobFiles,
    create_exclusively,
    path_exists,
)
from hpcbench.jobs.schedulers.local.supervisor import SUPERVISOR
from hpcbench.jobs.spec import JobSpec


def write_task_failure(sched: JobFiles, task: str, why: str, code: int) -> None:
    """Record why an array's task could not start, then its exit status (in that order: a
    status reader that sees the exit status finds the reason)."""
    record = {"pid": None, "array_id": task.rsplit("_", 1)[0], "failed": why}
    with contextlib.suppress(OSError):
        write_atomically(sched._record(task), json.dumps(record) + "\n", 0o666)
        write_atomically(sched._exit_file(task), f"{code}\n", 0o666)


class Starting(JobFiles):
    """Submitting: records first, then the processes that run them."""

    # ------------------------------------------------------------------------------ submit

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        if spec.array is not None:
            return self._submit_array(script_path, spec, cwd)

        def taken(job_id: str) -> bool:
            logs = self.log_paths(spec, job_id, cwd)
            return any(path_exists(p) for p in (*logs, self.run_dir(spec, job_id, cwd)))

        after = []
        for dep in spec.scheduler.after:
            if not dep.startswith(ID_PREFIX) or (record := self._load(dep)) is None:
                raise SchedulerError(
                    f"scheduler.after: {dep} is not a job of the local scheduler here ({self.root})"
                )
            # an array stands for all its tasks (as SLURM's afterok on an array's id)
            tasks = record.get("array")
            for one in tasks if isinstance(tasks, list) else [dep]:
                after.append(self._after_word(one, record if one == dep else self._load(one)))
        job_id = self._reserve(taken)
        self._launch(job_id, script_path, cwd, self.log_paths(spec, job_id, cwd), after)
        return job_id

    def _after_word(self, job_id: str, record: dict[str, Any] | None) -> str:
        """What a supervisor waits on for one job it runs after: ``STEM:PID:START``. The PID is
        the job's supervisor's, or for an array task not started yet its array's dispatcher's
        (which outlives its tasks): seen here, its death without an exit status (a SIGKILL, the
        machine restarted) ends the wait too; ``-:-`` where it cannot be seen."""
        stem = self._exit_file(job_id).with_suffix("")
        if record is not None and record.get("pid") is None and record.get("array_id"):
            array = self._load(str(record["array_id"])) or {}
            record = array.get("dispatcher") if isinstance(array.get("dispatcher"), dict) else None
        seen = record is not None and record.get("pid") is not None and not self._elsewhere(record)
        return f"{stem}:{record['pid']}:{record['start']}" if seen else f"{stem}:-:-"

    def _submit_array(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        """An array: one id for it (its record lists its tasks) and one job per task,
        ``<id>_<index>``. Every task is recorded (pending) before anything starts; then one
        dispatcher process (:mod:`hpcbench.jobs.schedulers.local.array`) starts each task's supervisor as
        one of the array's ``max_parallel`` slots frees up."""
        array = spec.array
        assert array is not None
        if spec.scheduler.after:
            raise SchedulerError("scheduler.after: the local scheduler runs arrays without it")

        def logs(job_id: str) -> list[tuple[Path, Path]]:
            return [
                self.task_log_paths(spec, self.task_id(job_id, k), k, cwd)
                for k in range(1, array.size + 1)
            ]

        def taken(job_id: str) -> bool:
            return any(path_exists(p) for pair in logs(job_id) for p in pair)

        array_id = self._reserve(taken)
        tasks = [self.task_id(array_id, k) for k in range(1, array.size + 1)]
        record: dict[str, Any] = {
            "pid": None,
            "array": tasks,
            "cwd": str(cwd),
            "submitted": time.time(),
            "plan": {
                "script": str(script_path),
                "max_parallel": array.max_parallel or array.size,
                "logs": [[str(out), str(err)] for out, err in logs(array_id)],
            },
        }
        proc = self._record_array(array_id, tasks, record, cwd)
        self._children.append(proc)
        started = proc_stat(proc.pid)
        record["dispatcher"] = {
            "pid": proc.pid,
            "start": started.start if started else None,
            "boot_id": boot_id(),
            "host": socket.gethostname(),
        }
        with contextlib.suppress(OSError):  # without it, a job after the array cannot watch it
            write_atomically(self._record(array_id), json.dumps(record) + "\n", 0o666)
        return array_id

    def _record_array(
        self, array_id: str, tasks: list[str], record: dict[str, Any], cwd: Path
    ) -> subprocess.Popen:
        """Record every task (pending) and the array, then start its dispatcher; on a failure,
        nothing is left recorded and nothing started."""
        written: list[Path] = []
        try:
            for task in tasks:
                create_exclusively(
                    self._record(task), json.dumps({"pid": None, "array_id": array_id}) + "\n"
                )
                written.append(self._record(task))
            write_atomically(self._record(array_id), json.dumps(record) + "\n", 0o666)
            dispatcher = "hpcbench.jobs.schedulers.local.array"
            return subprocess.Popen(
                [sys.executable, "-m", dispatcher, str(self.root.parent), array_id],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as err:
            for path in [*written, self._record(array_id)]:
                path.unlink(missing_ok=True)
            raise SchedulerError(
                f"local scheduler: cannot submit array {array_id}: {err.filename or self.root}: "
                f"{err.strerror}; nothing was started"
            ) from None

    def _launch(
        self,
        job_id: str,
        script_path: Path,
        cwd: Path,
        logs: tuple[Path, Path],
        after: Sequence[str],
        kind: str = "-",
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen:
        """Start the job's supervisor and write its record (its id reserved already); ``kind``
        is ``"task"`` for an array's task (started by its dispatcher)."""
        out, err = logs
        try:
            proc = self._start(job_id, script_path, cwd, out, err, after, kind, env)
        except OSError as error:
            self._record(job_id).unlink(missing_ok=True)
            where = error.filename or script_path
            raise SchedulerError(
                f"local scheduler: cannot start job {job_id}: {where}: {error.strerror}"
            ) from None
        started = proc_stat(proc.pid)
        record = {
            "pid": proc.pid,
            "start": started.start if started else None,
            "boot_id": boot_id(),
            "host": socket.gethostname(),
            "script": str(script_path),
            "cwd": str(cwd),
            "stdout": str(out),
            "stderr": str(err),
            "submitted": time.time(),
            "array_task": kind == "task",
        }
        try:
            write_atomically(self._record(job_id), json.dumps(record) + "\n", 0o666)
        except OSError as error:
            if started is not None:  # a job nobody could follow or cancel is not left running
                signal_if_same(started, signal.SIGKILL)
            raise SchedulerError(
                f"local scheduler: cannot record job {job_id} in {self.root} ({error.strerror}); "
                "it was stopped"
            ) from None
        self._children.append(proc)
        return proc

    def _start(
        self,
        job_id: str,
        script: Path,
        cwd: Path,
        out: Path,
        err: Path,
        after: Sequence[str] = (),
        kind: str = "-",
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen:
        """Create the logs (they must not exist) and start the supervisor in its own session."""
        out.parent.mkdir(parents=True, exist_ok=True)
        fds: list[int] = []
        try:
            for path in (out, err):
                fds.append(
                    os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                )
            return subprocess.Popen(
                [
                    "bash",
                    "-c",
                    SUPERVISOR,
                    "hpcbench-local",
                    str(script),
                    str(self._exit_file(job_id)),
                    str(int(CANCEL_GRACE)),
                    kind,
                    *after,
                ],
                cwd=cwd,
                env={
                    **os.environ,
                    **(env or {}),
                    "HPCBENCH_JOB_ID": job_id,
                    TOKEN_VAR: job_token(self.root, job_id),
                },  # fmt: skip
                stdin=subprocess.DEVNULL,
                stdout=fds[0],
                stderr=fds[1],
                start_new_session=True,
            )
        finally:
            for fd in fds:
                os.close(fd)
