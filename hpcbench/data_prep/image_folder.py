"""Source: an image folder with one sub-directory per class (torchvision ``ImageFolder`` layout).

Class names are the sorted sub-directory names (hidden ones ignored), files are found
recursively, and only image extensions count. A class directory without images is an error
naming it: a class that silently disappears would shift every label after it.

Symbolic links are followed, but every directory is walked once (directories are told apart by
``(st_dev, st_ino)``), so a link loop such as ``self -> .`` ends and no directory is listed twice.
A link inside a class to the root or to another class directory is not followed (those images
are listed once, under their own class). Two class names for one directory, or one file (same
``(st_dev, st_ino)``: a symbolic or hard link) under two classes, is an error naming both: the
label would be a guess. One file reachable twice within a class is listed once.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import DataError
from hpcbench.data_prep.images import IMAGE_EXTENSIONS
from hpcbench.data_prep.source import FileSource

Key = tuple[int, int]


def _key(st: os.stat_result) -> Key:
    return st.st_dev, st.st_ino


def _entries(directory: str) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as it:
            return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise DataError(f"{directory}: cannot list the directory ({err.strerror})") from None


def _walk(top: str, seen_dirs: dict[Key, str]) -> Iterator[tuple[str, Key | None]]:
    """(path, file key) of the image files under ``top``, depth first in sorted order (as
    ``os.walk``), entering each directory not in ``seen_dirs`` once. The key is None for an
    entry that is not a regular file (dangling link, FIFO): it is listed, and reported
    unreadable when converted."""
    stack = [top]
    while stack:
        directory = stack.pop()
        subdirs = []
        for entry in _entries(directory):
            try:
                st = entry.stat()  # follows symbolic links
            except OSError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                if _key(st) not in seen_dirs:
                    seen_dirs[_key(st)] = entry.path
                    subdirs.append(entry.path)
            elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
                regular = st is not None and stat.S_ISREG(st.st_mode)
                yield entry.path, _key(st) if regular else None
        stack.extend(reversed(subdirs))


def _class_directories(root: Path) -> tuple[list[str], dict[Key, str]]:
    """Sorted class names, and the directories to never enter again (root and classes)."""
    seen: dict[Key, str] = {_key(os.stat(root)): str(root)}
    classes = []
    for entry in _entries(str(root)):
        try:
            st = entry.stat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        other = seen.get(_key(st))
        if other is not None:
            raise DataError(
                f"{entry.path}: the same directory as {other} (a symbolic link); "
                "each class must be a directory of its own"
            )
        seen[_key(st)] = entry.path
        classes.append(entry.name)
    return classes, seen


def image_folder(root: str | os.PathLike[str]) -> FileSource:
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such directory")
    classes, seen_dirs = _class_directories(root)
    if len(classes) < 2:
        raise DataError(f"{root}: expected one sub-directory per class, found {len(classes)}")
    paths: list[str] = []
    labels: list[int] = []
    owner: dict[Key, tuple[str, int]] = {}  # file -> (first path, label)
    repeated = 0
    for k, name in enumerate(classes):
        found = []
        for path, key in _walk(str(root / name), seen_dirs):
            if key is not None and key in owner:
                first, label = owner[key]
                if label != k:
                    raise DataError(
                        f"{path}: the same file as {first}, under classes {name!r} and "
                        f"{classes[label]!r}; a file may belong to one class only"
                    )
                repeated += 1
                continue
            if key is not None:
                owner[key] = (path, k)
            found.append(path)
        if not found:
            raise DataError(
                f"{root / name}: class directory has no images ({', '.join(IMAGE_EXTENSIONS)})"
            )
        paths += found
        labels += [k] * len(found)
    describe = {"kind": "image-folder", "path": str(root.resolve())}
    if repeated:
        describe["repeated_files_listed_once"] = repeated
    return FileSource(
        kind="image-folder",
        classes=classes,
        labels=np.array(labels, dtype=np.int64),
        names=[os.path.relpath(p, root) for p in paths],
        paths=paths,
        describe=describe,
        inputs=[str(root)],
        scanned=[str(root)],
    )


def images_under(root: str | os.PathLike[str]) -> list[str]:
    """Every image file under ``root``, at any depth (each directory entered once, links
    followed), in sorted order: a folder of new images in dated or camera sub-folders, which
    are not classes."""
    top = str(root)
    try:
        seen: dict[Key, str] = {_key(os.stat(top)): top}
    except OSError as err:
        raise DataError(f"{top}: cannot read the directory ({err.strerror})") from None
    found = [path for path, _ in _walk(top, seen)]
    if not found:
        raise DataError(f"{top}: no images in it or below it ({', '.join(IMAGE_EXTENSIONS)})")
    return found
