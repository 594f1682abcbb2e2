"""What every converter's source provides: classes, one label per item, and a way to load items.

A source lists its items up front (so splits and shards can be planned before any pixel is
decoded) and loads them on demand in whichever worker process writes their shard. ``load_many``
yields ``(item, array)`` or ``(item, UnreadableImage)``; arrays are C×H×W uint8 at the target size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpcbench.data_prep.images import UnreadableImage, load_image
from hpcbench.files import open_regular


@dataclass(frozen=True)
class Target:
    size: tuple[int, int]  # width, height
    mode: str  # "L" or "RGB"
    policy: str  # resize policy, see hpcbench.data_prep.images

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3


@dataclass
class Source:
    kind: str
    classes: list[str]
    labels: np.ndarray  # int64 label per item
    names: list[str] | None = None  # file per item (paths as given), for reports and sources.txt
    # the listing's own id per item (a metadata JSON's images[].id), "" where it gave none: kept
    # in source_ids.txt so that predictions can be joined back to the user's ids
    ids: list[str] | None = None
    describe: dict[str, Any] = field(default_factory=dict)
    native_size: tuple[int, int] | None = None  # (W, H) when every item has one size
    native_channels: int | None = None  # 1 or 3 when known without opening files
    # The split of each item ("train", "val" or "test") when the metadata says it; else the
    # conversion draws a stratified split.
    given_splits: list[str] | None = None
    # The last ``unlabeled_test`` items are a test set without labels (label -1): they become
    # the test split, flagged unlabeled; the labelled items are split into train and val.
    unlabeled_test: int = 0
    # Paths read (files or directories): the output may neither be nor contain one of them.
    inputs: list[str] = field(default_factory=list)
    # Directories listed recursively: the output may not lie inside one of them either.
    scanned: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def channels(self) -> int:
        """The channels the source's images have: 1 (grayscale) or 3 (colour)."""
        return self.native_channels or 3

    def load_many(
        self, items: np.ndarray, target: Target
    ) -> Iterator[tuple[int, np.ndarray | UnreadableImage]]:
        raise NotImplementedError


@dataclass
class FileSource(Source):
    """Items are image files: ``paths`` to open (absolute), ``names`` to report."""

    paths: list[str] = field(default_factory=list)

    def channels(self) -> int:
        """1 when every image looked at is single-channel (PIL modes ``1``, ``L``, ``LA``,
        ``I``, ``I;16``, ``F``), else 3. Up to :data:`PROBE_FILES` files spread evenly over the
        source are looked at, headers only (a palette image counts as colour)."""
        if self.native_channels is None:
            self.native_channels = probe_channels(self.paths)
        return self.native_channels

    def load_many(
        self, items: np.ndarray, target: Target
    ) -> Iterator[tuple[int, np.ndarray | UnreadableImage]]:
        for i in items:
            try:
                yield int(i), load_image(self.paths[i], target.size, target.mode, target.policy)
            except UnreadableImage as err:
                yield int(i), err


PROBE_FILES = 256
SINGLE_CHANNEL_MODES = frozenset({"1", "L", "LA", "La", "I", "F"})


def probe_channels(paths: list[str], limit: int = PROBE_FILES) -> int:
    """1 when every readable image among up to ``limit`` of ``paths`` (spread evenly) has a
    single-channel mode, else 3; 3 when none of them can be read (conversion reports those)."""
    from PIL import Image

    if not paths:
        return 3
    step = max(1, len(paths) / limit)
    seen = 0
    for k in range(min(limit, len(paths))):
        try:  # a FIFO or device would block: regular files only, as the conversion reads them
            with os.fdopen(open_regular(paths[int(k * step)]), "rb") as fh, Image.open(fh) as im:
                mode = im.mode
        except Exception:  # noqa: BLE001 - an unreadable file is reported when converted
            continue
        if mode.split(";")[0] not in SINGLE_CHANNEL_MODES:
            return 3
        seen += 1
    return 1 if seen else 3


def image_directories(paths: list[str]) -> list[str]:
    """The distinct directories holding ``paths`` (what a listed source reads)."""
    return sorted({os.path.dirname(os.path.abspath(p)) for p in paths})


def label_index(values: list[str], where: str) -> tuple[list[str], np.ndarray]:
    """Class names (sorted; numerically when all are integers) and each value's label index."""
    unique = sorted(set(values))
    if unique and all(v.lstrip("-").isdigit() for v in unique):
        unique = sorted(unique, key=int)
    if len(unique) < 2:
        raise ValueError(f"{where}: found {len(unique)} class(es); classification needs at least 2")
    index = {name: k for k, name in enumerate(unique)}
    return unique, np.array([index[v] for v in values], dtype=np.int64)
