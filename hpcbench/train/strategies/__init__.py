"""Strategies: how replicas of one model on several ranks stay one model.

Each is a small class behind :class:`hpcbench.train.strategies.base.Strategy`: ``single`` (no
wrapper), ``ddp`` (PyTorch DistributedDataParallel), ``mpi`` (mpi4py: Scatter of the index,
bucketed Iallreduce from gradient hooks), ``dp`` (torch.nn.DataParallel over one node's GPUs).
"""

from __future__ import annotations

from hpcbench.launch import MPI_LAUNCHERS
from hpcbench.train.config import ConfigError, TrainConfig
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies.base import Strategy


def choose(config: TrainConfig, runtime: Runtime) -> str:
    if config.strategy != "auto":
        return config.strategy
    if runtime.world_size == 1:
        return "single"
    return "mpi" if runtime.launch.launcher in MPI_LAUNCHERS else "ddp"


def make_strategy(name: str, config: TrainConfig, runtime: Runtime) -> Strategy:
    if config.grad_compression != "none" and name not in ("mpi", "ddp"):
        raise ConfigError(
            f"--grad-compression {config.grad_compression} compresses what ranks send each "
            f"other: it needs --strategy mpi or ddp, not {name}"
        )
    if name == "single":
        if runtime.world_size > 1:
            raise ConfigError(
                f"--strategy single runs one process, but {runtime.world_size} ranks were started (use ddp or mpi)"
            )
        from hpcbench.train.strategies.single import SingleStrategy

        return SingleStrategy(config, runtime)
    if name == "dp":
        from hpcbench.train.strategies.dp import DataParallelStrategy

        return DataParallelStrategy(config, runtime)
    if name == "ddp":
        from hpcbench.train.strategies.ddp import DDPStrategy

        return DDPStrategy(config, runtime)
    if name == "mpi":
        from hpcbench.train.strategies.mpi import MPIStrategy

        return MPIStrategy(config, runtime)
    raise ConfigError(f"unknown strategy {name!r}")
