"""The rank-aware reader: a ``torch.utils.data.IterableDataset`` yielding whole batches.

    ds = ShardedDataset("data/synthetic", "train", batch_size=64)   # rank/world detected
    loader = DataLoader(ds, batch_size=None, num_workers=0)         # batches come ready-made
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for images, labels in loader: ...
        print(ds.io_stats())   # bytes read, files opened, shards touched on this rank

The rows a rank reads and their order come from :class:`hpcbench.data.sampler.ShardPlan` (the
sampler half). This module only reads, one window (shuffle buffer, ``window_bytes``) at a time,
each piece of it (consecutive rows of one shard) with one call, every row landing straight at its
place in the shuffled order (:meth:`hpcbench.data.shards.OpenShard.read_placed`: one
``os.preadv`` with an iovec per row for the contiguous datasets the converters write; small rows
and chunked datasets are read as a run, then placed). Each batch is then a contiguous slice of
the window: raw batches are views of it, with no further copy, and normalised ones are made from
it a few samples at a time, each chunk cast, scaled and shifted while it is in the CPU cache
(:func:`normalized`). Why batches and not samples: a per-sample ``__getitem__`` costs a Python
call and a collate per sample, which is slower than the read itself (benchmarks/loader.py).

Safe with DataLoader workers: worker ``i`` of ``n`` reads windows ``i, i+n, …`` (disjoint, so no
byte is read twice); HDF5 files are opened lazily in the process that reads them and never cross
a fork (h5py handles are not fork-safe); the epoch and the I/O counters live in shared memory, so
``set_epoch`` reaches persistent workers and their reads are counted. Rank and world size, when
not given, come from torch.distributed if it is initialised, else from the launcher
(:func:`hpcbench.this_rank.detect_launch`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from hpcbench.data.manifest import Manifest
from hpcbench.data.sampler import ShardPlan, Window
from hpcbench.data.shards import OpenShard, check_shard_file

MAX_WORKERS = 64  # counter slots: the main process plus up to 63 DataLoader workers
_BYTES, _OPENS, _BATCHES, _SAMPLES = range(4)
DEFAULT_BLOCK_BYTES = 1 << 20
DEFAULT_WINDOW_BYTES = 16 << 20  # the shuffle buffer; 64 MiB measured 1.6x slower (CPU caches)
NORMALIZE_CHUNK_BYTES = 512 << 10  # float32 made per step of the conversion (about one L2 cache)


def normalized(stored: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """float32 ``stored * scale + shift`` in a fresh array, made a few samples at a time: each
    chunk is cast, scaled and shifted while it is in the CPU cache, so memory sees the stored
    bytes read once and the float32 written once (same float32 operations, hence same result, as
    ``np.multiply(stored, scale, dtype=float32) + shift``)."""
    out = np.empty(stored.shape, dtype=np.float32)
    step = max(1, NORMALIZE_CHUNK_BYTES // max(1, out[:1].nbytes))
    for i in range(0, len(out), step):
        chunk = out[i : i + step]
        np.copyto(chunk, stored[i : i + step])
        np.multiply(chunk, scale, out=chunk)
        np.add(chunk, shift, out=chunk)
    return out


def default_rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    from hpcbench.this_rank import detect_launch

    info = detect_launch()
    return info.rank, info.world_size


class ShardedDataset(IterableDataset):
    """This rank's share of one split, as (images, labels) batches.

    ``images``: float32 N×C×H×W normalised with the manifest's train mean/std when ``normalize``
    (the default), else the stored dtype (uint8 0..255 or float16 0..1) for normalising on the
    device. ``labels``: int64. ``shuffle`` defaults to True for train only, ``policy`` to ``drop``
    for train and ``none`` for val/test (see :mod:`hpcbench.data.sampler`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str = "train",
        *,
        batch_size: int,
        rank: int | None = None,
        world_size: int | None = None,
        seed: int = 0,
        shuffle: bool | None = None,
        policy: str | None = None,
        normalize: bool = True,
        stage_dir: str | os.PathLike[str] | None = None,
        block_size: int | None = None,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
    ) -> None:
        super().__init__()
        self.manifest = Manifest.load(root)
        self.split = split
        self.info = self.manifest.split(split)
        if rank is None or world_size is None:
            detected = default_rank_world()
            rank = detected[0] if rank is None else rank
            world_size = detected[1] if world_size is None else world_size
        training = split == "train"
        sample_bytes = self.manifest.sample_bytes
        if block_size is None:
            block_size = max(1, DEFAULT_BLOCK_BYTES // sample_bytes)
        self.plan = ShardPlan(
            [s.samples for s in self.info.shards],
            rank=rank,
            world_size=world_size,
            batch_size=batch_size,
            seed=seed,
            shuffle=training if shuffle is None else shuffle,
            policy=policy or ("drop" if training else "none"),
            block_size=block_size,
            window_samples=max(batch_size, window_bytes // sample_bytes),
        )
        self.rank, self.world_size, self.batch_size = rank, world_size, batch_size
        self.normalize = normalize
        self.paths: list[Path] = [self.manifest.shard_path(s) for s in self.info.shards]
        for i in self.plan.shards:  # sizes bound every allocation below: check them first
            check_shard_file(self.paths[i], self.info.shards[i])
        self.stage_dir = stage_dir
        if stage_dir is not None:
            from hpcbench.data.staging import stage_shards

            mine = [self.info.shards[i] for i in self.plan.shards]
            staged = stage_shards(self.manifest, mine, stage_dir)
            self.paths = [staged.get(p.name, p) for p in self.paths]
        self._epoch = mp.RawValue("q", 0)
        self._counters = mp.RawArray("q", MAX_WORKERS * 4)
        self._touched = mp.RawArray("b", max(1, len(self.info.shards)))
        self._handles: dict[int, OpenShard] = {}
        self._buffer: np.ndarray | None = None
        self._pid = os.getpid()
        self._scale, self._shift = self.manifest.normalization()

    # ---- what the trainer asks --------------------------------------------------------------
    @property
    def classes(self) -> list[str]:
        return self.manifest.classes

    @property
    def num_classes(self) -> int:
        return self.manifest.num_classes

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        c, h, w = self.manifest.shape
        return c, h, w

    @property
    def samples_per_epoch(self) -> int:
        """Samples this rank yields per epoch (after drop/pad)."""
        if self.plan.policy == "none":
            return self.plan.samples
        return self.plan.steps * self.batch_size

    def __len__(self) -> int:
        return self.plan.steps

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch's order (seeded) and reset the I/O counters."""
        self._epoch.value = epoch
        self.reset_io_stats()

    def reset_io_stats(self) -> None:
        for i in range(len(self._counters)):
            self._counters[i] = 0
        for i in range(len(self._touched)):
            self._touched[i] = 0

    def io_stats(self) -> dict:
        """Since the last ``set_epoch``: bytes read, files opened, shards read, batches, samples."""
        c = np.frombuffer(self._counters, dtype=np.int64).reshape(MAX_WORKERS, 4).sum(axis=0)
        touched = [self.info.shards[i].file for i, t in enumerate(self._touched) if t]
        return {
            "rank": self.rank,
            "bytes_read": int(c[_BYTES]),
            "files_opened": int(c[_OPENS]),
            "shards_read": touched,
            "batches": int(c[_BATCHES]),
            "samples": int(c[_SAMPLES]),
        }

    # ---- reading ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        worker = get_worker_info()
        wid, workers = (0, 1) if worker is None else (worker.id, worker.num_workers)
        slot = 0 if worker is None else 1 + wid % (MAX_WORKERS - 1)
        for window in self.plan.windows(self._epoch.value)[wid::workers]:
            yield from self._serve(window, slot)

    def _this_process(self) -> None:
        """After a fork, forget the parent's HDF5 handles (not fork-safe) and buffer."""
        if self._pid != os.getpid():
            self._handles, self._buffer, self._pid = {}, None, os.getpid()

    def _shard(self, i: int, slot: int) -> OpenShard:
        self._this_process()
        handle = self._handles.get(i)
        if handle is None:
            handle = OpenShard(
                self.paths[i], self.info.shards[i], self.manifest.shape, self.manifest.dtype
            )
            self._handles[i] = handle
            self._counters[slot * 4 + _OPENS] += 1
        return handle

    def _window_buffer(self, n: int) -> np.ndarray:
        """This process's window buffer for normalised batches, allocated once and reused (a
        fresh window-sized array per window may have every page faulted in again)."""
        self._this_process()
        if self._buffer is None or len(self._buffer) < n:
            self._buffer = np.empty((n, *self.manifest.shape), dtype=self.manifest.dtype)
        return self._buffer[:n]

    def _serve(self, window: Window, slot: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = window.samples
        # The consumer owns what it is given: raw batches are views of a fresh array (one per
        # window), normalised ones are fresh float32, made from a buffer reused for every window.
        if self.normalize:
            images = self._window_buffer(n)
        else:
            images = np.empty((n, *self.manifest.shape), self.manifest.dtype)
        labels = np.empty(n, dtype=np.int64)
        self._read_window(window, images, labels, slot)
        for s in window.batch_slices():
            self._counters[slot * 4 + _BATCHES] += 1
            self._counters[slot * 4 + _SAMPLES] += s.stop - s.start
            yield self._to_tensor(images[s]), torch.from_numpy(labels[s])

    def _read_window(
        self, window: Window, images: np.ndarray, labels: np.ndarray, slot: int
    ) -> None:
        """Read the window's pieces in turn (each one sequential in its file), every row going
        to its place in the served order: batch ``k`` is then ``images[k*batch:(k+1)*batch]``."""
        places = window.places()
        at = 0
        for p in window.pieces:
            shard = self._shard(p.shard, slot)
            if places is None:  # served as read
                where: slice | np.ndarray = slice(at, at + p.rows)
                got = shard.read_into(p.start, p.stop, images[where])
            else:
                where = places[at : at + p.rows]
                got = shard.read_placed(p.start, images, where)
            labels[where] = shard.labels[p.start : p.stop]
            self._counters[slot * 4 + _BYTES] += got
            self._touched[p.shard] = 1
            at += p.rows

    def _to_tensor(self, stored: np.ndarray) -> torch.Tensor:
        if not self.normalize:
            return torch.from_numpy(stored)
        return torch.from_numpy(normalized(stored, self._scale, self._shift))

    def normalizer(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, shift) such that ``stored * scale + shift`` is the normalised float image."""
        return torch.from_numpy(self._scale.copy()), torch.from_numpy(self._shift.copy())

    def close(self) -> None:
        for h in self._handles.values():
            h.close()
        self._handles = {}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_handles"] = {}  # spawn/forkserver: open afresh in the worker
        state["_buffer"] = None
        return state

    def __del__(self) -> None:
        if getattr(self, "_pid", None) == os.getpid():
            self.close()
