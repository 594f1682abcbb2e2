"""How a batch script starts its ranks: the launch line of ``launcher.kind``'s launcher, and the
way one launcher agent starts on each node of the allocation, which the launcher asks of the
batch system.

Every batch system has this part (the :class:`~.base.Scheduler` base includes it). By default one
agent per node starts with ``mpiexec`` (none on one node); a batch system with its own remote
start (a task launcher, a tracked remote shell) overrides ``node_agents``. One that plays every
batch system on this machine sets ``plays_every_system``, so that a launcher only another batch
system has runs as its stand-in.
"""

from __future__ import annotations

from typing import ClassVar

from hpcbench.jobs.launchers import Launcher, launcher_for
from hpcbench.jobs.schedulers.detection import defined_schedulers
from hpcbench.jobs.shell import ShellVar, Word
from hpcbench.jobs.spec import JobSpec


class Launching:
    """The launch line and the node agents of a batch script."""

    #: a scheduler that plays every batch system on this machine: a launcher that only another
    #: batch system has (srun) is replaced by its stand-in (mpiexec)
    plays_every_system: ClassVar[bool] = False

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        """The words that start one torchrun agent on each node of the allocation: by default
        ``mpiexec`` with one process per node (the MPI found at run time), none on one node."""
        if spec.resources.nodes == 1:
            return []
        return ["mpiexec", "-n", str(spec.resources.nodes), ShellVar('"${mpi_per_node[@]}"')]

    @classmethod
    def launch_words(cls, spec: JobSpec) -> list[Word]:
        """The launch line of a batch script: ``launcher.kind``'s launcher (or its stand-in, see
        :func:`~hpcbench.jobs.launchers.launcher_for`), given :meth:`node_agents`."""
        return cls.launcher(spec).words(spec, cls)

    @classmethod
    def launcher(cls, spec: JobSpec) -> type[Launcher]:
        """The launcher that starts ``spec``'s ranks under this scheduler."""
        labels = {c.name: c.label for c in defined_schedulers()}
        return launcher_for(spec.launcher.kind, cls.name, cls.plays_every_system, labels)
