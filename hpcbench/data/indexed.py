"""Random access by sample id: the reader behind the trainer's ``global`` data order.

In the ``global`` order every run, whatever its number of ranks, sees the same global batches:
one seeded permutation of the split per epoch, each global batch cut into per-rank slices (as
``DistributedSampler`` does). A rank therefore reads samples from every shard. Reads are grouped:
the ids of a batch are sorted, consecutive rows of a shard become one read, and each row lands
straight at its place in the batch (:meth:`hpcbench.data.shards.OpenShard.read_placed`). For
datasets much larger than the page cache prefer the ``shards`` order
(:class:`hpcbench.data.reader.ShardedDataset`), which keeps each rank on its own shards.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import Manifest
from hpcbench.data.shards import OpenShard, check_shard_file


class SampleReader:
    """Read samples of one split by id (0 .. samples-1, in shard order)."""

    def __init__(self, manifest: Manifest, split: str, paths: list[Path] | None = None) -> None:
        self.manifest = manifest
        self.info = manifest.split(split)
        self.paths = paths or [manifest.shard_path(s) for s in self.info.shards]
        for path, shard in zip(self.paths, self.info.shards, strict=True):
            check_shard_file(path, shard)  # sizes bound every read: check them first
        self.starts = np.cumsum([0] + [s.samples for s in self.info.shards])
        self.samples = int(self.starts[-1])
        self._handles: dict[int, OpenShard] = {}
        self._pid = os.getpid()
        self.bytes_read = 0
        self.files_opened = 0
        self.shards_read: set[int] = set()

    def _shard(self, i: int) -> OpenShard:
        if self._pid != os.getpid():
            self._handles, self._pid = {}, os.getpid()
        h = self._handles.get(i)
        if h is None:
            h = OpenShard(
                self.paths[i], self.info.shards[i], self.manifest.shape, self.manifest.dtype
            )
            self._handles[i] = h
            self.files_opened += 1
        return h

    def read(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Images (stored dtype, N×C×H×W) and int64 labels of ``ids``, in that order."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        images = np.empty((n, *self.manifest.shape), dtype=self.manifest.dtype)
        labels = np.empty(n, dtype=np.int64)
        if n == 0:
            return images, labels
        if ids.min() < 0 or ids.max() >= self.samples:
            raise IndexError(f"sample ids must be in 0..{self.samples - 1}")
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        shard_of = np.searchsorted(self.starts, sorted_ids, side="right") - 1
        # runs of consecutive ids within one shard -> one read each, rows straight to their place
        breaks = np.flatnonzero((np.diff(sorted_ids) != 1) | (np.diff(shard_of) != 0)) + 1
        cuts = breaks.tolist()
        sorted_labels = np.empty(n, dtype=np.int64)
        for at, stop in zip([0, *cuts], [*cuts, n], strict=True):
            s = int(shard_of[at])
            first = int(sorted_ids[at] - self.starts[s])
            h = self._shard(s)
            self.bytes_read += h.read_placed(first, images, order[at:stop])
            sorted_labels[at:stop] = h.labels[first : first + stop - at]
            self.shards_read.add(s)
        labels[order] = sorted_labels
        return images, labels

    def take_io_stats(self) -> dict[str, int]:
        """Bytes read, files opened and shards read since the last call; the counters restart."""
        out = {
            "bytes_read": self.bytes_read,
            "files_opened": self.files_opened,
            "shards_read": len(self.shards_read),
        }
        self.bytes_read = self.files_opened = 0
        self.shards_read = set()
        return out

    def close(self) -> None:
        for h in self._handles.values():
            h.close()
        self._handles = {}
