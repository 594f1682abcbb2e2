"""mpiexec: one task per rank, through the MPI found on the node at run time (MPICH's Hydra,
Intel MPI, Open MPI: the template picks their options)."""

from __future__ import annotations

from hpcbench.jobs.launchers.base import Launcher, NodeStarter, program_words
from hpcbench.jobs.shell import ShellVar, Word
from hpcbench.jobs.spec import JobSpec


class Mpiexec(Launcher):
    name = "mpiexec"
    order = 20

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        return mpiexec_words(spec)


def mpiexec_words(spec: JobSpec) -> list[Word]:
    """``mpiexec -n WORLD`` with the options of the MPI found at run time (labels, env export)."""
    words: list[Word] = [
        "mpiexec",
        "-n",
        str(spec.resources.world_size),
        ShellVar('"${mpi_opts[@]}"'),
    ]
    return [*words, *spec.launcher.args, *program_words(spec)]
