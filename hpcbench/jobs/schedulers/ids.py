"""The job ids a batch system hands out: their form, and refusing any id not of it before it
reaches a command or a path.

Every batch system has this part (the :class:`~.base.Scheduler` base includes it). Set
``id_pattern`` and ``id_form`` when its ids are not plain numbers (an array task's id, a server
suffix); ``statuses`` and ``cancel`` call :meth:`JobIds.check_ids` first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from hpcbench.jobs.schedulers.errors import JobIdError


class JobIds:
    """The form of a batch system's job ids."""

    #: the ids this scheduler hands out, and how to say so when one does not match
    id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"[0-9]{1,18}")
    id_form: ClassVar[str] = "a number"

    def check_ids(self, job_ids: Sequence[str]) -> None:
        """Refuse any id that is not of this scheduler's form (ids reach commands and paths)."""
        for job_id in job_ids:
            if not self.id_pattern.fullmatch(job_id):
                raise JobIdError(
                    f"job id {job_id!r} is not a {self.name} job id (expected {self.id_form})"
                )
