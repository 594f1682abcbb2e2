"""The worker side of a conversion: one task is one shard of one split, its images read,
resized and written by whichever process (a pool worker, an MPI rank) runs it; the figures
the coordinator needs for the manifest come back in a :class:`TaskResult`."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.data.manifest import DataError, ShardInfo
from hpcbench.data.shards import write_shard
from hpcbench.data_prep.images import UnreadableImage
from hpcbench.data_prep.source import Source, Target


@dataclass(frozen=True)
class Task:
    split: str
    number: int
    items: np.ndarray

    @property
    def file(self) -> str:
        return f"{self.split}-{self.number:05d}.h5"


@dataclass
class TaskResult:
    split: str
    number: int
    shard: ShardInfo | None  # None when every item was unreadable
    class_counts: list[int]
    sums: list[float]  # per channel, 0..1 scale
    squares: list[float]
    pixels: int  # per channel
    skipped: list[tuple[str, str]]


# ---- the worker side ------------------------------------------------------------------------------
_ctx: dict[str, Any] = {}


def init_worker(source: Source, target: Target, options: Any, tmp: Path, counter: Any) -> None:
    """What every task of this process reads: the source, the target, the options (a
    ConvertOptions), the temporary directory and the shared counter of images done."""
    _ctx.update(source=source, target=target, options=options, tmp=tmp, counter=counter)


def init_pool_worker(*args: Any) -> None:
    """A pool worker leaves interrupts to its parent, which stops the pool and cleans up: it
    ignores SIGINT (Ctrl-C reaches the whole process group) and dies quietly on SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    init_worker(*args)


def count(n: int) -> None:
    counter = _ctx.get("counter")
    if counter is not None:
        with counter.get_lock():
            counter.value += n


def run_task(task: Task) -> TaskResult:
    source: Source = _ctx["source"]
    target: Target = _ctx["target"]
    options: Any = _ctx["options"]  # a ConvertOptions
    c = target.channels
    w, h = target.size
    images = np.empty((len(task.items), c, h, w), dtype=np.uint8)
    kept: list[int] = []
    skipped: list[tuple[str, str]] = []
    pending = 0
    for item, loaded in source.load_many(task.items, target):
        name = source.names[item] if source.names else f"item {item}"
        if isinstance(loaded, UnreadableImage):
            if options.strict:
                path = getattr(source, "paths", None)
                raise DataError(f"{path[item] if path else name}: unreadable image ({loaded})")
            skipped.append((name, str(loaded)))
        else:
            if loaded.shape != (c, h, w):
                raise DataError(f"{name}: loaded as {loaded.shape}, expected {(c, h, w)}")
            images[len(kept)] = loaded
            kept.append(item)
        pending += 1
        if pending >= 16:
            count(pending)
            pending = 0
    count(pending)
    images = images[: len(kept)]
    idx = np.array(kept, dtype=np.int64)
    labels = source.labels[idx]
    counts = np.bincount(labels[labels >= 0], minlength=len(source.classes)).tolist()
    flat = images.reshape(len(kept), c, h * w)  # not -1: a shard may have kept no image
    sums = (flat.sum(axis=(0, 2), dtype=np.float64) / 255).tolist()
    squares = np.einsum("ncp,ncp->c", flat.astype(np.float64), flat.astype(np.float64)) / 255**2
    stored = images if options.dtype == "uint8" else (images / np.float32(255)).astype(np.float16)
    shard = None
    if kept:
        shard = write_shard(
            _ctx["tmp"] / task.file,
            stored,
            labels,
            idx,
            {"split": task.split, "shard": task.number, "classes": len(source.classes)},
        )
    return TaskResult(
        task.split,
        task.number,
        shard,
        counts,
        sums,
        squares.tolist(),
        flat.shape[2] * len(kept),
        skipped,
    )
