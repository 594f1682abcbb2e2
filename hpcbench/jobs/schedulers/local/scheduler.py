"""The local scheduler: runs the rendered script with bash on this machine, detached.

Job ids (``local-1``, ``local-2`` …) count up in a state directory (``$HPCBENCH_STATE_DIR``, else
``$XDG_STATE_HOME/hpcbench``, else ``~/.local/state/hpcbench``), shared by every project on the
machine. An id is handed out once: its record is created exclusively, and an id whose record,
exit file or logs already exist is skipped. Each job runs in its own session (so that cancel
reaches every rank) under a small bash supervisor that, when the script ends, ends what it left
running in that session and then records its exit status next to the job's record. A process
that leaves the session (``setsid``) escapes both this and cancel once its parent is gone: only
a cgroup, which a cluster's scheduler has and this one does not, could follow it. Logs go where a cluster would put them:
``<output_dir>/<job name>-<id>.out`` and ``.err``.

A record names the host, the boot and the start time of the job's supervisor: a process is
taken for the job's (read for liveness, signalled) only when all three match, so neither a PID
reused after a reboot nor a state directory shared by several machines lets hpcbench signal a
stranger. Every file here is created with mode 0o666 less the umask.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.jobs.processes import Proc, boot_id, proc_stat, proc_table, signal_if_same
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
    array_status,
)
from hpcbench.jobs.schedulers.local.supervisor import SUPERVISOR
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec
from hpcbench.jobs.state import MAX_RECORD_BYTES, state_dir
from hpcbench.jsonfile import JsonFileError, read_json

ID_PREFIX = "local-"  # local ids never collide with a cluster's numeric ones in the same runs/
_JOB_FILE = re.compile(r"local-([0-9]{1,18})(?:_[0-9]{1,10})?\.(?:json|exit|cancelled|started)")
#: seconds between SIGTERM and SIGKILL on cancel (as scancel's KillWait), then to see them gone
CANCEL_GRACE = 5.0
_COUNTER = re.compile(r"[0-9]{1,17}")  # the id counter; one digit short of an id's 18


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a path that cannot even be looked up (too long) does not."""
    try:
        return path.exists()
    except OSError:
        return False


