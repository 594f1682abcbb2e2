"""The mark ``hpcbench cancel`` leaves for a job's batch script before it asks the scheduler:
``control/cancel-request`` in the run directory of a job this user submitted from here.

A requeueable job's script traps the scheduler's stop signal to checkpoint and requeue; the
SIGTERM of ``qdel`` or ``bkill`` looks like a preemption's, so the script reads the mark and
ends the job instead of bringing it back (SLURM's scripts also ask SLURM itself, which covers a
plain ``scancel``). Written only into an existing control directory this user owns, never
through a link; a job whose directory is not here (over SSH) goes without the mark."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from hpcbench.jobs import registry

MARK = "cancel-request"


def mark_cancelled(job_ids: Sequence[str], scheduler: str) -> None:
    """Leave the mark in each job's control directory, where this machine sees it."""
    for job_id in job_ids:
        try:
            record = registry.lookup(job_id, scheduler)
        except Exception:  # noqa: BLE001  (a damaged record: the cancel itself goes on)
            continue
        if record is None or record.host:
            continue
        _leave_mark(Path(record.run_dir) / "control")


def _leave_mark(control: Path) -> None:
    try:
        st = os.lstat(control)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return  # not a directory of ours (a link, another user's): no mark
        fd = os.open(control / MARK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, b"cancel\n")
    finally:
        os.close(fd)
