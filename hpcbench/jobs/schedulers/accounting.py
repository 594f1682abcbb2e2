"""What a batch system keeps of a finished job: the command its accounting reader asks (its
reader itself is an :class:`~hpcbench.jobs.accounting.records.AccountingReader` in the batch
system's ``accounting.py``), and marks of the jobs hpcbench cancelled, for a batch system whose
record of a job cannot tell a cancel from a failure.

A batch system with accounting names its command in ``accounting_command`` (``status --verbose``
and ``--help`` list it). One whose finished jobs read the same cancelled or failed sets
``cancel_marks`` (a directory under hpcbench's state directory): its ``cancel`` calls
:meth:`Accounting.mark_cancelled` and its ``statuses`` asks :meth:`Accounting.cancel_mark`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from hpcbench.jobs.schedulers.errors import SchedulerError
from hpcbench.jobs.state import state_dir


class Accounting:
    """A batch system's accounting command, and the jobs hpcbench cancelled."""

    #: the command its accounting reader asks, as ``--help`` names it ('' for none)
    accounting_command: ClassVar[str] = ""
    #: the directory of hpcbench's state directory that marks the jobs it cancelled ('' for
    #: none), and the characters of a job id other than letters and digits its marks keep
    cancel_marks: ClassVar[str] = ""
    cancel_mark_keeps: ClassVar[str] = "-_"

    @classmethod
    def cancel_mark(cls, job_id: str) -> Path:
        """The file that says hpcbench cancelled ``job_id`` (only where ``cancel_marks`` is set)."""
        if not cls.cancel_marks:
            raise SchedulerError(f"{cls.name}: no cancel_marks directory for its cancel marks")
        kept = "".join(c for c in job_id if c.isalnum() or c in cls.cancel_mark_keeps)
        return state_dir() / cls.cancel_marks / kept

    @classmethod
    def mark_cancelled(cls, job_ids: Sequence[str]) -> None:
        """Leave the mark of each job of ``job_ids``."""
        for job_id in job_ids:
            mark = cls.cancel_mark(job_id)
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
