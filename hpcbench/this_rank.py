"""The run side's base: what every process started inside an allocation asks about its launch.

Which rank am I, of how many, on which node, started by what (:func:`detect_launch`); is that an
MPI launch (:data:`MPI_LAUNCHERS`); which job is this (:func:`job_id`); how many cores may I use
(:func:`usable_cores`); how do ranks share a whole number of things (:func:`largest_remainder`);
and output that launchers can merge line by line (:func:`line_buffered_output`). The trainer, the
data reader, the converters, the probe and ``hpcbench prep`` all build on this module, which
imports nothing of theirs.

Launch detection: each launcher and batch system is one small reader of environment variables
answering the same questions (:mod:`hpcbench.environments`); the first that recognises the
environment wins, in their order: torchrun, Open MPI, MPICH/Intel MPI (Hydra, or PMI-2 under a
batch system's task launcher), the batch system's own task launcher, then mpi4py's COMM_WORLD if
the program already initialised MPI, and finally a plain single process. The job's id, the
CPUs a task was given and the allocation's first node come from the batch systems' environments
the same way. Pure Python: no torch, no numpy; MPI only if already started.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from hpcbench.environments import Environment, RankVariables, environments
from hpcbench.environments.base import read_int

# Launchers whose ranks are MPI ranks: mpi4py's COMM_WORLD is the launch's world, so the trainer
# defaults to its MPI strategy and exchanges its rendezvous over MPI, and MPI_Abort stops them all.
MPI_LAUNCHERS = frozenset({e.name for e in environments() if e.mpi} | {"mpi4py"})

# A batch system's own task launcher's tasks are MPI ranks too when the program initialises MPI
# through its PMI plugin; a program that wants MPI whenever it can have it (data preparation)
# asks for these.
MPI_CAPABLE_LAUNCHERS = MPI_LAUNCHERS | {e.name for e in environments() if e.mpi_capable}

# hpcbench's own variable for the job's id: every rendered script exports it (the local scheduler
# sets only it); each batch system's comes after it
JOB_ID_VARIABLE = "HPCBENCH_JOB_ID"


@dataclass(frozen=True)
class LaunchInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    launcher: str  # an environment's name (torchrun, openmpi, mpich…), mpi4py or single
    hostname: str

    def as_dict(self) -> dict:
        return asdict(self)


def _task_place(attribute: str) -> tuple[str, ...]:
    """The batch systems' variables of a task's ``attribute`` (``task_local``, ``task_node``,
    ``tasks_per_node``), in their order."""
    return tuple(v for e in environments() for v in getattr(e, attribute))


def _read(environment: type[Environment], env: Mapping[str, str]) -> LaunchInfo | None:
    """``environment``'s launch, if ``env`` is one of its."""
    v: RankVariables | None = environment.ranks
    if v is None:
        return None
    rank, world = read_int(env, *v.rank), read_int(env, *v.world)
    if rank is None or world is None or (v.requires and v.requires not in env):
        return None
    task = environment.reads_task_place
    local = read_int(env, *v.local, *(_task_place("task_local") if task else ()))
    node = read_int(env, *v.node, *(_task_place("task_node") if task else ()))
    local_world = (
        read_int(env, *v.local_world) or read_int(env, *_task_place("tasks_per_node")) or world
    )
    local = rank % local_world if local is None else local
    node = rank // local_world if node is None else node
    return LaunchInfo(rank, world, local, local_world, node, environment.name, socket.gethostname())


