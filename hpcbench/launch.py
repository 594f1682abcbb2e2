"""The run side's base: what every process started inside an allocation asks about its launch.

Which rank am I, of how many, on which node, started by what (:func:`detect_launch`); is that an
MPI launch (:data:`MPI_LAUNCHERS`); which job is this (:func:`job_id`); how many cores may I use
(:func:`usable_cores`); how do ranks share a whole number of things (:func:`largest_remainder`);
and output that launchers can merge line by line (:func:`line_buffered_output`). The trainer, the
data reader, the converters, the probe and ``hpcbench prep`` all build on this module, which
imports nothing of theirs.

Launch detection: each launcher is one small reader of environment variables answering the same
questions; the first that recognises the environment wins, in this order: torchrun, Open MPI,
MPICH/Intel MPI (Hydra or PMI-2 under srun), SLURM's srun, then mpi4py's COMM_WORLD if the
program already initialised MPI, and finally a plain single process. Pure Python: no torch, no
numpy; MPI only if already started.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

# Launchers whose ranks are MPI ranks: mpi4py's COMM_WORLD is the launch's world, so the trainer
# defaults to its MPI strategy and exchanges its rendezvous over MPI, and MPI_Abort stops them all.
MPI_LAUNCHERS = frozenset({"openmpi", "mpich", "mpi4py"})

# srun's tasks are MPI ranks too when the program initialises MPI through SLURM's PMI plugin; a
# program that wants MPI whenever it can have it (data preparation) asks for these.
MPI_CAPABLE_LAUNCHERS = MPI_LAUNCHERS | {"slurm"}

# Where each scheduler puts the job's id, hpcbench's own first (every rendered script exports it;
# the local scheduler sets only it): SLURM, PBS, Grid Engine, LSF.
JOB_ID_VARIABLES = ("HPCBENCH_JOB_ID", "SLURM_JOB_ID", "PBS_JOBID", "JOB_ID", "LSB_JOBID")


@dataclass(frozen=True)
class LaunchInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    launcher: str  # torchrun | openmpi | mpich | slurm | mpi4py | single
    hostname: str

    def as_dict(self) -> dict:
        return asdict(self)


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def _finish(
    env: Mapping[str, str],
    launcher: str,
    rank: int,
    world: int,
    local: int | None,
    local_world: int | None,
    node: int | None,
) -> LaunchInfo:
    local_world = local_world or _int(env, "SLURM_NTASKS_PER_NODE") or world
    local = rank % local_world if local is None else local
    node = rank // local_world if node is None else node
    return LaunchInfo(rank, world, local, local_world, node, launcher, socket.gethostname())


@dataclass(frozen=True)
class LauncherVariables:
    """Where one launcher puts each rank's place: the variables to read, first found wins
    (local rank, local size and node rank may be missing: they follow from the others)."""

    launcher: str
    rank: tuple[str, ...]
    world: tuple[str, ...]
    local: tuple[str, ...] = ()
    local_world: tuple[str, ...] = ()
    node: tuple[str, ...] = ()
    requires: str = ""  # a variable that must also be set for the launch to be this one's

    def read(self, env: Mapping[str, str]) -> LaunchInfo | None:
        rank, world = _int(env, *self.rank), _int(env, *self.world)
        if rank is None or world is None or (self.requires and self.requires not in env):
            return None
        return _finish(
            env,
            self.launcher,
            rank,
            world,
            _int(env, *self.local),
            _int(env, *self.local_world),
            _int(env, *self.node),
        )


#: the launchers recognised from their variables, asked in this order
LAUNCHER_VARIABLES: tuple[LauncherVariables, ...] = (
    LauncherVariables(
        "torchrun",
        ("RANK",),
        ("WORLD_SIZE",),
        ("LOCAL_RANK",),
        ("LOCAL_WORLD_SIZE",),
        ("GROUP_RANK",),
        requires="LOCAL_RANK",
    ),
    LauncherVariables(
        "openmpi",
        ("OMPI_COMM_WORLD_RANK",),
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        ("OMPI_COMM_WORLD_NODE_RANK",),
    ),
    LauncherVariables(
        "mpich",
        ("PMI_RANK",),
        ("PMI_SIZE",),
        ("MPI_LOCALRANKID", "SLURM_LOCALID"),
        ("MPI_LOCALNRANKS",),
        ("SLURM_NODEID",),
    ),
    # SLURM_PROCID alone is set in the batch step too; a task started by srun also has a step id.
    LauncherVariables(
        "slurm",
        ("SLURM_PROCID",),
        ("SLURM_NTASKS",),
        ("SLURM_LOCALID",),
        (),
        ("SLURM_NODEID",),
        requires="SLURM_STEP_ID",
    ),
)


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
    for variables in LAUNCHER_VARIABLES:
        info = variables.read(env)
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
    for name in JOB_ID_VARIABLES:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


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
