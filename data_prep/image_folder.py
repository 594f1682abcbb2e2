"""Source: an image folder with one sub-directory per class (torchvision ``ImageFolder`` layout).

Class names are the sorted sub-directory names (hidden ones ignored), files are found
recursively, and only image extensions count. A class directory without images is an error
naming it: a class that silently disappears would shift every label after it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from data_prep.images import IMAGE_EXTENSIONS
from data_prep.source import FileSource
from hpcbench.data.manifest import DataError


def image_folder(root: str | os.PathLike[str]) -> FileSource:
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such directory")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if len(classes) < 2:
        raise DataError(f"{root}: expected one sub-directory per class, found {len(classes)}")
    paths: list[str] = []
    labels: list[int] = []
    for k, name in enumerate(classes):
        found = []
        for dirpath, dirnames, filenames in os.walk(root / name, followlinks=True):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            found += [
                os.path.join(dirpath, f)
                for f in sorted(filenames)
                if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")
            ]
        if not found:
            raise DataError(
                f"{root / name}: class directory has no images ({', '.join(IMAGE_EXTENSIONS)})"
            )
        paths += found
        labels += [k] * len(found)
    return FileSource(
        kind="image-folder",
        classes=classes,
        labels=np.array(labels, dtype=np.int64),
        names=[os.path.relpath(p, root) for p in paths],
        paths=paths,
        describe={"kind": "image-folder", "path": str(root.resolve())},
    )