def _create_exclusively(path: Path, text: str = "") -> None:
    """Create ``path`` that must not exist yet (mode 0o666 less the umask) holding ``text``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def write_task_failure(sched: LocalScheduler, task: str, why: str, code: int) -> None:
    """Record why an array's task could not start, then its exit status (in that order: a
    status reader that sees the exit status finds the reason)."""
    record = {"pid": None, "array_id": task.rsplit("_", 1)[0], "failed": why}
    with contextlib.suppress(OSError):
        write_atomically(sched._record(task), json.dumps(record) + "\n", 0o666)
        write_atomically(sched._exit_file(task), f"{code}\n", 0o666)


class LocalScheduler(Scheduler):
    name = "local"
    label = "the local scheduler"
    template = "local.sh.j2"
    stop_warning = "hpcbench cancel sends SIGTERM, SIGKILL a few seconds later"
    max_ranks = 1024
    max_ranks_reason = "starts every rank on this machine"
    script_suffix = ".sh"
    detect_order = 1000  # the last resort: no batch system on this machine
    plays_every_system = True  # a launcher only a cluster has runs as its stand-in here
    poll_start = 0.05
    poll_ceiling = 1.0
    id_pattern = re.compile(r"local-[0-9]{1,18}(?:_[0-9]{1,10})?")
    id_form = "local-<number>, e.g. local-1, or local-1_3 for an array task"
    array_index_var = "HPCBENCH_ARRAY_INDEX"
    array_job_id_shell = '"$HPCBENCH_JOB_ID"'

    @classmethod
    def detect(cls) -> str | None:
        *first, last = cls.other_submit_commands()
        return f"no batch system ({', '.join(first)} or {last}) on PATH"

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        return {"HPCBENCH_JOB_ID": f"{ID_PREFIX}{job_id}"}

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        return []  # the template loops over the emulated nodes itself

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or state_dir()) / "local"
        self._children: list[subprocess.Popen] = []  # reaped on each status call

    # ------------------------------------------------------------------------------- files

    def _record(self, job_id: str) -> Path:
        return self.root / f"{job_id}.json"

    def _exit_file(self, job_id: str) -> Path:
        return self.root / f"{job_id}.exit"

    def _cancel_mark(self, job_id: str) -> Path:
        return self.root / f"{job_id}.cancelled"

    def _started_mark(self, job_id: str) -> Path:
        return self.root / f"{job_id}.started"

    def _job_files(self, job_id: str) -> tuple[Path, ...]:
        return self._record(job_id), self._exit_file(job_id), self._cancel_mark(job_id)

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SchedulerError(
                f"local scheduler: cannot use {self.root} as its state directory "
                f"({err.strerror}); set HPCBENCH_STATE_DIR to a writable directory"
            ) from None

    def _highest_id(self) -> int:
        """The highest number in the counter or among the job files (a damaged counter is
        recovered from the files)."""
        try:
            text = (self.root / "last_id").read_text().strip()
        except (OSError, ValueError):
            text = ""
        last = int(text) if _COUNTER.fullmatch(text) else 0
        for name in os.listdir(self.root):
            if m := _JOB_FILE.fullmatch(name):
                last = max(last, int(m.group(1)))
        return last

    def _reserve(self, taken: Callable[[str], bool]) -> str:
        """A fresh id: its record created exclusively, skipping ids whose files exist."""
        self._ensure_root()
        try:
            with open(self.root / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                number = self._highest_id()
                while True:
                    number += 1
                    if number >= 10**18:
                        raise SchedulerError(
                            f"local scheduler: job ids in {self.root} are used up to "
                            f"{ID_PREFIX}{number - 1}; remove the job files there you no "
                            "longer need, or set HPCBENCH_STATE_DIR to a new directory"
                        )
                    job_id = f"{ID_PREFIX}{number}"
                    if taken(job_id) or any(p.exists() for p in self._job_files(job_id)):
                        continue
                    try:
                        _create_exclusively(self._record(job_id), '{"pid": null}\n')
                    except FileExistsError:
                        continue
                    write_atomically(self.root / "last_id", f"{number}\n", 0o666)
                    return job_id
        except OSError as err:
            raise SchedulerError(
                f"local scheduler: cannot write in {self.root} ({err.strerror})"
            ) from None

    def _load(self, job_id: str) -> dict[str, Any] | None:
        """The job's record, None when there is none; a damaged one is an error."""
        path = self._record(job_id)
        try:
            data = read_json(path, max_bytes=MAX_RECORD_BYTES)
        except JsonFileError as err:
            if err.missing:
                return None
            if err.kind != "invalid":
                raise SchedulerError(f"local job {job_id}: cannot read {path}: {err.why}") from None
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("pid", 0), int | None):
            raise SchedulerError(
                f"local job {job_id}: its record {path} is damaged (not the JSON hpcbench writes)"
            )
        return data

    def _exit_code(self, job_id: str) -> int | None:
        path = self._exit_file(job_id)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise SchedulerError(
                f"local job {job_id}: cannot read {path}: {err.strerror}"
            ) from None
        try:
            return int(text)
        except ValueError:
            raise SchedulerError(
                f"local job {job_id}: its exit file {path} holds {text[:40]!r}, not an exit status"
            ) from None

    # ------------------------------------------------------------------------------ submit

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        if spec.array is not None:
            return self._submit_array(script_path, spec, cwd)

        def taken(job_id: str) -> bool:
            logs = self.log_paths(spec, job_id, cwd)
            return any(_exists(p) for p in (*logs, self.run_dir(spec, job_id, cwd)))

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
            return any(_exists(p) for pair in logs(job_id) for p in pair)

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
        written: list[Path] = []
        try:
            for task in tasks:
                _create_exclusively(
                    self._record(task), json.dumps({"pid": None, "array_id": array_id}) + "\n"
                )
                written.append(self._record(task))
            write_atomically(self._record(array_id), json.dumps(record) + "\n", 0o666)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hpcbench.jobs.schedulers.local.array",
                    str(self.root.parent),
                    array_id,
                ],
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
                env={**os.environ, **(env or {}), "HPCBENCH_JOB_ID": job_id},
                stdin=subprocess.DEVNULL,
                stdout=fds[0],
                stderr=fds[1],
                start_new_session=True,
            )
        finally:
            for fd in fds:
                os.close(fd)

    # ------------------------------------------------------------------------------ status

    @staticmethod
    def _elsewhere(record: dict[str, Any]) -> str:
        """Why this machine cannot see the job's processes ('' when it can)."""
        host = record.get("host")
        if host and host != socket.gethostname():
            return f"started on host {host}"
        if record.get("start") is None or not record.get("boot_id"):
            return "recorded without the process start time; its processes are not checked"
        return ""

    @staticmethod
    def _same_boot(record: dict[str, Any]) -> bool:
        return record.get("boot_id") == boot_id()

    def _processes(self, record: dict[str, Any], known: dict[int, Proc]) -> dict[int, Proc]:
        """The job's living processes: its session's and their descendants' (even those that
        left the session), plus those seen in earlier calls (``known``, updated)."""
        if self._elsewhere(record) or not self._same_boot(record):
            return {}
        for child in self._children:
            child.poll()
        table = {p.pid: p for p in proc_table().values() if p.state not in ("Z", "X")}
        start, session = record["start"], record["pid"]
        leader = table.get(session)
        if leader is not None and leader.start != start:  # the PID, hence the session id, reused
            found = {}
        else:
            found = {
                pid: p for pid, p in table.items() if p.session == session and p.start >= start
            }
        found.update({pid: p for pid, p in known.items() if table.get(pid) == p})
        children: dict[int, list[Proc]] = {}
        for p in table.values():
            children.setdefault(p.ppid, []).append(p)
        todo = list(found)
        while todo:
            for child in children.get(todo.pop(), []):
                if child.pid not in found and child.start >= start:
                    found[child.pid] = child
                    todo.append(child.pid)
        known.clear()
        known.update(found)
        return found

    def _supervisor_alive(self, record: dict[str, Any]) -> bool:
        for child in self._children:
            child.poll()
        proc = proc_stat(record["pid"])
        return (
            proc is not None
            and proc.state not in ("Z", "X")
            and proc.start == record["start"]
            and self._same_boot(record)
        )

    def _status(self, job_id: str) -> JobStatus:
        record = self._load(job_id)
        if record is None:
            return JobStatus(UNKNOWN, None, "no such local job")
        if isinstance(record.get("array"), list):
            return array_status([self._status(task) for task in record["array"]])
        code = self._exit_code(job_id)
        cancelled = self._cancel_mark(job_id).exists()
        if code is not None and not cancelled:
            why = str(record.get("failed") or "")  # an array's task that could not start
            return JobStatus(COMPLETED if code == 0 else FAILED, code, why)
        if record.get("pid") is None:
            return self._unstarted_status(job_id, record, cancelled)
        if elsewhere := self._elsewhere(record):
            return JobStatus(UNKNOWN, code, elsewhere)
        if cancelled:
            if left := self._processes(record, {}):
                return JobStatus(RUNNING, None, f"being cancelled ({len(left)} processes left)")
            return JobStatus(CANCELLED, code, "cancelled by the user")
        if self._supervisor_alive(record):
            task = record.get("array_task") or record.get("slots")  # "slots": an older record
            if task and not self._started_mark(job_id).exists():
                return JobStatus(PENDING, None, "waiting for a free slot of its array")
            return JobStatus(RUNNING)
        if (code := self._exit_code(job_id)) is not None:  # finished between the two checks
            return JobStatus(COMPLETED if code == 0 else FAILED, code)
        if not self._same_boot(record):
            return JobStatus(FAILED, None, "the machine restarted while the job ran")
        return JobStatus(FAILED, None, "the job's supervisor ended without an exit status")

    def _unstarted_status(self, job_id: str, record: dict[str, Any], cancelled: bool) -> JobStatus:
        """A job without a process yet: an array's task waiting for a slot (or cancelled before
        its start, or whose dispatcher could not start it), else a submission cut short."""
        if not record.get("array_id"):
            return JobStatus(UNKNOWN, None, "its submission did not complete")
        if cancelled:
            return JobStatus(CANCELLED, None, "cancelled before it started")
        if (code := self._exit_code(job_id)) is not None:
            return JobStatus(FAILED, code, str(record.get("failed") or "it could not start"))
        array = self._load(str(record["array_id"])) or {}
        dispatcher = array.get("dispatcher")
        if not isinstance(dispatcher, dict) or dispatcher.get("pid") is None:
            return JobStatus(PENDING, None, "waiting for a free slot of its array")
        if elsewhere := self._elsewhere(dispatcher):
            return JobStatus(UNKNOWN, None, elsewhere)
        if self._supervisor_alive(dispatcher):
            return JobStatus(PENDING, None, "waiting for a free slot of its array")
        if self._load(job_id) != record:  # started (or failed) since it was read
            return self._status(job_id)
        if not self._same_boot(dispatcher):
            return JobStatus(FAILED, None, "the machine restarted before it started")
        return JobStatus(FAILED, None, "its array's dispatcher ended before starting it")

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.check_ids(job_ids)
        return {job_id: self._status(job_id) for job_id in job_ids}

    # ------------------------------------------------------------------------------ cancel

    def cancel(self, job_ids: Sequence[str]) -> None:
        """SIGTERM to every process of each job, SIGKILL to those left after CANCEL_GRACE
        seconds; returns once none is left. Finished jobs are left alone. An array's id stands
        for its tasks. Every job is marked cancelled before any is signalled: a task of an array
        waiting for a slot that a cancelled task frees sees its mark and never starts."""
        self.check_ids(job_ids)
        chosen: list[tuple[str, dict[str, Any]]] = []
        for job_id in job_ids:
            record = self._load(job_id)
            if record is None:
                raise SchedulerError(f"cancel: no local job {job_id} (no record in {self.root})")
            tasks = record.get("array")
            for one in tasks if isinstance(tasks, list) else [job_id]:
                found = record if one == job_id else self._load(one)
                if found is not None:
                    chosen.append((one, found))
        for job_id, record in chosen:
            host = record.get("host")
            if host and host != socket.gethostname():
                raise SchedulerError(
                    f"cancel: local job {job_id} was started on host {host}; cancel it there"
                )
        active = [j for j, _ in chosen if not self._status(j).finished]
        for job_id in active:
            with contextlib.suppress(FileExistsError):
                _create_exclusively(self._cancel_mark(job_id))
        for job_id in active:  # read again: an array's task may have been started meanwhile
            record = self._load(job_id)
            if record and record.get("pid") is not None and not self._elsewhere(record):
                self._terminate(job_id, record)

    def _terminate(self, job_id: str, record: dict[str, Any]) -> None:
        known: dict[int, Proc] = {}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in self._processes(record, known).values():
                signal_if_same(proc, sig)
            deadline = time.monotonic() + CANCEL_GRACE
            while self._processes(record, known) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not known:
                return
        raise SchedulerError(
            f"cancel: local job {job_id}: processes {', '.join(map(str, sorted(known)))} "
            "survived SIGKILL"
        )
