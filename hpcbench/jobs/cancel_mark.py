"""The mark ``hpcbench cancel`` leaves for a job's batch script before it asks the scheduler:
``control/cancel-request`` in the run directory of a job this user submitted from here, or of
the job it continues (a job that resubmitted itself names its successor in
``control/continued-as``).

A requeueable job's script traps the scheduler's stop signal to checkpoint and requeue; the
SIGTERM of ``qdel`` or ``bkill`` looks like a preemption's, so the script reads the mark and
ends the job instead of bringing it back (SLURM's scripts also ask SLURM itself, which covers a
plain ``scancel``). Written only into a control directory this user owns, held open without
following links, as a new file; a job whose directory is not here (over SSH) goes without it.
A cancel the scheduler refuses takes its marks back."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hpcbench.files import read_regular
from hpcbench.jobs import job_store

MARK = "cancel-request"
#: how many of this user's newest records are searched for a continuation's run directory
LOOKED_AT = 1000


@contextmanager
def cancel_marks(job_ids: Sequence[str], scheduler: str) -> Iterator[None]:
    """Leave the mark for each job while the block cancels them; take the marks this left
    back when the block raises (nothing was cancelled: a later stop signal still requeues)."""
    found = [control for job_id in job_ids if (control := _control_dir(job_id, scheduler))]
    made = [control for control in found if _leave_mark(control)]
    try:
        yield
    except BaseException:
        for control in made:
            _take_back(control)
        raise


def _control_dir(job_id: str, scheduler: str) -> Path | None:
    try:
        record = job_store.lookup(job_id, scheduler)
        if record is not None:
            return None if record.host else Path(record.run_dir) / "control"
        for earlier in job_store.recent(LOOKED_AT, scheduler):  # a continuation of one of them
            if not earlier.host and _continued_as(Path(earlier.run_dir) / "control") == job_id:
                return Path(earlier.run_dir) / "control"
    except Exception:  # noqa: BLE001  (damaged records: the cancel itself goes on)
        return None
    return None


def _continued_as(control: Path) -> str | None:
    try:
        text = read_regular(control / "continued-as", 4096).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    words = text.split()
    return words[0].split(";")[0].split(".")[0] if words else None


@contextmanager
def _held(control: Path) -> Iterator[int]:
    """``control`` open as a directory of this user's, not through a link."""
    fd = os.open(control, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise PermissionError(f"{control}: not a directory of yours")
        yield fd
    finally:
        os.close(fd)


def _leave_mark(control: Path) -> bool:
    """Whether this made the mark (an existing one, or a refused directory: False)."""
    try:
        with _held(control) as dir_fd:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(MARK, flags, 0o644, dir_fd=dir_fd)
            try:
                os.write(fd, b"cancel\n")
            finally:
                os.close(fd)
            return True
    except OSError:
        return False


def _take_back(control: Path) -> None:
    try:
        with _held(control) as dir_fd:
            os.unlink(MARK, dir_fd=dir_fd)
    except OSError:
        pass
