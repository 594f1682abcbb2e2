"""The manifest of a sharded dataset: what ``manifest.json`` holds, how it is read and checked.

A dataset directory holds ``manifest.json`` plus one HDF5 file per shard. The manifest names the
splits and their shards (samples, bytes, sha256 each), the classes and per-class counts per split,
the sample shape and dtype, the normalisation statistics of the train split and the conversion
options used. docs/data.md describes the format; this module is its only reader and writer.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "hpcbench-shards"
FORMAT_VERSION = 1
SPLITS = ("train", "val", "test")
DTYPES = ("uint8", "float16")


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
    class_counts: list[int]
    shards: list[ShardInfo]


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

    def normalization(self):  # noqa: ANN201 - numpy arrays
        """(scale, shift), float32 of shape (C, 1, 1), such that ``stored * scale + shift`` is
        ``(x - mean) / std`` on the 0..1 scale, whatever the stored dtype."""
        import numpy as np

        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1, 1, 1)
        std = np.asarray(self.std, dtype=np.float32).reshape(-1, 1, 1)
        unit = np.float32(1 / 255 if self.dtype == "uint8" else 1.0)
        return unit / std, -mean / std

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
                splits[name] = SplitInfo(
                    int(s["samples"]), [int(c) for c in s["class_counts"]], shards
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
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise bad(f"malformed field ({type(err).__name__}: {err})") from None
        if len(shape) != 3 or min(shape) < 1:
            raise bad(f"sample.shape must be [C, H, W], got {shape}")
        if dtype not in DTYPES:
            raise bad(f"sample.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if len(manifest.mean) != shape[0] or len(manifest.std) != shape[0]:
            raise bad("normalization mean/std need one value per channel")
        for name, s in splits.items():
            if name not in SPLITS:
                raise bad(f"unknown split {name!r} (expected {', '.join(SPLITS)})")
            if len(s.class_counts) != len(classes):
                raise bad(
                    f"splits.{name}.class_counts has {len(s.class_counts)} entries for {len(classes)} classes"
                )
            if sum(x.samples for x in s.shards) != s.samples or sum(s.class_counts) != s.samples:
                raise bad(
                    f"splits.{name}: shard sample counts and class counts do not add up to {s.samples}"
                )
            for x in s.shards:
                if "/" in x.file or x.file.startswith("."):
                    raise bad(f"shard file name {x.file!r} must be a plain file name")
        return manifest

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> Manifest:
        root = Path(root)
        path = root / MANIFEST_NAME
        if not root.is_dir():
            raise DataError(f"{root}: no such dataset directory")
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise DataError(
                f"{path}: missing (is {root} an hpcbench dataset? see 'hpcbench prep --help')"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: not valid JSON ({err})") from None
        manifest = cls.from_dict(data, str(path))
        manifest.root = root
        return manifest

    def save(self, root: str | os.PathLike[str]) -> Path:
        return write_json_atomically(Path(root) / MANIFEST_NAME, self.to_dict())

    def summary(self) -> str:
        """A few lines for ``hpcbench prep info``."""
        c, h, w = self.shape
        mode = {1: "grayscale", 3: "RGB"}.get(c, f"{c} channels")
        lines = [
            f"dataset {self.name or '?'} at {self.root}",
            f"  samples {w}x{h} {mode}, {self.dtype}, {self.sample_bytes:,} bytes each; "
            f"{self.num_classes} classes",
            f"  normalisation (train, 0..1 scale): mean {_fmt(self.mean)} std {_fmt(self.std)}",
        ]
        for name, s in self.splits.items():
            size = sum(x.bytes for x in s.shards)
            lines.append(
                f"  {name:5s} {s.samples:>9,} samples in {len(s.shards)} shard(s), {size / 2**20:,.1f} MiB"
            )
        width = max(len(n) for n in self.classes) if self.classes else 0
        lines.append("  class" + " " * max(1, width - 3) + "".join(f"{n:>9s}" for n in self.splits))
        for i, cname in enumerate(self.classes):
            counts = "".join(f"{s.class_counts[i]:>9,}" for s in self.splits.values())
            lines.append(f"  {cname:<{width + 2}s}{counts}")
        if self.skipped:
            lines.append(f"  {self.skipped} unreadable source image(s) skipped (see skipped.txt)")
        return "\n".join(lines)


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def write_json_atomically(path: Path, data: Any) -> Path:
    return write_atomically(path, json.dumps(data, indent=1) + "\n")
