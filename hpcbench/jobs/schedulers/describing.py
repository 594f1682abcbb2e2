"""The cluster's description of itself (``hpcbench profile init``): its partitions, nodes and
limits as a cluster profile's values, with notes for the profile's comments.

A batch system whose commands describe the cluster sets ``describes_cluster``, names those
commands in ``describe_commands`` (for ``--help``) and overrides ``describe``. Without this, the
default ``describe`` refuses, naming the batch systems that do describe a cluster.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hpcbench.jobs.schedulers.detection import defined_schedulers
from hpcbench.jobs.schedulers.errors import SchedulerError


class ClusterDescription:
    """What ``hpcbench profile init`` reads of the cluster."""

    #: whether :meth:`describe` reads the cluster's description
    describes_cluster: ClassVar[bool] = False
    #: the commands :meth:`describe` asks, as ``--help`` names them
    describe_commands: ClassVar[str] = ""

    def describe(self, partition: str | None = None) -> tuple[dict[str, Any], list[str]]:
        """What the cluster says of itself, as a profile's values (``hpcbench profile init``),
        and lines of notes for the profile's comments."""
        readers = [c.label for c in defined_schedulers() if c.describes_cluster]
        raise SchedulerError(
            f"profile init: hpcbench reads a cluster's description from {' and '.join(readers)} "
            f"only, not {self.name}; write the profile by hand (docs/cluster-guide.md)"
        )