def _mpi4py_world() -> LaunchInfo | None:
    """An MPI whose variables we do not know: ask mpi4py, but only if the program already
    initialised it (importing mpi4py here would start MPI in every plain Python process)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    world = mpi.COMM_WORLD
    if world.Get_size() < 2:
        return None
    local = world.Split_type(mpi.COMM_TYPE_SHARED)
    try:
        leaders = world.Split(0 if local.Get_rank() == 0 else mpi.UNDEFINED, world.Get_rank())
        node = leaders.Get_rank() if leaders != mpi.COMM_NULL else -1
        node = local.bcast(node, root=0)
        if leaders != mpi.COMM_NULL:
            leaders.Free()
        return LaunchInfo(
            world.Get_rank(),
            world.Get_size(),
            local.Get_rank(),
            local.Get_size(),
            node,
            "mpi4py",
            socket.gethostname(),
        )
    finally:
        local.Free()


def detect_launch(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """The launch this process belongs to (a single process when no launcher is recognised)."""
    env = os.environ if env is None else env
    for environment in environments():
        info = _read(environment, env)
        if info is not None:
            return info
    if env is os.environ:
        info = _mpi4py_world()
        if info is not None:
            return info
    return LaunchInfo(0, 1, 0, 1, 0, "single", socket.gethostname())


def is_mpi_launch(info: LaunchInfo, *, srun_counts: bool = False) -> bool:
    """Whether ``info``'s ranks are MPI ranks (several of them, started by an MPI launcher);
    ``srun_counts``: also srun's tasks, which are when the program initialises MPI."""
    launchers = MPI_CAPABLE_LAUNCHERS if srun_counts else MPI_LAUNCHERS
    return info.world_size > 1 and info.launcher in launchers


def job_id(env: Mapping[str, str] | None = None) -> str | None:
    """The scheduler's id of the job this process runs in (None outside a job)."""
    env = os.environ if env is None else env
    batch = [e.job_id_variable for e in environments() if e.job_id_variable]
    for name in (JOB_ID_VARIABLE, *batch):
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def cpus_per_task(env: Mapping[str, str] | None = None) -> int | None:
    """The CPUs the batch system gave each task (None where it says nothing)."""
    env = os.environ if env is None else env
    found = read_int(env, *(e.cpus_per_task_variable for e in environments()))
    return found if found and found > 0 else None


def cpus_on_node(env: Mapping[str, str] | None = None) -> int | None:
    """The CPUs the batch system gave the job on this node (None where it says nothing)."""
    env = os.environ if env is None else env
    found = read_int(env, *(e.cpus_on_node_variable for e in environments()))
    return found if found and found > 0 else None


def cpus_per_task_variables() -> list[str]:
    """The variables :func:`cpus_per_task` reads, for help texts."""
    return [e.cpus_per_task_variable for e in environments() if e.cpus_per_task_variable]


def first_node(env: Mapping[str, str] | None = None) -> str | None:
    """The first host of the job's allocation where the batch system says it (None outside a
    job, or where it does not)."""
    env = os.environ if env is None else env
    return next((h for e in environments() if (h := e.first_node(env))), None)


def node_name(env: Mapping[str, str] | None = None) -> str:
    """This process's node as the batch system names it (its host name where it does not); on
    the local scheduler's emulated nodes, ``host:nodeN``."""
    env = os.environ if env is None else env
    named = next(
        (env[v] for e in environments() if (v := e.node_name_variable) and env.get(v)), None
    )
    host = named or socket.gethostname()
    emulated = env.get("HPCBENCH_NODE", "")
    return f"{host}:node{emulated}" if emulated.isdigit() else host


def container(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The container this process runs in, as the batch script names it (``runtime`` and
    ``image``; None outside one, or outside a job's script)."""
    env = os.environ if env is None else env
    image = env.get("HPCBENCH_CONTAINER_IMAGE", "")
    if not image:
        return None
    return {"runtime": env.get("HPCBENCH_CONTAINER_RUNTIME", "")[:64], "image": image[:4096]}


def node_list(env: Mapping[str, str] | None = None) -> str | None:
    """The job's hosts as the batch system writes them (None where it does not)."""
    env = os.environ if env is None else env
    return next((n for e in environments() if (n := e.node_list(env))), None)


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a job's
    cgroup or cpuset), else every core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split into whole shares proportional to ``weights`` (positive, not all zero),
    summing to ``total``: each share rounded down, then the leftover units given one each to the
    largest remainders (ties to the earlier share)."""
    scale = sum(weights)
    raw = [total * w / scale for w in weights]
    shares = [int(x) for x in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: raw[i] - shares[i], reverse=True)
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def line_buffered_output() -> None:
    """Write stdout and stderr a whole line at a time, at once.

    Launchers label and merge the ranks' output per write (MPICH's -prepend-rank) or per line, so
    a line must reach them in one write, and without delay; PYTHONUNBUFFERED would split a print
    into two writes, block buffering would hold lines back until exit.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)
