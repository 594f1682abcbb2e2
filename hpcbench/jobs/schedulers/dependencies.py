"""Jobs that start after others (``scheduler.after``): what ``--help`` says where this batch
system's dependencies differ from "start after JOB ended successfully".

A batch system whose dependency waits for another job's end whatever its outcome says so in
``after_note``; the template writes the dependency directive from ``scheduler.after``.
"""

from __future__ import annotations

from typing import ClassVar


class Dependencies:
    """How a batch system's job dependencies read."""

    #: how its dependencies (``scheduler.after``) differ from "start after JOB succeeded"
    after_note: ClassVar[str] = ""
