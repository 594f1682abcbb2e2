"""How a run stops on purpose, on every rank at once, without MPI_Abort.

MPI_Abort ends every rank, but its exit status is 1 whatever the cause and it may cut output
short; it stays the way out of errors that only one rank meets (a failed read, a bug). Two kinds of
stop are instead decided identically on every rank, which then leave by themselves:

- **Set-up checks** (run directory, dataset, batch split, model): every rank runs them, then one
  all-reduce tells every rank whether any failed (:func:`agree`). The lowest failing rank reports
  its error; the others leave quietly (:class:`StoppedTogether`) with the same exit status: 2 for
  an option or dataset the user can fix, else 1.
- **Divergence** (:class:`TrainingDiverged`): decided from values that are the same on every rank
  (gradients after their all-reduce, the epoch's all-reduced loss), so every rank stops at the
  same step with no extra communication.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from hpcbench.data.manifest import DataError
from hpcbench.train.config import ConfigError

if TYPE_CHECKING:
    from hpcbench.train.strategies.base import Strategy

T = TypeVar("T")

USAGE_ERRORS = (ConfigError, DataError)
AGREED = "hpcbench_agreed"  # attribute set on an error every rank stops on together
EXIT = "hpcbench_exit"  # attribute: the exit status the ranks agreed on


class TrainingDiverged(Exception):
    """The loss or the synchronised gradients stopped being finite numbers (exit 1, no results)."""


class StoppedTogether(Exception):
    """This rank stops because another rank's error, reported there, was agreed on."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"stopped with the other ranks (exit {exit_code})")
        setattr(self, EXIT, exit_code)


def exit_code(err: BaseException) -> int:
    """The status agreed on by the ranks, else 75 for a stop on request (after a checkpoint),
    2 for an option or dataset the user can fix, else 1."""
    from hpcbench.train.stopping import STOPPED_EXIT, Stopped

    agreed = getattr(err, EXIT, None)
    if isinstance(agreed, int):
        return agreed
    if isinstance(err, Stopped):
        return STOPPED_EXIT
    return 2 if isinstance(err, USAGE_ERRORS) else 1


def stopped_together(err: BaseException) -> bool:
    """Whether every rank raised at the same point (no rank needs stopping from outside)."""
    return getattr(err, AGREED, False)


def stop_together(err: BaseException) -> BaseException:
    setattr(err, AGREED, True)
    return err


def diverged(message: str, rank: int) -> BaseException:
    """The error to raise on ``rank`` when every rank found the same non-finite value: rank 0
    reports it, the others stop quietly."""
    err = TrainingDiverged(message) if rank == 0 else StoppedTogether(1)
    return stop_together(err)


def agree(strategy: Strategy, stage: Callable[[], T]) -> T:
    """Run one set-up stage on every rank; if it failed on any, raise on every rank.

    One all-reduce (max) of [world - rank of a failing rank, 1 if its error is not a usage
    error]: every rank learns the lowest failing rank and the exit status."""
    rank, world = strategy.runtime.rank, strategy.runtime.world_size
    if world == 1:
        return stage()
    error: Exception | None = None
    result: T | None = None
    try:
        result = stage()
    except Exception as err:  # any error: agreed on below, then re-raised
        error = err
    mine = np.zeros(2)
    if error is not None:
        mine[:] = world - rank, 0.0 if isinstance(error, USAGE_ERRORS) else 1.0
    lowest, unexpected = strategy.all_reduce(mine, "max")
    if lowest == 0:
        return result  # type: ignore[return-value]
    code = 1 if unexpected else 2
    first = world - int(lowest)
    if error is None or (rank != first and isinstance(error, USAGE_ERRORS)):
        raise stop_together(StoppedTogether(code))
    setattr(error, EXIT, code)
    raise stop_together(error)


def diverged_at_step(
    epoch: int, step: int, world: int, loss: float, lr: float, rank: int
) -> BaseException:
    return diverged(
        f"training diverged at epoch {epoch + 1}, step {step + 1}: the gradients summed over "
        f"{world} rank(s) are not finite (rank {rank}'s loss {float(loss):.4g}, lr {lr:.4g}); "
        "no results written (lower --lr, or add --warmup-epochs)",
        rank,
    )


def diverged_in_epoch(epoch: int, world: int, loss: float, rank: int) -> BaseException:
    return diverged(
        f"training diverged in epoch {epoch + 1}: the mean training loss over {world} rank(s) "
        f"is {loss}; no results written (lower --lr, or add --warmup-epochs)",
        rank,
    )
