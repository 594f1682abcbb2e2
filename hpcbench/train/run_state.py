"""The state of one training run, in three parts: :class:`Learner` (the model and what updates
it), :class:`Position` (where the run is: steps done, the epochs' rows, the losses so far, what a
resumed run carried over) and, in :mod:`.training`, the :class:`~.training.Training` that holds
them beside the run's hooks (:mod:`.hooks`). :func:`.start.start` makes them; :mod:`.loop`
advances them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hpcbench.run_documents import EpochRow
from hpcbench.train.checkpoint_parts import PartialSums
from hpcbench.train.normalize import Normalizer
from hpcbench.train.precision import Precision


@dataclass
class Learner:
    """The model and what trains it: the optimiser and its schedule, the loss, the input
    normalisation and the numeric precision (``--precision``: autocast and fp16 loss scaling)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    criterion: nn.Module
    norm: Normalizer
    precision: Precision

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def evaluating(self) -> tuple[Normalizer, nn.Module, Precision]:
        """What :func:`.loop.evaluate` takes after the strategy, the data and the split."""
        return self.norm, self.criterion, self.precision


@dataclass
class Position:
    """Where the run is, and what it carried over from the checkpoint it resumed from."""

    start_epoch: int = 0  # where this run starts (after --resume)
    start_step: int = 0
    steps_done: int = 0  # training steps so far, over all epochs
    epochs: list[EpochRow] = field(default_factory=list)  # the rows so far
    losses: list[Any] = field(default_factory=list)  # each step's global mean loss so far
    partial: PartialSums | None = None  # a resumed epoch's sums and seconds so far
    checkpoint_s: list[float] = field(default_factory=list)  # each checkpoint's seconds
    resumed_from: str | None = None

    def first_step(self, epoch: int) -> int:
        """The step ``epoch`` starts at: the resumed step in the resumed epoch, else 0."""
        return self.start_step if epoch == self.start_epoch else 0
