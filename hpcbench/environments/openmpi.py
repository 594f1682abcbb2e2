"""Open MPI's mpiexec (mpirun, prterun): its ranks' variables."""

from __future__ import annotations

from hpcbench.environments.base import Environment, RankVariables


class OpenMpi(Environment):
    name = "openmpi"
    order = 20
    mpi = True
    ranks = RankVariables(
        ("OMPI_COMM_WORLD_RANK",),
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        ("OMPI_COMM_WORLD_NODE_RANK",),
    )
