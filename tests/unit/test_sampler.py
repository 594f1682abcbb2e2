"""The sampler half of the reader (pure numpy): which rows each rank reads, in which order."""

from __future__ import annotations

from collections import Counter

import pytest

from hpcbench.data.manifest import DataError
from hpcbench.data.sampler import ShardPlan, rank_pieces

SIZES = [1000, 1000, 1000, 650]  # shards of a 3650-sample split


def rows_of(plan: ShardPlan, epoch: int) -> list[tuple[int, int]]:
    return [r for b in plan.epoch_batches(epoch) for r in b]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_ranks_own_disjoint_contiguous_ranges_covering_the_split(world):
    owned = [
        (p.shard, r)
        for rank in range(world)
        for p in rank_pieces(SIZES, rank, world)
        for r in range(p.start, p.stop)
    ]
    assert len(owned) == sum(SIZES) and len(set(owned)) == sum(SIZES)
    counts = [sum(p.rows for p in rank_pieces(SIZES, rank, world)) for rank in range(world)]
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("policy", ["drop", "pad"])
def test_every_rank_yields_the_same_number_of_full_batches(world, policy):
    plans = [
        ShardPlan(SIZES, rank=r, world_size=world, batch_size=64, policy=policy)
        for r in range(world)
    ]
    for epoch in (0, 1):
        batches = [p.epoch_batches(epoch) for p in plans]
        assert len({len(b) for b in batches}) == 1
        assert len(batches[0]) == plans[0].steps
        assert all(len(b) == 64 for bs in batches for b in bs)
    if policy == "drop":  # a rank never reads a row twice and never another rank's row
        seen = [set(rows_of(p, 0)) for p in plans]
        assert sum(len(s) for s in seen) == len(set().union(*seen))


def test_policy_none_yields_every_sample_exactly_once():
    plan = ShardPlan(SIZES, rank=1, world_size=3, batch_size=100, policy="none")
    rows = rows_of(plan, 5)
    own = {(p.shard, r) for p in plan.pieces for r in range(p.start, p.stop)}
    assert Counter(rows) == Counter(own)
    assert len(plan.epoch_batches(5)[-1]) == len(own) % 100 or len(own) % 100 == 0


def test_order_is_reproducible_per_epoch_and_changes_between_epochs():
    a = ShardPlan(SIZES, rank=0, world_size=2, batch_size=32, seed=3)
    b = ShardPlan(SIZES, rank=0, world_size=2, batch_size=32, seed=3)
    assert a.epoch_batches(4) == b.epoch_batches(4)
    assert a.epoch_batches(4) != a.epoch_batches(5)
    assert a.epoch_batches(4) != ShardPlan(
        SIZES, rank=0, world_size=2, batch_size=32, seed=4
    ).epoch_batches(4)
    # Shuffling mixes rows from different blocks inside a batch.
    first = a.epoch_batches(0)[0]
    assert len({r // a.block_size for _, r in first}) > 4


def test_no_shuffle_reads_in_file_order():
    plan = ShardPlan(SIZES, rank=0, world_size=1, batch_size=10, shuffle=False, policy="none")
    assert rows_of(plan, 0)[:3] == [(0, 0), (0, 1), (0, 2)]
    assert rows_of(plan, 0) == rows_of(plan, 1)


def test_blocks_are_aligned_to_the_block_size_within_a_shard():
    plan = ShardPlan(SIZES, rank=1, world_size=3, batch_size=8, block_size=64)
    for b in plan.blocks():
        assert b.start // 64 == (b.stop - 1) // 64


def test_windows_split_between_workers_read_each_row_once():
    plan = ShardPlan(SIZES, rank=0, world_size=1, batch_size=64, window_samples=512)
    windows = plan.windows(0)
    assert len(windows) > 2
    rows = [(p.shard, r) for w in windows for p in w.pieces for r in range(p.start, p.stop)]
    assert len(rows) == len(set(rows)) == plan.steps * 64
    assert all(w.samples % 64 == 0 for w in windows)


def test_too_few_samples_for_one_batch_per_rank_is_a_clear_error():
    with pytest.raises(DataError, match="fewer than one batch of 64"):
        ShardPlan([100], rank=0, world_size=4, batch_size=64)
    with pytest.raises(ValueError, match="rank 4 is not in a world of 4"):
        ShardPlan([100], rank=4, world_size=4, batch_size=1)
