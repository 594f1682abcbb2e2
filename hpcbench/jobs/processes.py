"""The processes of this machine as /proc shows them: what a local job's record is checked
against before a process is taken for the job's (read for liveness, signalled). A PID is reused,
so a process is named by its PID *and* its start time (and the boot), and a signal goes through
a pidfd to the same process only."""

from __future__ import annotations

import hashlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    """What /proc/PID/stat says of a process that matters here."""

    pid: int
    state: str
    ppid: int
    session: int
    start: int  # clock ticks after boot (field 22)


def proc_stat(pid: int) -> Proc | None:
    """The process ``pid`` as /proc describes it, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return Proc(pid, fields[0], int(fields[1]), int(fields[3]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def proc_table() -> dict[int, Proc]:
    """Every process /proc shows now, by PID."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (proc := proc_stat(int(name))) is not None:
            table[proc.pid] = proc
    return table


#: the variable that marks every process of a local job, wherever it went (a new session, a
#: parent that died): its value is the job's :func:`job_token`
TOKEN_VAR = "HPCBENCH_LOCAL_JOB"


def job_token(root: Path, job_id: str) -> str:
    """The token of the local job ``job_id`` of the state directory ``root`` (ids are never
    handed out twice in one directory)."""
    return hashlib.sha256(f"{root.resolve()}\0{job_id}".encode()).hexdigest()[:32]


def marked(token: str, start: int) -> dict[int, Proc]:
    """This user's processes started at ``start`` or later whose environment carries ``token``
    (in :data:`TOKEN_VAR`): a job's processes that left its session and lost their parent."""
    needle, found = f"{TOKEN_VAR}={token}".encode(), {}
    uid = os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read(1 << 20)
        except OSError:
            continue
        if needle in environ.split(b"\0") and (proc := proc_stat(int(name))) is not None:
            if proc.start >= start and proc.state not in ("Z", "X"):
                found[proc.pid] = proc
    return found


def boot_id() -> str:
    """This boot's id: a PID and start time recorded under another boot name another process."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def signal_if_same(proc: Proc, sig: int) -> None:
    """Send ``sig`` to ``proc`` if that PID is still the same process (checked through a pidfd)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):
        fd = None
    try:
        now = proc_stat(proc.pid)
        if now is None or now.start != proc.start:
            return
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if fd is not None:
            os.close(fd)
