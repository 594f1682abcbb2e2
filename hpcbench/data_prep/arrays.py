"""Source: numpy arrays already in memory or in ``.npy`` / ``.npz`` files.

Images: N×H×W (grayscale), N×H×W×C (channels last, C = 1, 3 or 4) or N×C×H×W (channels first,
C = 1 or 3) — the layout is inferred from where a 1/3/4-sized axis sits, or given. uint8 arrays
are 0..255; float arrays must hold finite values in 0..1 (anything else is an error naming the
value range found, or the first NaN/infinite element).
Labels: N integers >= 0; class names default to "0".."K-1". Items go through the same resize and
colour path as image files, so a converted array and a converted PNG of it are equal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import DataError
from hpcbench.data_prep.images import UnreadableImage, array_to_chw
from hpcbench.data_prep.source import Source, Target
from hpcbench.files import NotRegularFile, regular_size

LAYOUTS = ("auto", "nhw", "nhwc", "nchw")


@dataclass
class ArraySource(Source):
    images: np.ndarray | None = None  # N×H×W×C uint8, channels last (PIL's order)

    def load_many(
        self, items: np.ndarray, target: Target
    ) -> Iterator[tuple[int, np.ndarray | UnreadableImage]]:
        assert self.images is not None
        for i in items:
            yield int(i), array_to_chw(self.images[i], target.size, target.mode, target.policy)


def _load(path: str | os.PathLike[str], key: str | None) -> np.ndarray:
    path = Path(path)
    try:
        regular_size(path)  # a FIFO would block np.load for ever
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except NotRegularFile:
        raise DataError(f"{path}: not a regular file (expected a .npy/.npz file)") from None
    except (ValueError, OSError, EOFError) as err:  # EOFError: an empty file
        raise DataError(f"{path}: not a numpy .npy/.npz file ({err})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        if key is None or key not in data.files:
            raise DataError(f"{path}: name the array with a key; it holds {', '.join(data.files)}")
        return data[key]
    return data


def _channels_last(images: np.ndarray, layout: str) -> np.ndarray:
    if layout == "auto":
        if images.ndim == 3:
            layout = "nhw"
        elif images.ndim == 4 and images.shape[3] in (1, 3, 4):
            layout = "nhwc"
        elif images.ndim == 4 and images.shape[1] in (1, 3):
            layout = "nchw"
        else:
            raise DataError(
                f"images of shape {images.shape}: cannot tell the layout; give it (nhw, nhwc or nchw)"
            )
    want = {"nhw": 3, "nhwc": 4, "nchw": 4}[layout]
    if images.ndim != want:
        raise DataError(f"images of shape {images.shape} do not match layout {layout}")
    if layout == "nchw":
        images = images.transpose(0, 2, 3, 1)
    if images.ndim == 4 and images.shape[3] == 4:
        images = images[..., :3]  # drop alpha
    return images


def from_arrays(
    images: np.ndarray | str | os.PathLike[str],
    labels: np.ndarray | str | os.PathLike[str],
    *,
    classes: list[str] | None = None,
    layout: str = "auto",
    images_key: str | None = None,
    labels_key: str | None = None,
) -> ArraySource:
    where = {"kind": "arrays"}
    inputs = []
    image_name, label_name = "images", "labels"
    if not isinstance(images, np.ndarray):
        where["images"] = str(Path(images).resolve())
        image_name = os.fspath(images)
        inputs.append(image_name)
        images = _load(images, images_key)
    if not isinstance(labels, np.ndarray):
        where["labels"] = str(Path(labels).resolve())
        label_name = os.fspath(labels)
        inputs.append(label_name)
        labels = _load(labels, labels_key)
    if layout not in LAYOUTS:
        raise DataError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if np.issubdtype(images.dtype, np.floating):
        _check_finite(images, image_name)
    images = _channels_last(images, layout)
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataError(
            f"{label_name}: labels of shape {labels.shape} do not match {len(images)} images "
            "(expected one integer per image)"
        )
    if not np.issubdtype(labels.dtype, np.integer) or (len(labels) and labels.min() < 0):
        raise DataError(
            f"{label_name}: labels must be integers >= 0 (got dtype {labels.dtype}, "
            f"min {labels.min() if len(labels) else '-'})"
        )
    images = _as_bytes(images)
    num = int(labels.max()) + 1 if len(labels) else 0
    if classes is None:
        classes = [str(k) for k in range(num)]
    elif len(classes) < num:
        raise DataError(f"{len(classes)} class names for labels up to {num - 1}")
    if len(classes) < 2:
        raise DataError(f"labels name {len(classes)} class(es); classification needs at least 2")
    return ArraySource(
        kind="arrays",
        classes=list(classes),
        labels=labels.astype(np.int64),
        describe=where,
        native_size=(images.shape[2], images.shape[1]),
        native_channels=1 if images.ndim == 3 or images.shape[3] == 1 else 3,
        images=images,
        inputs=inputs,
    )


def _as_bytes(images: np.ndarray) -> np.ndarray:
    """The images as uint8: float images (0..1) scaled and rounded, anything else refused."""
    if images.dtype == np.uint8:
        return images
    if not np.issubdtype(images.dtype, np.floating):
        raise DataError(f"images must be uint8 (0..255) or float (0..1), got {images.dtype}")
    lo, hi = float(np.min(images)), float(np.max(images))
    if lo < 0 or hi > 1:
        raise DataError(
            f"float images must hold 0..1, found {lo:g}..{hi:g} (scale them, or pass uint8)"
        )
    return np.clip(np.asarray(images, dtype=np.float64) * 255 + 0.5, 0, 255).astype(np.uint8)


def _check_finite(images: np.ndarray, name: str, rows: int = 1024) -> None:
    """Raise DataError naming the first NaN or infinite element (read ``rows`` items at a time,
    so a memory-mapped file is never loaded whole)."""
    if images.ndim == 0:
        return  # not images at all: the layout check says so
    for at in range(0, len(images), rows):
        bad = ~np.isfinite(np.asarray(images[at : at + rows]))
        if bad.any():
            index = [int(i) for i in np.argwhere(bad)[0]]
            index[0] += at
            value = images[tuple(index)]
            raise DataError(
                f"{name}: images{index} is {value}; float images must hold finite values in 0..1"
            )
