"""submitit's executor for this batch system (the Python API and notebooks submit through it when
it is installed): its cluster name, and the executor parameters only this batch system has.

A batch system that submitit drives sets ``submitit_cluster`` (the name submitit gives its
executor) and overrides ``submitit_parameters`` and ``submitit_array_parameters`` where its
executor takes parameters of its own. Without this, submitit is not used for it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hpcbench.jobs.spec import JobSpec


class SubmititSupport:
    """The submitit executor of a batch system."""

    #: the name submitit gives its executor for this batch system ('' where it has none)
    submitit_cluster: ClassVar[str] = ""

    @classmethod
    def submitit_parameters(cls, spec: JobSpec, setup: list[str]) -> dict[str, Any]:
        """submitit's executor parameters only this batch system has (its
        :attr:`submitit_cluster`), for ``spec`` and the shell lines of its ``setup``."""
        return {}

    @classmethod
    def submitit_array_parameters(cls, max_parallel: int) -> dict[str, Any]:
        """submitit's parameters that cap how many tasks of an array run at once."""
        return {}
