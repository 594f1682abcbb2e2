"""Checkpointing a run: the choreography around the file format of :mod:`.checkpoint_file`.

:func:`save` is called by every rank at the same step: the replicas' parameter checksums are
compared (a difference stops the run before anything is written), every rank's generators and
buffers are gathered, the partial epoch's sums reduced, and rank 0 writes. :func:`load` finds the
checkpoint ``--resume`` names, checks it against this run and restores it on every rank. Both take
the parts they touch (strategy, optimiser, schedule, precision, position), not the run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hpcbench.run_documents import Checkpoints
from hpcbench.train import checkpoint_file as ckpt
from hpcbench.train.checkpoint_parts import (
    CheckpointPosition,
    CheckpointProgress,
    DatasetDescription,
    Fingerprint,
    PartialSums,
)
from hpcbench.train.precision import Precision
from hpcbench.train.strategies.base import Strategy


@dataclass
class Restored:
    """Where a resumed run continues: the checkpoint's file, position and progress so far."""

    path: Path
    epoch: int
    step: int
    steps_done: int
    world_size: int  # of the run that wrote it
    progress: CheckpointProgress


def save(
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    precision: Precision,
    *,
    directory: Path,
    keep: int,
    fingerprint: Fingerprint,
    position: CheckpointPosition,
    progress: CheckpointProgress,
    dataset: DatasetDescription,
    partial: tuple[np.ndarray, list[float]] | None = None,
) -> Path | None:
    """Write the checkpoint of ``position`` -- every rank calls this at the same step.
    ``partial``: this rank's meter vector and (train, data, comm) seconds of the epoch so far,
    when the checkpoint falls inside an epoch. Returns the file on rank 0."""
    assert strategy.eval_model is not None
    steps_done = position["steps_done"]
    mine = ckpt.parameter_checksum(strategy.eval_model)
    low, high = strategy.all_reduce(np.array([-mine, mine]), "max")
    if -low != high:
        raise RuntimeError(
            f"the model replicas differ between ranks at step {steps_done} (parameter "
            f"checksums {-float(low)!r} and {float(high)!r}): no checkpoint written"
        )
    ranks = strategy.gather_object(
        {**ckpt.rank_state(strategy.eval_model), "strategy": strategy.rank_state()}
    )
    sums: PartialSums | None = None
    if partial is not None:
        vector, times = partial
        sums = {
            "meter": torch.from_numpy(strategy.all_reduce(vector)),
            "times": torch.from_numpy(strategy.all_reduce(np.array(times), "max")),
        }
    path = None
    if strategy.runtime.rank == 0:
        payload = ckpt.payload(
            fp=fingerprint,
            strategy=strategy,
            optimizer=optimizer,
            schedule=schedule,
            position=position,
            ranks=ranks,
            progress={**progress, "partial": sums},
            dataset=dataset,
            amp=precision.state_dict(),
        )
        try:
            path = ckpt.write(directory, steps_done, payload, keep)
        except OSError as err:
            failed = OSError(
                err.errno,
                f"cannot write the checkpoint of step {steps_done} in {directory} "
                f"({err.strerror}); the previous checkpoints are intact",
            )
            raise failed from None
    strategy.barrier()
    return path


def load(
    resume: str | None,
    directory: Path,
    fingerprint: Fingerprint,
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    precision: Precision,
    log: Callable[[str], None],
) -> Restored | None:
    """The checkpoint ``resume`` names (``auto``: the newest usable one in ``directory``),
    restored on every rank: weights, optimiser, schedule, loss scale, random generators; None
    when there is none to resume from."""
    rank = strategy.runtime.rank
    found = ckpt.find(resume, directory, warn_on(rank), fingerprint, strategy.runtime.world_size)
    if found is None:
        if resume == "auto" and directory.exists():  # silent on a first run
            log(f"no usable checkpoint in {directory}: starting afresh")
        return None
    ckpt.restore(found, strategy, optimizer, schedule, rank)
    precision.load_state_dict(found.payload.get("amp", {}))
    pos = found.payload["position"]
    return Restored(
        path=found.path,
        epoch=pos["epoch"],
        step=pos["step"],
        steps_done=pos["steps_done"],
        world_size=pos["world_size"],
        progress=found.payload["progress"],
    )


def warn_on(rank: int) -> Callable[[str], None]:
    """A warning printer for rank 0 (stderr); silent on the other ranks."""

    def warn(message: str) -> None:
        if rank == 0:
            print(message, file=sys.stderr, flush=True)

    return warn


def record(
    enabled: bool, directory: Path, seconds: list[float], resumed_from: str | None
) -> Checkpoints:
    """What ``metrics.json`` says of checkpoints: where, how many, how long each took (the
    lead a scheduler's warning signal needs), and what this run resumed from."""
    return {
        "enabled": enabled,
        "directory": str(directory),
        "written": len(seconds),
        "max_s": max(seconds) if seconds else None,
        "mean_s": sum(seconds) / len(seconds) if seconds else None,
        "resumed_from": resumed_from,
    }
