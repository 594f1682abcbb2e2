"""What the ranks agree on around each step: whether any rank was asked to stop, the step's
global loss, whether any step's gradients were not finite, re-synchronising replicas on
different kinds of device, and the stop every rank raises together."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpcbench.train.failures import diverged_at_step, stop_together
from hpcbench.train.start import Training
from hpcbench.train.stopping import Stopped, mark


def resync(t: Training) -> None:
    """Ranks on different kinds of device take rank 0's state (:mod:`.replicas`)."""
    assert t.strategy.eval_model is not None
    t.replicas.resync(t.strategy, t.strategy.eval_model, t.optimizer, t.steps_done)


def check_verdicts(t: Training) -> None:
    """Stop at the first step since the last look whose gradients were not finite (one host
    read; every rank holds the same flags, from the same synchronised gradients)."""
    bad = t.verdicts.first_bad()
    if bad is not None:
        world, rank = t.runtime.world_size, t.runtime.rank
        raise diverged_at_step(bad.epoch, bad.step, world, bad.loss, bad.lr, rank)


def agree_after_step(t: Training, loss: torch.Tensor, weight: float) -> tuple[bool, Any]:
    """Whether any rank received a stop signal, and the step's global mean loss: one all-reduce
    of two numbers (a host read that the multi-rank strategies' step has already paid for; the
    step's non-finite flags are read with it). One rank needs no collective, and its loss stays
    a device number until it is saved (no host synchronisation per step)."""
    if t.runtime.rank == 0 and not t.stop.requested:
        now = time.monotonic()
        if now - t.request_checked >= 1.0:  # a file look-up a second at most
            t.request_checked = now
            t.stop.read_request_file()  # launchers that do not forward signals (MPICH's Hydra)
    if t.runtime.world_size == 1:
        return t.stop.requested, loss
    vector = np.array([1.0 if t.stop.requested else 0.0, float(loss) * weight])
    check_verdicts(t)
    flag, total = t.strategy.all_reduce(vector)
    return flag > 0, float(total)


def loss_values(t: Training) -> list[float]:
    """The per-step losses as numbers (one rank keeps them on the device until now)."""
    t.losses = [float(x) for x in t.losses]
    return t.losses


def stopped(t: Training, epoch: int, step: int, path: Path | None) -> BaseException:
    """The stop every rank raises together; rank 0 says why, where the checkpoint is, and
    leaves the ``stopped`` mark for the job script."""
    if t.runtime.rank != 0:
        return stop_together(Stopped("stopped with the other ranks"))
    why = t.stop.describe() if t.stop.requested else "another rank's stop signal"
    where = f"checkpoint {path}" if path else "no checkpoint (--no-checkpoint)"
    mark(
        "stopped",
        {"signal": why, "checkpoint": str(path) if path else None, "steps_done": t.steps_done},
    )
    return stop_together(
        Stopped(
            f"stopped by {why} at epoch {epoch + 1}, step {step} ({t.steps_done} steps done): "
            f"{where}; run again with --resume auto to continue"
        )
    )
