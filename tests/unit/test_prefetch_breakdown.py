"""The training loop's read-ahead thread (same items, same order, errors where they belong, a
clean stop) and the step breakdown's accounting of nested parts."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hpcbench.train.breakdown import PARTS, NoBreakdown, StepBreakdown, per_step_ms
from hpcbench.train.prefetch import Prefetcher, staged


def numbered(n: int, read: list[int] | None = None):
    for i in range(n):
        if read is not None:
            read.append(i)
        yield i, i * 10


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_prefetcher_yields_every_staged_item_in_order(depth):
    got = list(Prefetcher(numbered(20), lambda a, b: (a, b + 1), depth))
    assert got == [(i, i * 10 + 1) for i in range(20)]
    assert got == list(staged(numbered(20), lambda a, b: (a, b + 1)))


def test_the_prefetcher_reads_at_most_depth_ahead_and_close_stops_it():
    read: list[int] = []
    items = Prefetcher(numbered(1000, read), lambda a, b: a, 3)
    assert next(items) == 0
    time.sleep(0.3)
    assert len(read) <= 1 + 3 + 1  # the one taken, the queue, the one waiting to be queued
    items.close()
    assert not any(t.name == "hpcbench-prefetch" and t.is_alive() for t in threading.enumerate())


def test_a_reading_error_is_raised_by_the_next_that_would_have_returned_it():
    def failing():
        yield 1, 1
        raise OSError("shard 3: unreadable")

    items = Prefetcher(failing(), lambda a, b: a, 2)
    assert next(items) == 1
    with pytest.raises(OSError, match="shard 3"):
        next(items)
    items.close()


def test_the_end_is_final():
    items = Prefetcher(numbered(2), lambda a, b: a, 2)
    assert list(items) == [0, 1]
    with pytest.raises(StopIteration):
        next(items)


def test_a_part_inside_another_is_counted_once_in_the_inner_part(monkeypatch):
    import hpcbench.train.breakdown as breakdown

    now = [100.0]  # a clock the test moves by hand
    monkeypatch.setattr(breakdown.time, "perf_counter", lambda: now[0])
    b = StepBreakdown()
    with b.part("backward"):
        now[0] += 0.05
        with b.part("allreduce_start"):
            now[0] += 0.1
        now[0] += 0.02
    with b.part("optimizer"):
        now[0] += 0.01
    b.step_done()
    assert b.seconds["allreduce_start"] == pytest.approx(0.1)
    assert b.seconds["backward"] == pytest.approx(0.07)  # its own time only
    assert b.seconds["optimizer"] == pytest.approx(0.01)
    ms = per_step_ms(b.vector() + b.vector())  # two ranks alike: the mean is the same
    assert list(ms) == list(PARTS)
    assert ms["backward"] == pytest.approx(70.0) and ms["allreduce_start"] == pytest.approx(100.0)


def test_no_breakdown_times_nothing():
    nb = NoBreakdown()
    with nb.part("forward"):
        pass
    assert per_step_ms(nb.vector()) is None
    assert np.all(nb.vector() == 0)


def test_the_mpi_library_is_asked_whether_it_takes_cuda_buffers():
    """MPICH and Open MPI export ``MPIX_Query_cuda_support``; MPICH's answer follows how it was
    configured, which its version string shows (the mpich wheel: without CUDA)."""
    from tests.conftest import have_module, require

    require(have_module("mpi4py"), "mpi4py (pip install mpi4py mpich)")
    from mpi4py import MPI

    from hpcbench.train.strategies.mpi import mpi_takes_cuda_buffers

    answer = mpi_takes_cuda_buffers()
    assert answer is not None, MPI.Get_library_version()
    built = MPI.Get_library_version()
    if built.startswith("MPICH"):
        assert answer == ("cuda" in built.lower()), built
