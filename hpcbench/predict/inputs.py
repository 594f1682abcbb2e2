"""What ``--input`` names, as a list of items to classify, and how a unit of them is read.

Accepted (the converters' readers where they apply, so a folder lists the same files in the same
order as ``hpcbench prep`` would):

- an image folder with one sub-directory per class (labelled), or with the images directly in it
  (no labels);
- a CSV of ``file,label`` rows (:func:`hpcbench.data_prep.csv_table`);
- a metadata JSON (:func:`hpcbench.data_prep.metadata_json`); one with ``images`` but no ``annotations``
  (a test set's) lists its images without labels;
- an hpcbench dataset directory (``manifest.json`` + HDF5 shards): the samples of ``--split``.

Labels are matched to the model's classes by name; a label the model does not know is an error
naming it. A unit is a run of consecutive items (``--batch-size`` of them): every mode reads,
decodes and predicts the same units, so their predictions agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.data.manifest import MANIFEST_NAME, DataError
from hpcbench.jsonfile import JsonFileError, read_json
from hpcbench.predict.config import PredictError

UNKNOWN = -1  # the label of an item whose class is not known
SOURCES_LIMIT = 1 << 30  # bytes of a dataset's sources.txt / source_ids.txt read at most


@dataclass
class Items:
    kind: str  # files | dataset
    description: str
    names: list[str]  # what predictions.csv calls each item
    labels: np.ndarray  # model class index per item, UNKNOWN where not known
    labelled: bool
    paths: list[str] = field(default_factory=list)  # files: the path to open per item
    # dataset: the source file of each sample (its sources.txt line), for predictions.csv
    sources: list[str] | None = None
    ids: list[str] | None = None  # the listing's own id per item, where it gave ids
    class_ids: list[str] | None = None  # the model's classes' ids in the input's metadata
    dataset: Any = None  # dataset: the Manifest
    split: str = ""
    _reader: Any = None

    def __len__(self) -> int:
        return len(self.names)

    def units(self, batch: int) -> list[np.ndarray]:
        """The item ids of each unit of work, in order."""
        n = len(self)
        return [np.arange(a, min(a + batch, n), dtype=np.int64) for a in range(0, n, batch)]

    def read_dataset(self, ids: np.ndarray) -> np.ndarray:
        """Stored samples of a dataset input, in the order of ``ids``."""
        from hpcbench.data.indexed import SampleReader

        if self._reader is None:
            self._reader = SampleReader(self.dataset, self.split)
        images, _ = self._reader.read(ids)
        return images

    def close(self) -> None:
        if self._reader is not None and hasattr(self._reader, "close"):
            self._reader.close()


def _map_labels(
    where: str, classes: list[str], labels: np.ndarray, model_classes: list[str]
) -> np.ndarray:
    index = {name: k for k, name in enumerate(model_classes)}
    mapping = np.full(len(classes), UNKNOWN, dtype=np.int64)
    for k, name in enumerate(classes):
        if name not in index:
            known = ", ".join(model_classes[:8]) + (", …" if len(model_classes) > 8 else "")
            raise PredictError(
                f"{where}: class {name!r} is not one of the model's {len(model_classes)} "
                f"classes ({known})"
            )
        mapping[k] = index[name]
    return mapping[labels] if len(labels) else labels.astype(np.int64)


def _flat_folder(root: Path) -> Items | None:
    """The images directly in ``root`` when it has no sub-directories (no labels)."""
    from hpcbench.data_prep.images import IMAGE_EXTENSIONS

    try:
        with os.scandir(root) as it:
            entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise PredictError(f"{root}: cannot list the directory ({err.strerror})") from None
    if any(e.is_dir() for e in entries):
        return None
    files = [e.path for e in entries if e.name.lower().endswith(IMAGE_EXTENSIONS)]
    if not files:
        raise PredictError(f"--input {root}: no images in it ({', '.join(IMAGE_EXTENSIONS)})")
    return Items(
        kind="files",
        description=f"image folder {root} (no labels)",
        names=[os.path.basename(p) for p in files],
        labels=np.full(len(files), UNKNOWN, dtype=np.int64),
        labelled=False,
        paths=files,
    )


def _unlabelled_json(path: Path) -> Items | None:
    try:
        data = read_json(path)
    except JsonFileError:
        return None  # the converter's reader says what is wrong
    if (
        not isinstance(data, dict)
        or "annotations" in data
        or not isinstance(data.get("images"), list)
    ):
        return None
    try:
        images = sorted((int(im["id"]), str(im["file_name"])) for im in data["images"])
    except (KeyError, TypeError, ValueError):
        return None
    ids = [str(i) for i, _ in images]
    files = [str(path.parent / name) for _, name in images]
    if not files:
        raise PredictError(f"--input {path}: its images list is empty")
    return Items(
        kind="files",
        description=f"metadata JSON {path} (no annotations: no labels)",
        names=[name for _, name in images],
        labels=np.full(len(files), UNKNOWN, dtype=np.int64),
        labelled=False,
        paths=files,
        ids=ids,
    )


def _unlabelled_folder(root: Path, asked: bool) -> Items:
    """An image folder whose sub-folders are not classes (dates, cameras): every image under
    it without a label, its sub-folder kept as its source."""
    from hpcbench.data_prep.image_folder import images_under

    paths = images_under(root)
    subfolders = [os.path.relpath(os.path.dirname(p), root) for p in paths]
    shown = ", ".join(sorted(set(subfolders))[:3]) + (", …" if len(set(subfolders)) > 3 else "")
    why = "--unlabelled" if asked else "its sub-folders are not the model's classes"
    return Items(
        kind="files",
        description=f"image folder {root}, read as unlabelled images ({why}; sub-folders "
        f"{shown} kept as each image's source)",
        names=[os.path.relpath(p, root) for p in paths],
        labels=np.full(len(paths), UNKNOWN, dtype=np.int64),
        labelled=False,
        paths=paths,
        sources=subfolders,
    )


def _csv_has_labels(rows: list[list[str]], config: Any) -> bool:
    """Whether a CSV listing's ``rows`` give labels: a label column named (--label-column) or
    found by its usual names in the header, or a second column in a listing without a header."""
    from hpcbench.data_prep.csv_table import LABEL_NAMES, PATH_NAMES

    if config.label_column:
        return True
    head = [c.strip().lower() for c in rows[0]] if rows else []
    if any(h in PATH_NAMES + LABEL_NAMES for h in head) or config.path_column:
        return any(h in LABEL_NAMES for h in head)
    return all(len(r) > 1 and r[1].strip() for r in rows)


def _unlabelled_csv(path: Path, rows: list[list[str]], config: Any) -> Items:
    """A CSV listing of images without labels (its ``rows``): the path column (by
    --path-column or its usual names), else the first column."""
    from hpcbench.data_prep.csv_table import LABEL_NAMES, PATH_NAMES

    if not rows:
        raise PredictError(f"--input {path}: empty")
    head = [c.strip().lower() for c in rows[0]]
    wanted = [config.path_column.lower()] if config.path_column else list(PATH_NAMES)
    col = next((head.index(n) for n in wanted if n in head), None)
    has_header = col is not None or any(h in LABEL_NAMES for h in head)
    if config.path_column and col is None:
        raise PredictError(
            f"{path}: no column {config.path_column!r} in the header (--path-column)"
        )
    body = rows[1:] if has_header else rows
    col = col or 0
    files = [r[col].strip() for r in body if len(r) > col and r[col].strip()]
    if not files:
        raise PredictError(f"--input {path}: no image paths in it")
    return Items(
        kind="files",
        description=f"CSV listing {path} (no labels)",
        names=files,
        labels=np.full(len(files), UNKNOWN, dtype=np.int64),
        labelled=False,
        paths=[str(path.parent / f) for f in files],
    )


def list_items(config: Any, model_classes: list[str]) -> Items:
    """The items ``config.input`` names, labels mapped to ``model_classes``, cut to ``--limit``."""
    items = _list(config, model_classes)
    if config.limit is not None and config.limit < len(items):
        n = config.limit
        items.names, items.labels = items.names[:n], items.labels[:n]
        items.paths = items.paths[:n]
        items.sources = items.sources[:n] if items.sources is not None else None
        items.ids = items.ids[:n] if items.ids is not None else None
    if len(items) == 0:
        raise PredictError(f"--input {config.input}: nothing to classify")
    return items


def _list(config: Any, model_classes: list[str]) -> Items:
    path = Path(config.input).expanduser()
    if not path.exists():
        raise PredictError(f"--input {config.input}: no such file or directory")
    try:
        if path.is_dir() and (path / MANIFEST_NAME).exists():
            return _dataset_items(path, config, model_classes)
        if path.is_dir():
            flat = _flat_folder(path)
            if flat is not None:
                return flat
            from hpcbench.data_prep import image_folder

            where = str(path)
            subfolders = sorted(
                e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith(".")
            )
            known = [c for c in subfolders if c in model_classes]
            asked = bool(config.unlabelled)
            if asked or not known:
                return _unlabelled_folder(path, asked)
            if len(known) < len(subfolders):
                odd = next(c for c in subfolders if c not in model_classes)
                raise PredictError(
                    f"{where}: sub-folder {odd!r} is not one of the model's "
                    f"{len(model_classes)} classes, while {known[0]!r} is; give --unlabelled "
                    "to read every sub-folder as unlabelled images (kept as their source)"
                )
            source = image_folder(path)
        elif path.suffix.lower() == ".json":
            unlabelled = _unlabelled_json(path)
            if unlabelled is not None:
                return unlabelled
            from hpcbench.data_prep import metadata_json

            source = metadata_json(path)
            where = str(path)
        else:
            from hpcbench.data_prep import csv_table
            from hpcbench.data_prep.csv_table import read_rows

            rows = read_rows(path)
            if config.unlabelled or not _csv_has_labels(rows, config):
                return _unlabelled_csv(path, rows, config)
            source = csv_table(
                path, path_column=config.path_column, label_column=config.label_column
            )
            where = str(path)
    except DataError as err:
        raise PredictError(str(err)) from None
    return Items(
        kind="files",
        description=f"{source.kind} {path}",
        names=list(source.names or source.paths),
        labels=_map_labels(where, source.classes, source.labels, model_classes),
        labelled=True,
        paths=list(source.paths),
        ids=source.ids,
    )


def _dataset_items(path: Path, config: Any, model_classes: list[str]) -> Items:
    """The samples of an hpcbench dataset's split, labels mapped to the model's classes."""
    from hpcbench.data.manifest import Manifest

    manifest = Manifest.load(path)
    split = manifest.split(config.split)
    if split.labeled:
        labels = _map_labels(
            str(path / MANIFEST_NAME),
            manifest.classes,
            np.concatenate(
                [_shard_column(manifest, s, "labels") for s in split.shards]
                or [np.zeros(0, np.int64)]
            ),
            model_classes,
        )
    else:  # stored without labels (-1): nothing to map or to score
        labels = np.full(split.samples, UNKNOWN, dtype=np.int64)
    sources, ids = _dataset_sources(manifest, split)
    return Items(
        kind="dataset",
        description=f"dataset {path} ({config.split} split"
        + ("" if split.labeled else ", unlabeled")
        + ")",
        names=[f"{config.split}/{i}" for i in range(split.samples)],
        labels=labels,
        labelled=split.labeled,
        dataset=manifest,
        split=config.split,
        sources=sources,
        ids=ids,
        class_ids=_class_ids(manifest, model_classes),
    )


def _shard_column(manifest: Any, shard: Any, column: str) -> np.ndarray:
    """A shard's ``labels`` or ``index`` (one int64 per sample), the shard checked on opening."""
    from hpcbench.data.shards import OpenShard

    opened = OpenShard(manifest.shard_path(shard), shard, manifest.shape, manifest.dtype)
    try:
        assert opened.file is not None
        return np.asarray(opened.file[column][()], dtype=np.int64)
    except KeyError:
        raise DataError(f"{opened.path}: not a readable shard (no {column!r})") from None
    finally:
        opened.close()


