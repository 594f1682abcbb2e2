"""Where this rank runs: its device, threads, torch.distributed backend and rendezvous address;
and the run's provenance (:func:`provenance`).

Built on :func:`hpcbench.this_rank.detect_launch` (who started us). Device: ``cuda:<local rank>``
when that many GPUs are visible (``--device auto``), else the CPU with ``threads`` =
``$OMP_NUM_THREADS``, ``$SLURM_CPUS_PER_TASK``, or the node's cores divided among its ranks.
Backend: nccl when every rank of the node has a GPU, else gloo (a CPU rank beside GPU ranks).
Rendezvous for torch.distributed when torchrun did not provide one: ``$MASTER_ADDR``/``$MASTER_PORT``,
else the first host of ``$SLURM_JOB_NODELIST``, else rank 0's hostname sent over MPI; the port
from the job id (as Lightning does), or a free port chosen by rank 0 and sent over MPI.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from hpcbench import __version__
from hpcbench.placement.checks import placement_warnings
from hpcbench.placement.record import PlacementRecord
from hpcbench.run_documents import Provenance
from hpcbench.this_rank import (
    MPI_LAUNCHERS,
    LaunchInfo,
    container,
    cpus_per_task,
    detect_launch,
    first_node,
    job_id,
    node_list,
    usable_cores,
)
from hpcbench.train.strategy_kinds import STRATEGY_KINDS


@dataclass
class Runtime:
    launch: LaunchInfo
    device: torch.device
    threads: int
    backend: str

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def world_size(self) -> int:
        return self.launch.world_size

    @property
    def is_main(self) -> bool:
        return self.launch.rank == 0

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _cpu_threads(launch: LaunchInfo) -> int:
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return cpus_per_task() or max(1, usable_cores() // max(1, launch.local_world_size))


def make_runtime(device: str = "auto", threads: int | None = None) -> Runtime:
    launch = detect_launch()
    gpus = torch.cuda.device_count() if device in ("auto", "cuda") else 0
    if device == "cuda" and gpus == 0:
        from hpcbench.train.config import ConfigError

        raise ConfigError("--device cuda: no GPU is visible (CUDA_VISIBLE_DEVICES, drivers?)")
    on_gpu = gpus > launch.local_rank
    dev = torch.device("cuda", launch.local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(dev)
    n = threads or _cpu_threads(launch)
    torch.set_num_threads(n)
    backend = "nccl" if on_gpu and gpus >= launch.local_world_size else "gloo"
    return Runtime(launch, dev, n, backend)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def job_port(job_id: str | None) -> int | None:
    """The rendezvous port of a job: 20000 + its id's digits mod 20000 (as the rendered scripts
    compute it), so that every rank of one job derives the same port and two jobs rarely share one."""
    digits = re.sub(r"\D", "", job_id or "")
    return 20000 + int(digits) % 20000 if digits else None


def rendezvous(launch: LaunchInfo) -> tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT for torch.distributed (every rank gets the same pair)."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        return addr, int(port)
    job = job_port(job_id())
    if launch.launcher in MPI_LAUNCHERS:
        from mpi4py import MPI

        mine = (socket.gethostname(), int(port) if port else (job or _free_port()))
        return MPI.COMM_WORLD.bcast(mine if launch.rank == 0 else None, root=0)
    host = addr or first_node() or "127.0.0.1"
    return host, int(port) if port else (job or 20000)


def provenance(
    runtime: Runtime,
    strategy_name: str,
    model: str | None = None,
    placement: list[PlacementRecord] | None = None,
) -> Provenance:
    """Where and with what this run ran: versions, host, launcher, job, threads, backend, git,
    every rank's placement and its warnings; for the user's own ``model``, its factory, source
    file and SHA-256."""
    info: Provenance = {
        "hpcbench": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "launcher": runtime.launch.launcher,
        "job_id": job_id(),
        "nodelist": node_list(),
        "container": container(),
        "threads": runtime.threads,
        "backend": runtime.backend if STRATEGY_KINDS[strategy_name].reports_backend else None,
    }
    if placement:
        info["placement"] = placement
        info["placement_warnings"] = placement_warnings(placement)
    if STRATEGY_KINDS[strategy_name].mpi:
        from mpi4py import MPI

        info["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        info["git"] = rev.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["git"] = None
    if model is not None:
        from hpcbench.train.user_model import model_source

        info["model_source"] = model_source(model)
    return info
