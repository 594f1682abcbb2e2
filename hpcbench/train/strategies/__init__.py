"""Strategies: how replicas of one model on several ranks stay one model.

Each is a small class behind :class:`hpcbench.train.strategies.base.Strategy`, in its own module:
``single`` (no wrapper), ``ddp`` (PyTorch DistributedDataParallel), ``mpi`` (mpi4py: Scatter of
the index, bucketed Iallreduce from gradient hooks), ``dp`` (torch.nn.DataParallel over one
node's GPUs). What the rest of hpcbench knows of them without torch is their kind
(:mod:`hpcbench.train.strategy_kinds`, a registry found as every other, plug-ins' kinds declared
under the ``hpcbench.strategies`` entry point included); :func:`make_strategy` imports the one a
run uses, whose class declares the kind's name (``name``).
"""

from __future__ import annotations

import importlib

from hpcbench.this_rank import MPI_LAUNCHERS
from hpcbench.train.config import ConfigError, TrainConfig
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies.base import Strategy
from hpcbench.train.strategy_kinds import STRATEGY_KINDS


def choose(config: TrainConfig, runtime: Runtime) -> str:
    if config.parallelism.strategy != "auto":
        return config.parallelism.strategy
    if runtime.world_size == 1:
        return "single"
    mpi = runtime.launch.launcher in MPI_LAUNCHERS
    return next(
        name
        for name, kind in STRATEGY_KINDS.items()
        if kind.compresses_gradients and kind.mpi == mpi  # the multi-rank one of this launch
    )


def make_strategy(name: str, config: TrainConfig, runtime: Runtime) -> Strategy:
    kind = STRATEGY_KINDS.get(name)
    if kind is None:
        raise ConfigError(f"unknown strategy {name!r}")
    if config.parallelism.grad_compression != "none" and not kind.compresses_gradients:
        raise ConfigError(
            f"--grad-compression {config.parallelism.grad_compression} compresses what ranks send each "
            f"other: it needs --strategy mpi or ddp, not {name}"
        )
    if kind.one_device and runtime.world_size > 1:
        raise ConfigError(
            f"--strategy {name} runs one process, but {runtime.world_size} ranks were started "
            "(use ddp or mpi)"
        )
    module, _, cls = kind.implementation.partition(":")
    strategy: type[Strategy] = getattr(importlib.import_module(module), cls)
    return strategy(config, runtime)
