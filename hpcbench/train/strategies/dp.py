"""``dp``: torch.nn.DataParallel over the GPUs of one node, in one process (for comparison only:
it replicates the model every step and gathers outputs on GPU 0, so it scales worse than DDP)."""

from __future__ import annotations

import torch
from torch import nn

from hpcbench.train.config import ConfigError, TrainConfig
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies.base import Strategy


class DataParallelStrategy(Strategy):
    name = "dp"

    def __init__(self, config: TrainConfig, runtime: Runtime) -> None:
        super().__init__(config, runtime)
        if torch.cuda.device_count() == 0:
            raise ConfigError(
                "--strategy dp splits batches across GPUs, and no GPU is visible here (use single, ddp or mpi)"
            )
        if runtime.world_size > 1:
            raise ConfigError(
                f"--strategy dp is one process driving all GPUs; {runtime.world_size} ranks were started"
            )

    def setup(self, model: nn.Module, weight: float) -> nn.Module:
        self.eval_model = model.to(self.runtime.device)
        self.model = nn.DataParallel(self.eval_model)
        return self.model
