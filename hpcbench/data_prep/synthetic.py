"""Source: the built-in learnable set (``hpcbench prep synthetic``), rendered straight into shards.

See :mod:`hpcbench.data.synthetic` for what is drawn. Rendering happens in the workers that write
the shards, at the target size and channel count (no resize).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcbench.data import synthetic as shapes
from hpcbench.data_prep.images import UnreadableImage
from hpcbench.data_prep.source import Source, Target

RENDER_BATCH = 64


@dataclass
class SyntheticSource(Source):
    seed: int = 0

    def load_many(
        self, items: np.ndarray, target: Target
    ) -> Iterator[tuple[int, np.ndarray | UnreadableImage]]:
        for at in range(0, len(items), RENDER_BATCH):
            chunk = np.asarray(items[at : at + RENDER_BATCH])
            images, _ = shapes.render(
                chunk,
                seed=self.seed,
                num_classes=len(self.classes),
                size=target.size,
                channels=target.channels,
            )
            yield from zip((int(i) for i in chunk), images, strict=True)


def synthetic(
    samples: int = shapes.DEFAULT_SAMPLES, classes: int = shapes.DEFAULT_CLASSES, seed: int = 0
) -> SyntheticSource:
    from hpcbench.data.manifest import DataError

    try:
        names = shapes.class_names(classes)
    except ValueError as err:
        raise DataError(f"--classes: {err}") from None
    if samples < classes:
        raise DataError(f"--samples {samples}: need at least one per class ({classes})")
    return SyntheticSource(
        kind="synthetic",
        classes=names,
        labels=np.arange(samples, dtype=np.int64) % classes,
        describe={"kind": "synthetic", "samples": samples, "classes": classes, "seed": seed},
        native_channels=1,  # the reference study's images were grayscale
        seed=seed,
    )


def write_image_folder(
    root: str | os.PathLike[str],
    samples: int,
    *,
    classes: int = shapes.DEFAULT_CLASSES,
    size: tuple[int, int] = (640, 480),
    seed: int = 0,
    channels: int = 3,
    quality: int = 90,
    first: int = 0,
) -> list[str]:
    """The built-in shapes as an image folder of JPEG files (``root/<class>/<index>.jpg``), as
    users arrive with photos: files that need decoding and resizing. Sample ``first + i`` for i
    in 0..samples-1 (so a second call with another ``first`` gives other images); returns the
    paths written. ``root`` must not exist yet, or be a folder this function wrote."""
    from PIL import Image

    names = shapes.class_names(classes)
    root = Path(root)
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)
    paths = []
    for at in range(0, samples, RENDER_BATCH):
        indices = np.arange(first + at, first + min(samples, at + RENDER_BATCH))
        images, labels = shapes.render(
            indices, seed=seed, num_classes=classes, size=size, channels=channels
        )
        for i, image, label in zip(indices, images, labels, strict=True):
            path = root / names[label] / f"{i:07d}.jpg"
            pixels = image[0] if channels == 1 else image.transpose(1, 2, 0)
            Image.fromarray(pixels).save(path, quality=quality)
            paths.append(str(path))
    return paths
