"""Source: the built-in learnable set (``hpcbench prep synthetic``), rendered straight into shards.

See :mod:`hpcbench.data.synthetic` for what is drawn. Rendering happens in the workers that write
the shards, at the target size and channel count (no resize).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from data_prep.images import UnreadableImage
from data_prep.source import Source, Target
from hpcbench.data import synthetic as shapes

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
        seed=seed,
    )
