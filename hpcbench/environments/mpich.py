"""MPICH's and Intel MPI's ranks (Hydra's mpiexec, or PMI-2 under a batch system's own task
launcher, which gives the local rank and the node where Hydra's variables are missing)."""

from __future__ import annotations

from hpcbench.environments.base import Environment, RankVariables


class Mpich(Environment):
    name = "mpich"
    order = 30
    mpi = True
    reads_task_place = True
    ranks = RankVariables(("PMI_RANK",), ("PMI_SIZE",), ("MPI_LOCALRANKID",), ("MPI_LOCALNRANKS",))
