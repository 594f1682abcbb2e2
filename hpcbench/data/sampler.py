"""Which rows each rank reads, and in what order: the sampler half of the reader (numpy only).

Assignment (fixed for the whole job, so a rank can stage its data once): the split's samples are
taken in shard order and cut into ``world_size`` contiguous ranges whose sizes differ by at most
one. A rank therefore opens only the shards its range overlaps (at most one more than its share,
shared with a neighbour at either end) and reads exactly 1/W of the split's bytes. The shards were
shuffled at conversion time, so every range is a random sample of the split.

Order (a function of seed, epoch and rank only; reproducible): the rank's range is cut into blocks
of ``block_size`` consecutive rows (aligned to multiples of ``block_size`` within each shard), the
block order is shuffled, the resulting sequence is cut into windows of ``window_samples`` samples
(a whole number of batches), and each window is permuted in memory. A block is one sequential read;
a window is the shuffle buffer (WebDataset's ``shuffle(n)``, Streaming's shuffle block).

Every rank yields the same number of batches (``steps``) so that collectives stay matched:

- ``drop`` (training default): ``steps = min over ranks of samples // batch``; each rank skips a
  few samples per epoch (different ones each epoch when shuffling).
- ``pad``: ``steps = ceil(max over ranks of samples / batch)``; short ranks repeat samples from the
  start of their epoch order, as ``DistributedSampler`` does.
- ``none`` (evaluation default): every sample exactly once, the last batch may be short, and ranks
  may differ by one batch; only for loops without per-step collectives.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.data.manifest import DataError

POLICIES = ("drop", "pad", "none")


@dataclass(frozen=True)
class Piece:
    """Consecutive rows [start, stop) of one shard (index into the split's shard list)."""

    shard: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Window:
    """A shuffle buffer: pieces read back to back, then served in ``order`` (None: as read)."""

    number: int
    pieces: tuple[Piece, ...]
    order: np.ndarray | None
    batch_size: int

    @property
    def samples(self) -> int:
        return sum(p.rows for p in self.pieces)

    def places(self) -> np.ndarray | None:
        """Where each row goes: the window's i-th row read (pieces back to back) is served as
        sample ``places[i]`` of its batches laid end to end (the inverse of ``order``); None when
        rows are served as read."""
        if self.order is None:
            return None
        places = np.empty(len(self.order), dtype=np.int64)
        places[self.order] = np.arange(len(self.order))
        return places

    def batch_slices(self) -> Iterator[slice]:
        n = self.samples
        for start in range(0, n, self.batch_size):
            yield slice(start, min(start + self.batch_size, n))


def range_of_rank(total: int, rank: int, world_size: int) -> tuple[int, int]:
    """The contiguous range [lo, hi) of a split's samples that ``rank`` owns."""
    return total * rank // world_size, total * (rank + 1) // world_size


def rank_pieces(shard_sizes: Sequence[int], rank: int, world_size: int) -> list[Piece]:
    lo, hi = range_of_rank(sum(shard_sizes), rank, world_size)
    pieces, offset = [], 0
    for i, size in enumerate(shard_sizes):
        start, stop = max(lo, offset), min(hi, offset + size)
        if start < stop:
            pieces.append(Piece(i, start - offset, stop - offset))
        offset += size
    return pieces


class ShardPlan:
    """The sampler: a rank's pieces, its per-epoch order, and the common number of steps."""

    def __init__(
        self,
        shard_sizes: Sequence[int],
        *,
        rank: int,
        world_size: int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        policy: str = "drop",
        block_size: int = 64,
        window_samples: int = 4096,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of {world_size}")
        if batch_size < 1 or block_size < 1:
            raise ValueError("batch_size and block_size must be at least 1")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.shard_sizes = list(shard_sizes)
        self.rank, self.world_size = rank, world_size
        self.batch_size, self.seed, self.shuffle, self.policy = batch_size, seed, shuffle, policy
        self.block_size = block_size
        self.window_samples = max(batch_size, window_samples // batch_size * batch_size)
        self.pieces = rank_pieces(self.shard_sizes, rank, world_size)
        self.samples = sum(p.rows for p in self.pieces)
        total = sum(self.shard_sizes)
        counts = [
            b - a for a, b in (range_of_rank(total, r, world_size) for r in range(world_size))
        ]
        if policy == "drop":
            self.steps = min(counts) // batch_size
            if self.steps == 0:
                raise DataError(
                    f"{total} samples over {world_size} rank(s) give {min(counts)} per rank: fewer "
                    f"than one batch of {batch_size} (use a smaller batch or the 'pad' policy)"
                )
        elif policy == "pad":
            if min(counts) == 0:
                raise DataError(
                    f"{total} samples cannot be padded over {world_size} ranks: some get none"
                )
            self.steps = math.ceil(max(counts) / batch_size)
        else:
            self.steps = math.ceil(self.samples / batch_size)
        self.shards = sorted({p.shard for p in self.pieces})

    def __len__(self) -> int:
        return self.steps

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, self.rank])

    def blocks(self) -> list[Piece]:
        out = []
        for p in self.pieces:
            start = p.start
            while start < p.stop:
                stop = min(p.stop, (start // self.block_size + 1) * self.block_size)
                out.append(Piece(p.shard, start, stop))
                start = stop
        return out

    def epoch_pieces(self, epoch: int) -> list[Piece]:
        """The rank's rows for one epoch in read order, after the drop/pad policy."""
        blocks = self.blocks()
        if self.shuffle:
            order = self._rng(epoch).permutation(len(blocks))
            blocks = [blocks[i] for i in order]
        if self.policy == "none":
            return blocks
        target = self.steps * self.batch_size
        out, have, i = [], 0, 0
        while have < target:
            b = blocks[i % len(blocks)]
            take = min(b.rows, target - have)
            out.append(Piece(b.shard, b.start, b.start + take))
            have += take
            i += 1
        return out

    def windows(self, epoch: int) -> list[Window]:
        """The epoch cut into shuffle windows; window k goes to DataLoader worker k mod workers."""
        rng = np.random.default_rng([self.seed, epoch, self.rank, 1])
        windows: list[Window] = []
        current: list[Piece] = []
        room = self.window_samples

        def close() -> None:
            nonlocal current, room
            n = sum(p.rows for p in current)
            order = rng.permutation(n) if self.shuffle else None
            windows.append(Window(len(windows), tuple(current), order, self.batch_size))
            current, room = [], self.window_samples

        for p in self.epoch_pieces(epoch):
            start = p.start
            while start < p.stop:
                take = min(room, p.stop - start)
                current.append(Piece(p.shard, start, start + take))
                start += take
                room -= take
                if room == 0:
                    close()
        if current:
            close()
        return windows

    def epoch_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Every batch of the epoch as (shard, row) pairs, in the order a single reader yields
        them. For tests and for reproducing a run's data order elsewhere; the reader does not use it."""
        out = []
        for w in self.windows(epoch):
            rows = [(p.shard, r) for p in w.pieces for r in range(p.start, p.stop)]
            if w.order is not None:
                rows = [rows[i] for i in w.order]
            out.extend(rows[s] for s in w.batch_slices())
        return out
