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

from data_prep.images import UnreadableImage, load_image


@dataclass(frozen=True)
class Target:
    size: tuple[int, int]  # width, height
    mode: str  # "L" or "RGB"
    policy: str  # resize policy, see data_prep.images

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3


@dataclass
class Source:
    kind: str
    classes: list[str]
    labels: np.ndarray  # int64 label per item
    names: list[str] | None = None  # file per item (paths as given), for reports and sources.txt
    describe: dict[str, Any] = field(default_factory=dict)
    native_size: tuple[int, int] | None = None  # (W, H) when every item has one size
    # Paths read (files or directories): the output may neither be nor contain one of them.
    inputs: list[str] = field(default_factory=list)
    # Directories listed recursively: the output may not lie inside one of them either.
    scanned: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def load_many(
        self, items: np.ndarray, target: Target
    ) -> Iterator[tuple[int, np.ndarray | UnreadableImage]]:
        raise NotImplementedError


@dataclass
class FileSource(Source):
    """Items are image files: ``paths`` to open (absolute), ``names`` to report."""

    paths: list[str] = field(default_factory=list)

    def load_many(
        self, items: np.ndarray, target: Target
    ) -> Iterator[tuple[int, np.ndarray | UnreadableImage]]:
        for i in items:
            try:
                yield int(i), load_image(self.paths[i], target.size, target.mode, target.policy)
            except UnreadableImage as err:
                yield int(i), err


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
