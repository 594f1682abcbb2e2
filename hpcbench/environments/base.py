"""The shape of a run-side environment: where one launcher or batch system tells each process
it starts its place (rank, world size, local rank, node), its job, its CPUs and its nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar


def read_int(env: Mapping[str, str], *names: str) -> int | None:
    """The first of ``names`` set to a whole number, as a number (None when none is)."""
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class RankVariables:
    """Where a launcher puts each rank's place: the variables to read, first found wins (local
    rank, local size and node rank may be missing: they follow from the others)."""

    rank: tuple[str, ...]
    world: tuple[str, ...]
    local: tuple[str, ...] = ()
    local_world: tuple[str, ...] = ()
    node: tuple[str, ...] = ()
    requires: str = ""  # a variable that must also be set for the launch to be this one's


class Environment:
    """One launcher's or batch system's environment. A subclass with a ``name``, in its own
    module of this package, is asked by :mod:`hpcbench.this_rank` in ``order``."""

    #: the launcher's name in a run's provenance (``LaunchInfo.launcher``)
    name: ClassVar[str] = ""
    #: where it stands among the environments asked (lowest first)
    order: ClassVar[int] = 50
    #: where it puts each rank's place (None: it starts no ranks of its own)
    ranks: ClassVar[RankVariables | None] = None
    #: its ranks are MPI ranks: mpi4py's COMM_WORLD is the launch's world
    mpi: ClassVar[bool] = False
    #: its tasks are MPI ranks when the program initialises MPI (through the batch system's PMI)
    mpi_capable: ClassVar[bool] = False
    #: it may run under a batch system's own task launcher and read that system's task place
    #: (:attr:`task_local` and :attr:`task_node`) where its own variables are missing
    reads_task_place: ClassVar[bool] = False

    #: a batch system's: the variable holding the job's id
    job_id_variable: ClassVar[str] = ""
    #: the CPUs given to each task, and to the job on this node
    cpus_per_task_variable: ClassVar[str] = ""
    cpus_on_node_variable: ClassVar[str] = ""
    #: a task's place as the batch system's task launcher gives it, and its tasks per node
    task_local: ClassVar[tuple[str, ...]] = ()
    task_node: ClassVar[tuple[str, ...]] = ()
    tasks_per_node: ClassVar[tuple[str, ...]] = ()
    #: the variable naming the node a task runs on, as the batch system names it
    node_name_variable: ClassVar[str] = ""
    #: the variables naming the node's GPUs given to the job or step, by their index on the node
    #: (the device cgroup renumbers CUDA_VISIBLE_DEVICES from 0; these keep the node's numbers)
    gpu_ids_variables: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def first_node(cls, env: Mapping[str, str]) -> str | None:
        """The first host of the job's allocation, where the batch system says it."""
        return None

    @classmethod
    def node_list(cls, env: Mapping[str, str]) -> str | None:
        """The job's hosts as the batch system writes them (for a run's provenance)."""
        return None
