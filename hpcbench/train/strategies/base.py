"""The strategy protocol: what the training loop asks of any way of parallelising it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from hpcbench.train.breakdown import NoBreakdown, StepBreakdown
from hpcbench.train.config import TrainConfig
from hpcbench.train.runtime import Runtime

if TYPE_CHECKING:
    from hpcbench.train.data import TrainData


class Strategy:
    """One process, no communication: the defaults every strategy starts from."""

    name = "single"

    def __init__(self, config: TrainConfig, runtime: Runtime) -> None:
        self.config, self.runtime = config, runtime
        self.model: nn.Module | None = None  # what the training step calls
        self.eval_model: nn.Module | None = None  # what evaluation calls (no collectives inside)
        self.loss_scale = 1.0  # multiplies the rank's mean loss before backward
        self.breakdown: NoBreakdown | StepBreakdown = NoBreakdown()  # the loop's step timer

    def setup(self, model: nn.Module, weight: float) -> nn.Module:
        """Place (and wrap) the model; ``weight`` is this rank's share of the global batch."""
        self.model = self.eval_model = model.to(self.runtime.device)
        return self.model

    def describe(self) -> str:
        """One line on how this strategy set itself up (printed under the banner; may be '')."""
        return ""

    def zero_grad(self, optimizer) -> None:
        """Clear the gradients before a step's backward."""
        optimizer.zero_grad(set_to_none=True)

    def gradients(self) -> list[torch.Tensor]:
        """The gradients to check after they are synchronised (as few tensors as can be)."""
        assert self.model is not None
        return [p.grad for p in self.model.parameters() if p.grad is not None]

    def before_forward(self) -> None:
        """Called before each training forward (e.g. to broadcast buffers)."""

    def compute_done_event(self) -> Any:
        """On a GPU, a device event at the end of this step's computation before its gradients'
        last collective, where the strategy records one (None: the step is timed on the
        host). Telemetry's compute time is then device time, with no synchronisation."""
        return None

    def finish_gradients(self) -> float:
        """Called right after backward; returns seconds spent waiting for communication that
        did not overlap the backward pass."""
        return 0.0

    def settled_comm_s(self) -> float:
        """Communication seconds measured on the device since the last call, read once the device
        has caught up (0 where :meth:`finish_gradients` measured them already)."""
        return 0.0

    def share_index(self, data: TrainData, epoch: int) -> np.ndarray | None:
        """This rank's (steps, batch) sample ids of the epoch (global data order)."""
        if data.sharded is not None:
            return None
        return data.rank_slices(data.epoch_index(epoch))[self.runtime.rank]

    def rank_state(self) -> dict[str, Any]:
        """The strategy's own per-rank state that a checkpoint must keep (tensors)."""
        return {}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`rank_state` (called only at the world size that saved it)."""

    def all_reduce(self, values: np.ndarray, op: str = "sum") -> np.ndarray:
        """Element-wise sum or max over ranks of a float64 array (outside the training step)."""
        return values

    def barrier(self) -> None:
        pass

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` (picklable, small, outside training), in rank order, on rank 0;
        None on the other ranks."""
        return [obj]

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (picklable, small, outside training) on every rank."""
        return obj

    def broadcast_tensors(self, tensors: list[torch.Tensor]) -> None:
        """Overwrite ``tensors`` (the same list on every rank) with rank 0's, in place."""

    def abort(self) -> None:
        """Stop every rank now (after this rank failed)."""

    def close(self) -> None:
        pass
