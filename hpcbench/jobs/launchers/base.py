"""The shape of a launcher: a small class that says how a batch script starts the job's ranks.

A launcher answers the same few questions for every batch system: the words of the launch line
(:meth:`Launcher.words`), whether it starts one agent per node that starts the node's ranks
itself (torchrun) or one task per rank (mpiexec, srun), whether its agents meet at a rendezvous,
and under which batch systems it runs. It knows no scheduler: a scheduler hands it the way to
start one process on each node of the allocation (its ``node_agents``). What each rank runs (the
program, inside the job's container if there is one) is :func:`program_words`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from hpcbench.jobs.containers import rank_prefix
from hpcbench.jobs.shell import ShellVar, Word, path_word
from hpcbench.jobs.spec import JobSpec, OwnOption, own_value


class LaunchError(ValueError):
    """A launcher that cannot work with the chosen scheduler; one line naming the field."""


class NodeStarter(Protocol):
    """What a launcher asks of the scheduler: how to start one process on each node."""

    #: it plays every batch system on one machine (the local scheduler)
    plays_every_system: ClassVar[bool]

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]: ...


class Launcher:
    """One way to start ranks. A subclass with a ``name``, in its own module of this package, is
    a launcher: ``--launcher NAME`` and ``launcher.kind`` take it, and every scheduler's template
    renders it without an edit."""

    #: the name users give (``--launcher NAME``, ``launcher.kind``)
    name: ClassVar[str] = ""
    #: where it stands among the choices ``--help`` lists (lowest first)
    order: ClassVar[int] = 50
    #: one agent per node that starts the node's ranks (its task holds all their CPUs), rather
    #: than one scheduler task per rank
    agent_per_node: ClassVar[bool] = False
    #: the one batch system it runs under, by the scheduler's name ('' for any)
    only_under: ClassVar[str] = ""
    #: the launcher a scheduler that plays every batch system on one machine starts instead
    stand_in: ClassVar[str] = ""
    #: it starts the program itself as the job's one process: a job of more is refused
    one_process: ClassVar[bool] = False

    #: the job spec fields only this launcher reads (:class:`~hpcbench.jobs.spec.OwnOption`)
    options: ClassVar[tuple[OwnOption, ...]] = ()

    @classmethod
    def option(cls, spec: JobSpec, key: str) -> Any:
        """The value of its own option ``key`` in ``spec`` (the declared default if unset)."""
        return own_value(cls.options, spec, key)

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        """The launch line of a batch script."""
        raise NotImplementedError

    @classmethod
    def needs_rendezvous(cls, spec: JobSpec) -> bool:
        """Whether its agents meet at ``$head_node:$rdzv_port`` (the template finds them)."""
        return False

    @classmethod
    def placement_lines(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[str] | None:
        """The shell lines before the launch that bind the ranks as ``launcher.placement`` asks
        (:mod:`.placement`); None: it binds nothing itself, hpcbench's rank start does."""
        return None

    @classmethod
    def node_agent(cls, spec: JobSpec) -> list[Word]:
        """The agent of one node, for a scheduler that plays every node on one machine and starts
        the agents itself ([] when the launcher starts every rank from one command)."""
        return []


#: what each rank's program words begin with: hpcbench's rank start where it binds the rank
#: (the batch script sets the array, :mod:`.placement`), else nothing
RANK_START: Word = ShellVar('${rank_start[@]+"${rank_start[@]}"}')


def container_prefix(spec: JobSpec) -> list[Word]:
    """The container runtime's words before each rank's program (``apptainer exec --nv --bind …
    IMAGE``, ``ch-run … IMAGE --``) when the spec names a container, else nothing."""
    return rank_prefix(spec)


def program_args(spec: JobSpec) -> list[Word]:
    """The program's arguments: ``--config FILE`` first when the spec names one, then ``args``
    (the trainer lets flags override its file wherever they stand), then an array task's own
    (read by the script from its task's file)."""
    p = spec.program
    args: list[Word] = ["--config", path_word(p.config), *p.args] if p.config else list(p.args)
    if spec.array is not None and spec.array.task_args:
        # bash before 4.4 calls an empty array unbound under set -u: expand it only when set
        args.append(ShellVar('${task_args[@]+"${task_args[@]}"}'))
    return args


def program_words(spec: JobSpec) -> list[Word]:
    """What each rank runs, inside the container if there is one, after the rank start."""
    p = spec.program
    args = program_args(spec)
    if p.command:
        argv: list[Word] = [*p.command, *args]
    elif p.script:
        argv = [path_word(p.python), path_word(p.script), *args]
    else:
        argv = [path_word(p.python), "-m", p.module or "", *args]
    return [*container_prefix(spec), RANK_START, *argv]