def _dataset_sources(manifest: Any, split: Any) -> tuple[list[str] | None, list[str] | None]:
    """Each sample's source file (``sources.txt``) and the listing's own id
    (``source_ids.txt``), by the sample's ``index`` (its line there); None where the dataset
    has no such file or a line is missing (a dataset written by another tool)."""
    from hpcbench.files import read_regular

    lines: dict[str, list[str] | None] = {}
    for name in ("sources.txt", "source_ids.txt"):
        try:
            text = read_regular(manifest.root / name, SOURCES_LIMIT)
            lines[name] = text.decode("utf-8", "backslashreplace").split("\n")
        except FileNotFoundError:
            lines[name] = None
        except (OSError, ValueError) as err:
            why = getattr(err, "strerror", None) or err
            raise PredictError(f"{manifest.root / name}: cannot be read ({why})") from None
    if lines["sources.txt"] is None and lines["source_ids.txt"] is None:
        return None, None
    index = np.concatenate(
        [_shard_column(manifest, s, "index") for s in split.shards] or [np.zeros(0, int)]
    )
    out = []
    for name in ("sources.txt", "source_ids.txt"):
        table = lines[name]
        if table is None or (len(index) and (index.min() < 0 or index.max() >= len(table))):
            out.append(None)
        else:
            out.append([table[i] for i in index.tolist()])
    return out[0], out[1]


def _class_ids(manifest: Any, model_classes: list[str]) -> list[str] | None:
    """The source metadata's ids of the model's classes, from a dataset with the same classes."""
    ids = manifest.class_ids()
    if ids is None or list(manifest.classes) != list(model_classes):
        return None
    return ids
