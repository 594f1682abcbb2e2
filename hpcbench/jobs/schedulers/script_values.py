"""The values a batch system's script reads beyond the job spec: those only its template uses
(its time and memory formats), and the variables the batch system sets in a running job.

A batch system whose template writes a value in a form of its own (``HH:MM:SS``, memory units)
overrides ``template_context``. ``job_environment`` gives the variables it sets in a job (its id,
its hosts): with it, a script rendered for the batch system runs outside it, as the tests do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.jobs.spec import JobSpec


class ScriptValues:
    """What a batch system's template and its jobs' environment hold of their own."""

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        """Values only this scheduler's template uses (formatted times, memory units…)."""
        return {}

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        """The variables this scheduler sets in a job's batch script (writing any file they
        name into ``folder``): what a script rendered for it reads. Used to run scripts outside
        the scheduler, as the tests do."""
        return {}
