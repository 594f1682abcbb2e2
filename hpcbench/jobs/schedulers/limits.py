"""What the batch system refuses before anything is queued: a ceiling on a job's ranks of
hpcbench's own, and a preflight against the cluster's limits.

A batch system that cannot run more than so many ranks sets ``max_ranks`` and says why in
``max_ranks_reason`` (the local scheduler starts every rank on one machine). One whose submit
command accepts requests it can never run (left pending for ever) overrides ``preflight`` to
refuse them with the limit quoted.
"""

from __future__ import annotations

from typing import ClassVar

from hpcbench.jobs.spec import JobSpec


class Limits:
    """A batch system's refusals before submitting."""

    #: the most ranks a job may have (None: no limit of hpcbench's own), and why
    max_ranks: ClassVar[int | None] = None
    max_ranks_reason: ClassVar[str] = ""

    def preflight(self, spec: JobSpec) -> None:
        """Check ``spec`` against what the scheduler allows before submitting (default: none)."""
        return None
