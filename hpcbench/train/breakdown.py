"""Where a training step's time goes, part by part, on this rank (``--step-breakdown``).

The loop and the strategy time their parts with :meth:`StepBreakdown.part`; a part timed inside
another (the mpi strategy's bucket work inside backward, which its gradient hooks do) is counted
once, in the inner part: the outer part's figure is its own time only. Each bound synchronises
the device first (a CUDA step's parts are otherwise only their launch times), so the breakdown
slows a GPU step a little; without ``--step-breakdown`` a :class:`NoBreakdown` stands in and
nothing is timed.

The parts, in step order (a strategy may leave some empty):

- ``data``: waiting for this rank's batch and moving it to the device;
- ``buffers``: broadcasting module buffers from rank 0 before the forward (mpi);
- ``forward``: the forward pass and the loss;
- ``backward``: the backward pass itself;
- ``bucket_copy``: copying gradients into or out of communication buckets (staged GPU
  gradients; CPU gradients live in the buckets and need none);
- ``allreduce_start``: starting the buckets' non-blocking all-reduces (mpi);
- ``allreduce_progress``: moving the started all-reduces on from the gradient hooks, during
  backward (mpi: MPI progresses a non-blocking collective only inside MPI calls);
- ``allreduce_wait``: waiting after backward for the all-reduces to finish (mpi; DDP waits
  for its own at the end of backward, inside ``backward``);
- ``finite_check``: checking the synchronised gradients for nan/inf;
- ``optimizer``: the optimiser step and the learning-rate schedule;
- ``agreement``: the step's one small all-reduce (the stop flag and the global loss) and the
  metric update.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

PARTS = (
    "data",
    "buffers",
    "forward",
    "backward",
    "bucket_copy",
    "allreduce_start",
    "allreduce_progress",
    "allreduce_wait",
    "finite_check",
    "optimizer",
    "agreement",
)


class NoBreakdown:
    """Times nothing (the default: no device synchronisation, no clock reads)."""

    enabled = False

    def part(self, name: str) -> Any:
        return nullcontext()

    def step_done(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def vector(self) -> np.ndarray:
        return np.zeros(len(PARTS) + 1)


class StepBreakdown(NoBreakdown):
    """Seconds per part summed over the steps timed so far, and the number of steps."""

    enabled = True

    def __init__(self, synchronize: Callable[[], None] = lambda: None) -> None:
        self.synchronize = synchronize
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.steps = 0
        self._inner: list[float] = []  # per open part: seconds of the parts timed inside it

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        self.synchronize()
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            self.synchronize()
            elapsed = time.perf_counter() - start
            inner = self._inner.pop()
            self.seconds[name] += elapsed - inner
            if self._inner:
                self._inner[-1] += elapsed

    def step_done(self) -> None:
        self.steps += 1

    def vector(self) -> np.ndarray:
        """[seconds per part…, steps] as float64, for one all-reduce (sum over ranks)."""
        return np.array([*(self.seconds[p] for p in PARTS), self.steps], dtype=np.float64)

    def reset(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.steps = 0


def per_step_ms(summed: np.ndarray) -> dict[str, float] | None:
    """Milliseconds per step of each part, the mean over ranks, from the sum over ranks of
    :meth:`StepBreakdown.vector` (None when no step was timed)."""
    steps = summed[-1]
    if steps <= 0:
        return None
    return {p: round(float(s) / steps * 1000, 3) for p, s in zip(PARTS, summed[:-1], strict=True)}
