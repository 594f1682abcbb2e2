"""How often hpcbench asks a scheduler while it waits: a backoff from a first interval to a
ceiling (the scheduler's, or ``$HPCBENCH_POLL_CEILING``), and sleeping between polls while
showing a job's progress."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

from hpcbench.jobs.schedulers.errors import SchedulerError

POLL_CEILING_VARIABLE = "HPCBENCH_POLL_CEILING"
POLL_CEILING_RANGE = (0.5, 600.0)


def poll_ceiling(default: float) -> float:
    """The longest wait between two polls of a scheduler: its own ``default``, or
    ``$HPCBENCH_POLL_CEILING`` seconds where that is shorter (a private or test cluster whose
    controller may be asked every second, so that a job's end is seen sooner). A value that is
    not a number from 0.5 to 600 is a SchedulerError naming the variable."""
    raw = os.environ.get(POLL_CEILING_VARIABLE, "").strip()
    if not raw:
        return default
    low, high = POLL_CEILING_RANGE
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not low <= seconds <= high:
        raise SchedulerError(
            f"{POLL_CEILING_VARIABLE}={raw[:40]!r}: must be seconds from {low:g} to {high:g}"
        )
    return min(default, seconds)


def check_poll_ceiling() -> None:
    """Raise the SchedulerError of a bad ``$HPCBENCH_POLL_CEILING`` now: commands that submit and
    then wait call it before they submit anything."""
    poll_ceiling(POLL_CEILING_RANGE[1])


def backoff_intervals(start: float, ceiling: float, factor: float = 2.0) -> Iterator[float]:
    """Poll intervals: ``start``, then doubling, then ``ceiling`` for ever (submitit's pattern)."""
    delay = start
    while True:
        yield delay
        delay = min(ceiling, delay * factor)


def sleep_ticking(seconds: float, on_tick: Callable[[], None] | None, tick: float = 1.0) -> None:
    end = time.monotonic() + seconds
    while True:
        if on_tick is not None:
            on_tick()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, tick) if on_tick is not None else left)
