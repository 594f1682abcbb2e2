"""mpiexec: one task per rank, through the MPI found on the node at run time (MPICH's Hydra,
Intel MPI, Open MPI: the template picks their options)."""

from __future__ import annotations

from hpcbench.jobs.launchers.base import Launcher, NodeStarter, program_words
from hpcbench.jobs.launchers.placement import explicit_shares, exports, placement_of
from hpcbench.jobs.shell import ShellVar, Word
from hpcbench.jobs.spec import JobSpec


class Mpiexec(Launcher):
    name = "mpiexec"
    order = 20

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        return mpiexec_words(spec, binds=cls.binds(spec, scheduler))

    @classmethod
    def binds(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> bool:
        """Whether it binds the ranks itself (on a cluster, for auto and none; an explicit
        placement, and every placement on a machine that plays every node: the rank start)."""
        return not scheduler.plays_every_system and explicit_shares(spec) is None

    @classmethod
    def placement_lines(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[str] | None:
        """Each rank on cpus_per_task cores of its own: Hydra's ``-bind-to core:N``, Open MPI's
        ``--map-by slot:PE=N --bind-to core`` (more ranks than cores: bound anyway, and the
        overlap named by the ranks' records). An explicit placement: the rank start."""
        if not cls.binds(spec, scheduler):
            return None
        if placement_of(spec) == "none":
            return [exports(spec, "none"), "mpi_bind=()"]
        n = spec.resources.cpus_per_task
        return [
            exports(spec, "mpiexec"),
            'case "$(mpiexec --version 2>&1)" in',
            f'  *"Open MPI"*|*OpenRTE*) mpi_bind=(--map-by "slot:PE={n}" --bind-to core:overload-allowed) ;;',
            f'  *) mpi_bind=(-bind-to "core:{n}") ;;',
            "esac",
        ]


def mpiexec_words(spec: JobSpec, binds: bool = False) -> list[Word]:
    """``mpiexec -n WORLD`` with the options of the MPI found at run time (labels, env export)."""
    words: list[Word] = [
        "mpiexec",
        "-n",
        str(spec.resources.world_size),
        ShellVar('"${mpi_opts[@]}"'),
        *([ShellVar('"${mpi_bind[@]}"')] if binds else []),
    ]
    return [*words, *spec.launcher.args, *program_words(spec)]
