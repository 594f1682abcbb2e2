"""The manifest of a sharded dataset: what ``manifest.json`` holds, how it is read and checked.

A dataset directory holds ``manifest.json`` plus one HDF5 file per shard. The manifest names the
splits and their shards (samples, bytes, sha256 each), the classes and per-class counts per split,
the sample shape and dtype, the normalisation statistics of the train split and the conversion
options used. docs/data.md describes the format; this module is its only reader and writer.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.atomic import write_json_atomically
from hpcbench.jsonfile import JsonFileError, parse_json

if TYPE_CHECKING:
    import numpy as np

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "hpcbench-shards"
FORMAT_VERSION = 1
SPLITS = ("train", "val", "test")
UNLABELED = -1  # the stored label of every sample of an unlabeled split
DTYPES = ("uint8", "float16")
MAX_MANIFEST_BYTES = 1 << 30  # a million shards take about 200 MB
MAX_SAMPLE_BYTES = 1 << 34  # 16 GiB per sample: anything larger is a corrupted shape


class DataError(Exception):
    """A dataset (or a source to convert) that the user can fix: one line naming the file."""


@dataclass(frozen=True)
class ShardInfo:
    file: str  # name inside the dataset directory
    samples: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class SplitInfo:
    samples: int
    class_counts: list[int]  # empty for an unlabeled split
    shards: list[ShardInfo]
    labeled: bool = True  # False: a test set without labels (every stored label is -1)


@dataclass
class Manifest:
    name: str
    classes: list[str]
    shape: list[int]  # C, H, W of one sample
    dtype: str  # uint8 (0..255) or float16 (0..1)
    splits: dict[str, SplitInfo]
    mean: list[float]  # per channel, on the 0..1 scale, computed on the train split
    std: list[float]
    options: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    skipped: int = 0
    created: str = ""
    hpcbench_version: str = ""
    root: Path | None = None  # where it was loaded from (not stored)

    # ---- derived -------------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def channels(self) -> int:
        return self.shape[0]

    @property
    def sample_bytes(self) -> int:
        c, h, w = self.shape
        return c * h * w * (1 if self.dtype == "uint8" else 2)

    def normalization(self) -> tuple[np.ndarray, np.ndarray]:
        """(scale, shift), float32 of shape (C, 1, 1), such that ``stored * scale + shift`` is
        ``(x - mean) / std`` on the 0..1 scale, whatever the stored dtype."""
        import numpy as np

        where = str(self.root / MANIFEST_NAME) if self.root is not None else "manifest"
        problem = normalization_problem(self.mean, self.std, self.channels)
        if problem:
            raise DataError(f"{where}: {problem}")

        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1, 1, 1)
        std = np.asarray(self.std, dtype=np.float32).reshape(-1, 1, 1)
        unit = np.float32(1 / 255 if self.dtype == "uint8" else 1.0)
        return unit / std, -mean / std

    def class_ids(self) -> list[str] | None:
        """The ids the source's metadata gave the classes (a metadata JSON's
        ``categories[].id``), as text in class order; None where it gave none."""
        ids = (self.source or {}).get("category_ids")
        if not isinstance(ids, list) or len(ids) != len(self.classes):
            return None
        return [str(i) for i in ids]

    def split(self, name: str) -> SplitInfo:
        if name not in self.splits:
            where = f" of {self.root}" if self.root else ""
            have = ", ".join(self.splits) or "none"
            raise DataError(f"dataset{where} has no split {name!r} (it has: {have})")
        return self.splits[name]

    def shard_path(self, shard: ShardInfo) -> Path:
        if self.root is None:
            raise ValueError("manifest was not loaded from a directory")
        return self.root / shard.file

    @property
    def dataset_id(self) -> str:
        """A content hash: equal ids mean identical shards (used to key staged copies)."""
        import hashlib

        h = hashlib.sha256()
        for name in sorted(self.splits):
            for s in self.splits[name].shards:
                h.update(f"{name}/{s.file}/{s.sha256}\n".encode())
        return h.hexdigest()[:16]

    # ---- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "name": self.name,
            "created": self.created,
            "hpcbench_version": self.hpcbench_version,
            "classes": self.classes,
            "sample": {"shape": self.shape, "dtype": self.dtype, "layout": "NCHW"},
            "normalization": {"mean": self.mean, "std": self.std, "scale": "0..1"},
            "splits": {
                n: {
                    "samples": s.samples,
                    "class_counts": s.class_counts,
                    "shards": [asdict(x) for x in s.shards],
                    **({} if s.labeled else {"labeled": False}),
                }
                for n, s in self.splits.items()
            },
            "skipped": self.skipped,
            "options": self.options,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Manifest:
        def bad(what: str) -> DataError:
            return DataError(f"{where}: {what}")

        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise bad(f'not an hpcbench dataset manifest (no "format": "{FORMAT_NAME}")')
        if data.get("version") != FORMAT_VERSION:
            raise bad(f"format version {data.get('version')!r} is not {FORMAT_VERSION}")
        try:
            sample = data["sample"]
            shape = [int(x) for x in sample["shape"]]
            dtype = str(sample["dtype"])
            classes = [str(c) for c in data["classes"]]
            norm = data["normalization"]
            splits: dict[str, SplitInfo] = {}
            for name, s in data["splits"].items():
                shards = [
                    ShardInfo(str(x["file"]), int(x["samples"]), int(x["bytes"]), str(x["sha256"]))
                    for x in s["shards"]
                ]
                labeled = s.get("labeled", True)
                if not isinstance(labeled, bool):
                    raise bad(f"splits.{name}.labeled must be true or false, got {labeled!r}")
                splits[name] = SplitInfo(
                    int(s["samples"]), [int(c) for c in s["class_counts"]], shards, labeled
                )
            manifest = cls(
                name=str(data.get("name", "")),
                classes=classes,
                shape=shape,
                dtype=dtype,
                splits=splits,
                mean=[float(x) for x in norm["mean"]],
                std=[float(x) for x in norm["std"]],
                options=dict(data.get("options", {})),
                source=dict(data.get("source", {})),
                skipped=int(data.get("skipped", 0)),
                created=str(data.get("created", "")),
                hpcbench_version=str(data.get("hpcbench_version", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
            raise bad(f"malformed field ({type(err).__name__}: {err})") from None
        if len(shape) != 3 or min(shape) < 1:
            raise bad(f"sample.shape must be [C, H, W], each >= 1, got {shape}")
        if dtype not in DTYPES:
            raise bad(f"sample.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if manifest.sample_bytes > MAX_SAMPLE_BYTES:
            raise bad(
                f"sample.shape {shape} is {manifest.sample_bytes:,} bytes per sample "
                f"(at most {MAX_SAMPLE_BYTES:,} accepted)"
            )
        problem = normalization_problem(manifest.mean, manifest.std, shape[0])
        if problem:
            raise bad(problem)
        for name, s in splits.items():
            problem = _split_problem(name, s, len(classes), manifest.sample_bytes)
            if problem:
                raise bad(problem)
        return manifest

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> Manifest:
        from hpcbench.files import NotRegularFile, read_regular

        root = Path(root)
        path = root / MANIFEST_NAME
        if not root.is_dir():
            raise DataError(f"{root}: no such dataset directory")
        try:
            raw = read_regular(path, MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            raise DataError(
                f"{path}: missing (is {root} an hpcbench dataset? see 'hpcbench prep --help')"
            ) from None
        except NotRegularFile:
            raise DataError(f"{path}: not a regular file (expected the JSON manifest)") from None
        except OSError as err:
            raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None
        except ValueError as err:
            raise DataError(f"{path}: {err}; not a manifest") from None
        try:
            data = parse_json(raw, path)
        except JsonFileError as err:
            raise DataError(str(err)) from None
        manifest = cls.from_dict(data, str(path))
        manifest.root = root
        _check_shard_links(manifest, root)
        return manifest

    def save(self, root: str | os.PathLike[str]) -> Path:
        return write_json_atomically(Path(root) / MANIFEST_NAME, self.to_dict())

    def summary(self) -> str:
        """A few lines for ``hpcbench prep info``."""
        from hpcbench.files import printable

        c, h, w = self.shape
        mode = {1: "grayscale", 3: "RGB"}.get(c, f"{c} channels")
        classes = [printable(n) for n in self.classes]
        lines = [
            f"dataset {printable(self.name or '?')} at {printable(self.root)}",
            f"  samples {w}x{h} {mode}, {self.dtype}, {self.sample_bytes:,} bytes each; "
            f"{self.num_classes} classes",
            f"  normalisation (train, 0..1 scale): mean {_fmt(self.mean)} std {_fmt(self.std)}",
        ]
        for name, s in self.splits.items():
            size = sum(x.bytes for x in s.shards)
            lines.append(
                f"  {name:5s} {s.samples:>9,} samples in {len(s.shards)} shard(s), {size / 2**20:,.1f} MiB"
            )
        width = max(len(n) for n in classes) if classes else 0
        lines.append("  class" + " " * max(1, width - 3) + "".join(f"{n:>9s}" for n in self.splits))
        for i, cname in enumerate(classes):
            counts = "".join(
                f"{s.class_counts[i]:>9,}" if s.labeled else f"{'-':>9s}"
                for s in self.splits.values()
            )
            lines.append(f"  {cname:<{width + 2}s}{counts}")
        for name, s in self.splits.items():
            if not s.labeled:
                lines.append(f"  {name}: unlabeled (no labels stored; no accuracy is computed)")
        if self.skipped:
            lines.append(f"  {self.skipped} unreadable source image(s) skipped (see skipped.txt)")
        return "\n".join(lines)


def normalization_problem(mean: list[float], std: list[float], channels: int) -> str | None:
    """What is wrong with per-channel mean/std (None when they are usable)."""
    for key, values in (("mean", mean), ("std", std)):
        if len(values) != channels:
            return (
                f"normalization.{key} has {len(values)} value(s) for {channels} channel(s); "
                "give one per channel"
            )
        for i, v in enumerate(values):
            if not math.isfinite(v):
                return f"normalization.{key}[{i}] is {v}; must be a finite number"
            if key == "std" and v <= 0:
                return f"normalization.std[{i}] is {v:g}; must be > 0 (it divides the pixels)"
    return None


def _split_problem(name: str, s: SplitInfo, classes: int, sample_bytes: int) -> str | None:
    """What is wrong with one split's counts and shard list (None when consistent)."""
    if name not in SPLITS:
        return f"unknown split {name!r} (expected {', '.join(SPLITS)})"
    if not s.labeled and name == "train":
        return "splits.train is unlabeled; only val and test may be"
    if len(s.class_counts) != (classes if s.labeled else 0):
        return (
            f"splits.{name}.class_counts has {len(s.class_counts)} entries for {classes} classes"
            if s.labeled
            else f"splits.{name} is unlabeled but has class_counts; give []"
        )
    if s.samples < 0 or min(s.class_counts, default=0) < 0:
        return f"splits.{name}: sample and class counts must be >= 0"
    counted = sum(s.class_counts) if s.labeled else s.samples
    if sum(x.samples for x in s.shards) != s.samples or counted != s.samples:
        return f"splits.{name}: shard sample counts and class counts do not add up to {s.samples}"
    for k, x in enumerate(s.shards):
        where = f"splits.{name}.shards[{k}]"
        if not x.file or "/" in x.file or x.file.startswith(".") or not x.file.isprintable():
            return f"{where}: shard file name {x.file!r} must be a plain file name"
        if x.samples < 1 or x.bytes < 0:
            return f"{where} ({x.file}): samples must be >= 1 and bytes >= 0"
        if x.samples * sample_bytes > x.bytes:
            return (
                f"{where} ({x.file}): {x.samples:,} samples of {sample_bytes:,} bytes do not fit "
                f"in its {x.bytes:,} bytes"
            )
    return None


def _check_shard_links(manifest: Manifest, root: Path) -> None:
    """Raise DataError for a shard that is a symbolic link leading out of the dataset directory:
    the reader, ``verify`` and staging would open whatever file it names. Links are found with one
    listing of the directory (its entries' types), not one ``stat`` per shard."""
    from hpcbench.files import printable

    names = {s.file for info in manifest.splits.values() for s in info.shards}
    try:
        with os.scandir(root) as entries:
            links = sorted(e.name for e in entries if e.name in names and e.is_symlink())
    except OSError:  # a directory we may read files from but not list
        links = sorted(n for n in names if os.path.islink(root / n))
    real_root = os.path.realpath(root)
    for name in links:
        target = os.path.realpath(root / name)
        if os.path.commonpath([real_root, target]) != real_root:
            raise DataError(
                f"{printable(root / name)}: a symbolic link to {printable(target)}, outside the "
                "dataset directory; a shard must lie inside it"
            )


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"
