"""Mixed precision (``--precision fp32|bf16|fp16``): autocast around the forward and the loss,
loss scaling for fp16, for every strategy.

- The weights, their gradients and the optimiser's state stay float32 (autocast runs the matmuls
  and convolutions in the 16-bit type and keeps precision-sensitive operations, the loss among
  them, in float32). So every strategy's gradient reduction stays float32, exactly as in fp32
  training: DDP's and the mpi strategy's buckets hold float32 gradients. A sum of 16-bit
  gradients over many ranks would lose the small ones; ``--grad-compression`` is the separate,
  explicit choice of sending them as 16-bit numbers.
- ``bf16`` has float32's range: no loss scaling. It runs on CPUs (autocast's CPU bf16 kernels)
  and on GPUs from Ampere on.
- ``fp16`` has a narrow range: the loss is multiplied by a scale before backward
  (:class:`torch.amp.GradScaler`), the gradients are unscaled after the reduction, and a step
  whose gradients overflowed is skipped and the scale lowered. The reduction comes before the
  overflow check, so every rank sees the same summed gradients, skips the same steps and keeps
  the same scale; the scale is saved in checkpoints.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from hpcbench.jsonfile import JSONObject
from hpcbench.run_documents import Precision as PrecisionRecord
from hpcbench.train.finite import step_unless

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """Autocast and loss scaling for one run."""

    def __init__(self, name: str = "fp32", device: torch.device | None = None) -> None:
        self.name = name
        self.dtype = DTYPES[name]
        self.device_type = (device or torch.device("cpu")).type
        self.scaler = (
            torch.amp.GradScaler(self.device_type, init_scale=2.0**16) if name == "fp16" else None
        )
        self._skipped: torch.Tensor | int = 0  # fp16 steps skipped (a device count)

    def autocast(self) -> Any:
        """The context of the forward pass and the loss (and of evaluation)."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the (reduced) gradients by the loss scale, before they are checked."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, flag: torch.Tensor | None) -> None:
        """Apply the step unless ``flag`` (:func:`hpcbench.train.finite.nonfinite_flag`) says
        the gradients are not finite; under fp16 such a step is an overflow: the scaler skips it
        and lowers the scale. No host read where the optimiser is fused."""
        if self.scaler is None:
            step_unless(optimizer, flag)
            return
        self.scaler.step(optimizer)  # skipped when unscale_ found an inf or nan
        self.scaler.update()
        if flag is not None:
            self._skipped = flag + self._skipped

    @property
    def skipped(self) -> int:
        """fp16 steps skipped for overflowed gradients (a host read)."""
        return int(self._skipped)

    @property
    def diverges(self) -> bool:
        """Whether a non-finite step is a divergence (not under fp16: an overflow, skipped)."""
        return self.scaler is None

    def record(self) -> PrecisionRecord:
        """What ``metrics.json`` says (``precision``): the type, and fp16's skipped steps and
        final loss scale."""
        if self.scaler is None:
            return {"name": self.name, "skipped_steps": None, "loss_scale": None}
        return {
            "name": self.name,
            "skipped_steps": self.skipped,
            "loss_scale": float(self.scaler.get_scale()),
        }

    def state_dict(self) -> JSONObject:
        return {} if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: JSONObject) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
