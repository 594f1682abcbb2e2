"""What the ranks agree on around each step: whether any rank was asked to stop and the step's
global loss (with the step's finite flags read: :meth:`.hooks.RunHooks.check_finite`), and the
stop every rank raises together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpcbench.train.failures import stop_together
from hpcbench.train.stopping import Stopped, mark
from hpcbench.train.training import Training


def agree_after_step(t: Training, loss: torch.Tensor, weight: float) -> tuple[bool, Any]:
    """Whether any rank received a stop signal, and the step's global mean loss: one all-reduce
    of two numbers (a host read that the multi-rank strategies' step has already paid for; the
    step's non-finite flags are read with it). One rank needs no collective, and its loss stays
    a device number until it is saved (no host synchronisation per step)."""
    requested = t.hooks.stop_requested()
    if t.runtime.world_size == 1:
        return requested, loss
    vector = np.array([1.0 if requested else 0.0, float(loss) * weight])
    t.hooks.check_finite()
    flag, total = t.strategy.all_reduce(vector)
    return flag > 0, float(total)


def loss_values(t: Training) -> list[float]:
    """The per-step losses as numbers (one rank keeps them on the device until now)."""
    position = t.position
    position.losses = [float(x) for x in position.losses]
    return position.losses


def stopped(t: Training, epoch: int, step: int, path: Path | None) -> BaseException:
    """The stop every rank raises together; rank 0 says why, where the checkpoint is, and
    leaves the ``stopped`` mark for the job script."""
    if t.runtime.rank != 0:
        return stop_together(Stopped("stopped with the other ranks"))
    why = t.hooks.stop.describe() if t.hooks.stop.requested else "another rank's stop signal"
    where = f"checkpoint {path}" if path else "no checkpoint (--no-checkpoint)"
    mark(
        "stopped",
        {
            "signal": why,
            "checkpoint": str(path) if path else None,
            "steps_done": t.position.steps_done,
        },
    )
    return stop_together(
        Stopped(
            f"stopped by {why} at epoch {epoch + 1}, step {step} ({t.position.steps_done} steps done): "
            f"{where}; run again with --resume auto to continue"
        )
    )
