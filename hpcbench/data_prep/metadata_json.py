"""Source: a metadata JSON in the COCO / Kaggle Herbarium layout.

    {"images": [{"id": 1, "file_name": "images/000/1.jpg"}, ...],
     "annotations": [{"image_id": 1, "category_id": 17}, ...],
     "categories": [{"id": 17, "name": "Abies alba"}, ...]}

Labels are category ids mapped to 0..K-1 in increasing id order; class names come from the
categories (the manifest keeps the original ids in ``source.category_ids``). Images resolve
against ``image_root`` (default: the JSON's directory). An image with no annotation is left out
(counted); one with two different categories, an annotation naming an unknown image or category,
or a missing key is an error naming the entry: a guessed label is worse than none. With
``split_column`` (``--split-column``) each image entry's value under that key (``train``,
``val``, ``test``, any usual spelling) decides its split; a missing or other value is an error
naming the image.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.data.manifest import DataError
from hpcbench.data_prep.source import FileSource, image_directories
from hpcbench.data_prep.split import split_named
from hpcbench.files import open_regular
from hpcbench.jsonfile import JsonFileError, parse_json


def _labels(
    path: Path,
    images: dict[int, str],
    categories: list[tuple[int, str]],
    annotations: list[tuple[int, int]],
) -> dict[int, int]:
    """Each annotated image's label (its category's place among the sorted categories); an
    annotation of an unknown image or category, or an image of two categories, is an error."""
    label_of_category = {cid: k for k, (cid, _) in enumerate(categories)}
    label_of_image: dict[int, int] = {}
    for image_id, category_id in annotations:
        if image_id not in images:
            raise DataError(
                f"{path}: an annotation names image id {image_id}, which is not in images[]"
            )
        if category_id not in label_of_category:
            raise DataError(
                f"{path}: an annotation names category id {category_id}, which is not in categories[]"
            )
        label = label_of_category[category_id]
        if label_of_image.setdefault(image_id, label) != label:
            raise DataError(
                f"{path}: image id {image_id} ({images[image_id]}) has annotations with two different categories"
            )
    return label_of_image


def _splits(
    path: Path, data: Any, images: dict[int, str], ids: list[int], split_column: str
) -> list[str]:
    """Each image's split as its entry of images[] names it under ``split_column``."""
    entries = {int(im["id"]): im for im in data["images"]}
    given = []
    for i in ids:
        value = entries[i].get(split_column) if isinstance(entries[i], dict) else None
        split = split_named(value) if value is not None else None
        if split is None:
            raise DataError(
                f"{path}: image id {i} ({images[i]}): split {split_column!r} is "
                f"{'missing' if value is None else repr(value)}; expected train, val or test"
            )
        given.append(split)
    return given


def metadata_json(
    path: str | os.PathLike[str],
    image_root: str | os.PathLike[str] | None = None,
    split_column: str | None = None,
) -> FileSource:
    path = Path(path)
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            data = parse_json(fh.read(), path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None
    except JsonFileError as err:
        raise DataError(str(err)) from None
    root = Path(image_root) if image_root is not None else path.parent
    try:
        images = {int(im["id"]): str(im["file_name"]) for im in data["images"]}
        categories = sorted((int(c["id"]), str(c.get("name", c["id"]))) for c in data["categories"])
        annotations = [(int(a["image_id"]), int(a["category_id"])) for a in data["annotations"]]
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(
            f"{path}: needs images[].id/file_name, annotations[].image_id/category_id and categories[].id ({type(err).__name__}: {err})"
        ) from None
    if len(categories) < 2:
        raise DataError(
            f"{path}: {len(categories)} categor(y/ies); classification needs at least 2"
        )
    label_of_image = _labels(path, images, categories, annotations)
    ids = sorted(label_of_image)
    names = [images[i] for i in ids]
    given = None if split_column is None else _splits(path, data, images, ids, split_column)
    paths = [str(root / n) for n in names]
    return FileSource(
        kind="metadata-json",
        classes=[name for _, name in categories],
        labels=np.array([label_of_image[i] for i in ids], dtype=np.int64),
        names=names,
        ids=[str(i) for i in ids],
        paths=paths,
        given_splits=given,
        inputs=[str(path), *image_directories(paths)],
        describe={
            "kind": "metadata-json",
            "path": str(path.resolve()),
            "image_root": str(root.resolve()),
            "category_ids": [cid for cid, _ in categories],
            "images_without_annotation": len(images) - len(ids),
            **({"split_column": split_column} if split_column is not None else {}),
        },
    )
