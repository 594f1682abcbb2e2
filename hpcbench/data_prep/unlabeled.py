"""An unlabeled test set: images listed without labels, kept as a dataset's test split.

Competition data often ships its test images without labels (Herbarium's ``test/metadata.json``
lists images and no annotations). :func:`unlabeled_listing` reads such a listing:

- a metadata JSON: ``{"images": [{"id": …, "file_name": …}, …]}`` with no annotations (an empty
  ``annotations`` list is allowed), or a bare list of ``{"file_name": …}`` entries (Herbarium
  2022's ``test_metadata.json``); entries with an ``id`` (or ``image_id``) are ordered by it;
- a CSV: one image path per row, in the ``--path-column`` (or the usual path header names, or the
  first column); a label column, if any, is ignored.

Paths resolve against ``image_root`` (default: the listing's directory).
:func:`with_unlabeled_test` appends the images to a labelled source as its test split: label -1,
the manifest flags the split unlabeled, and nothing computes an accuracy on it.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import UNLABELED, DataError
from hpcbench.data_prep.source import FileSource, image_directories
from hpcbench.files import open_regular
from hpcbench.jsonfile import JsonFileError, parse_json

PATH_NAMES = ("file", "path", "filename", "file_name", "image", "image_path")


def _read(path: Path) -> bytes:
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None


ID_NAMES = ("id", "image_id")  # a listing's own id of an image: JSON keys, CSV headers


def _json_names(path: Path, raw: bytes) -> tuple[list[str], list[str]]:
    try:
        data = parse_json(raw, path)
    except JsonFileError as err:
        raise DataError(str(err)) from None
    if isinstance(data, dict):
        if data.get("annotations"):
            raise DataError(
                f"{path}: has annotations, so its images are labelled; convert it as the "
                "labelled source, or list the test images without annotations"
            )
        entries = data.get("images")
    else:
        entries = data
    if not isinstance(entries, list):
        raise DataError(f"{path}: expected an images list (or a list of image entries)")
    keyed = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("file_name"), str):
            raise DataError(f"{path}: image entry {n} has no file_name")
        key = next((entry[k] for k in ID_NAMES if entry.get(k) is not None), None)
        keyed.append((str(key) if key is not None else "", n, entry["file_name"]))
    if all(re.fullmatch(r"-?[0-9]+", k) for k, _, _ in keyed):
        keyed.sort(key=lambda e: (int(e[0]), e[1]))
    elif all(k for k, _, _ in keyed):
        keyed.sort()
    return [name for _, _, name in keyed], [key for key, _, _ in keyed]


def _csv_names(path: Path, raw: bytes, path_column: str | None) -> tuple[list[str], list[str]]:
    try:
        rows = list(csv.reader(raw.decode("utf-8-sig").splitlines()))
    except (UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: not a readable CSV ({err})") from None
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise DataError(f"{path}: empty")
    head = [c.strip().lower() for c in rows[0]]
    col, body, first = 0, rows, 1
    if path_column or any(h in PATH_NAMES for h in head):
        for name in [path_column.lower()] if path_column else PATH_NAMES:
            if name in head:
                col, body, first = head.index(name), rows[1:], 2
                break
        else:
            raise DataError(f"{path}: no column {path_column!r} in the header (--path-column)")
    id_col = next((head.index(h) for h in ID_NAMES if h in head and body is not rows), None)
    names, ids = [], []
    for n, row in enumerate(body, start=first):
        if len(row) <= col or not row[col].strip():
            raise DataError(f"{path}:{n}: row needs an image path, got {row!r}")
        names.append(row[col].strip())
        ids.append(row[id_col].strip() if id_col is not None and len(row) > id_col else "")
    return names, ids


def unlabeled_listing(
    path: str | os.PathLike[str],
    image_root: str | os.PathLike[str] | None = None,
    path_column: str | None = None,
) -> tuple[list[str], list[str], list[str]]:
    """The listed images as (names as listed, paths to open, the listing's own ids: its
    ``id``/``image_id`` per image, "" where it gave none)."""
    path = Path(path)
    raw = _read(path)
    if path.suffix.lower() == ".json":
        names, ids = _json_names(path, raw)
    else:
        names, ids = _csv_names(path, raw, path_column)
    if not names:
        raise DataError(f"{path}: lists no images")
    root = Path(image_root) if image_root is not None else path.parent
    return names, [str(root / n) for n in names], ids


def with_unlabeled_test(
    source: FileSource,
    listing: str | os.PathLike[str],
    image_root: str | os.PathLike[str] | None = None,
    path_column: str | None = None,
) -> FileSource:
    """``source`` with the images ``listing`` names appended as its unlabeled test split."""
    names, paths, ids = unlabeled_listing(listing, image_root, path_column)
    if source.given_splits is not None and "test" in source.given_splits:
        at = source.given_splits.index("test")
        label = (source.names or source.paths)[at]
        raise DataError(
            f"{label}: the split column puts it in test, but the test split is the unlabeled "
            f"set {listing}: mark the labelled images train or val"
        )
    return replace(
        source,
        labels=np.concatenate([source.labels, np.full(len(names), UNLABELED, np.int64)]),
        names=[*(source.names or source.paths), *names],
        ids=[*(source.ids or [""] * len(source.labels)), *ids] if source.ids or any(ids) else None,
        paths=[*source.paths, *paths],
        given_splits=None if source.given_splits is None else [*source.given_splits],
        unlabeled_test=len(names),
        inputs=[*source.inputs, str(listing), *image_directories(paths)],
        describe={
            **source.describe,
            "unlabeled_test": {"path": str(Path(listing).resolve()), "images": len(names)},
        },
        native_channels=None,
    )
