"""Reading a local job's state from its files and processes, and cancelling it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import time
from collections.abc import Sequence
from typing import Any

from hpcbench.jobs.processes import (
    Proc,
    boot_id,
    job_token,
    marked,
    proc_stat,
    proc_table,
    signal_if_same,
)
from hpcbench.jobs.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobStatus,
    SchedulerError,
    array_status,
)
from hpcbench.jobs.schedulers.local.files import (
    CANCEL_GRACE,
    JobFiles,
    create_exclusively,
)


class States(JobFiles):
    """A job's state: its exit file, else its processes, else what its record says."""

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

    def _processes(
        self, record: dict[str, Any], known: dict[int, Proc], job_id: str | None = None
    ) -> dict[int, Proc]:
        """The job's living processes: its session's and their descendants' (even those that
        left the session), plus those seen in earlier calls (``known``, updated), plus, given
        ``job_id``, those whose environment carries the job's token (a rank MPI started in a
        session of its own whose parent died first)."""
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
        if job_id is not None and start is not None:  # a rank that left the session, orphaned
            found.update(marked(job_token(self.root, job_id), start))
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
            if left := self._processes(record, {}, job_id):
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
                create_exclusively(self._cancel_mark(job_id))
        for job_id in active:  # read again: an array's task may have been started meanwhile
            record = self._load(job_id)
            if record and record.get("pid") is not None and not self._elsewhere(record):
                self._terminate(job_id, record)
                say_cancelled(job_id, record)

    def _terminate(self, job_id: str, record: dict[str, Any]) -> None:
        known: dict[int, Proc] = {}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in self._processes(record, known, job_id).values():
                signal_if_same(proc, sig)
            deadline = time.monotonic() + CANCEL_GRACE
            while self._processes(record, known, job_id) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not known:
                return
        raise SchedulerError(
            f"cancel: local job {job_id}: processes {', '.join(map(str, sorted(known)))} "
            "survived SIGKILL"
        )


def say_cancelled(job_id: str, record: dict[str, Any]) -> None:
    """End the job's error log with one line saying it was cancelled, once none of its
    processes is left: the last thing ``hpcbench logs`` shows, not the traceback a launcher
    (torchrun's agent) printed on the cancel's SIGTERM. Only an existing regular file is
    appended to, never through a link; a log that cannot be written is left as it is."""
    path = record.get("stderr")
    if not isinstance(path, str):
        return
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    line = f"hpcbench: job {job_id} cancelled (hpcbench cancel): its processes were ended\n"
    with contextlib.suppress(OSError):
        fd = os.open(path, flags)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, line.encode())
        finally:
            os.close(fd)
