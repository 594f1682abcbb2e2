"""One shard file: how it is written and opened, and the sha256 that proves it intact.

A shard is an HDF5 file with two datasets: ``images`` (N×C×H×W, uint8 or float16, contiguous and
uncompressed, so that any run of consecutive samples is one sequential read of exactly its bytes)
and ``labels`` (N, int64), plus ``index`` (N, int64: the sample's position in the source listing,
for tracing a sample back to its file). Why contiguous and not chunked+compressed: measured,
compressed chunks read 60× the bytes asked for on random access, and raw pixels barely compress.

Every shard path is checked to be a regular file of the size the manifest states before HDF5
opens it: a FIFO or device named as a shard would otherwise block the reader forever.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.data.files import NotRegularFile, open_regular, regular_size
from hpcbench.data.manifest import DataError, ShardInfo

HASH_CHUNK = 8 << 20


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of the regular file at ``path`` (DataError for a FIFO, device or directory)."""
    h = hashlib.sha256()
    try:
        fd = open_regular(path)
    except NotRegularFile:
        raise DataError(f"{path}: not a regular file") from None
    with os.fdopen(fd, "rb") as fh:
        while block := fh.read(HASH_CHUNK):
            h.update(block)
    return h.hexdigest()


def check_shard_file(path: Path, info: ShardInfo) -> None:
    """Raise DataError unless ``path`` is a regular file of the manifest's size for ``info``."""
    try:
        size = regular_size(path)
    except FileNotFoundError:
        raise DataError(f"{path}: shard named in the manifest is missing") from None
    except NotRegularFile:
        raise DataError(f"{path}: not a regular file (a shard must be an HDF5 file)") from None
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None
    if size != info.bytes:
        raise DataError(
            f"{path}: {size:,} bytes, the manifest says {info.bytes:,} (truncated or replaced shard)"
        )


def write_shard(
    path: Path, images: np.ndarray, labels: np.ndarray, index: np.ndarray, attrs: dict[str, Any]
) -> ShardInfo:
    """Write one shard (to ``path`` directly: the caller owns a temporary directory)."""
    import h5py

    if images.ndim != 4 or len(images) != len(labels) or len(labels) != len(index):
        raise ValueError(
            f"shard {path.name}: images {images.shape}, labels {labels.shape}, index {index.shape}"
        )
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f.create_dataset("images", data=images)  # contiguous, no filter
        f.create_dataset("labels", data=labels.astype(np.int64, copy=False))
        f.create_dataset("index", data=index.astype(np.int64, copy=False))
        for key, value in attrs.items():
            f.attrs[key] = value
    return ShardInfo(path.name, int(len(labels)), path.stat().st_size, file_sha256(path))


class OpenShard:
    """A read-only shard: checked against the manifest when opened, read by row ranges.

    For a contiguous dataset (what the converters write) the byte offset of the pixels is taken
    from HDF5 once, and a run of rows is read with one ``os.preadv`` into the caller's buffer:
    exactly the bytes asked for, no intermediate copy, no HDF5 lock held while reading. Anything
    else (a chunked dataset written by another tool) goes through h5py's ``read_direct``.
    """

    def __init__(self, path: Path, info: ShardInfo, shape: list[int], dtype: str) -> None:
        import h5py

        self.path = path
        self.fd: int | None = None
        self.file: h5py.File | None = None
        check_shard_file(path, info)
        try:
            # locking=False: read-only data on NFS/Lustre, where HDF5's file locks fail.
            self.file = h5py.File(path, "r", locking=False)
            self.images = self.file["images"]
            self.labels_ds = self.file["labels"]
        except (OSError, KeyError) as err:
            self.close()
            raise DataError(f"{path}: not a readable shard ({err})") from None
        want = (info.samples, *shape)
        if self.images.shape != want or self.images.dtype != np.dtype(dtype):
            got = f"{self.images.shape} {self.images.dtype}"
            self.close()
            raise DataError(f"{path}: images are {got}, the manifest says {want} {dtype}")
        self.samples = info.samples
        self.row_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        self._labels: np.ndarray | None = None
        offset = self.images.id.get_offset() if self.images.chunks is None else None
        self.offset: int | None = offset
        if offset is not None:
            try:
                self.fd = open_regular(path)
            except OSError as err:
                self.close()
                raise DataError(f"{path}: not a readable shard ({err})") from None

    @property
    def labels(self) -> np.ndarray:
        if self._labels is None:  # small: read once, keep
            self._labels = self.labels_ds[()]
        return self._labels

    def read_rows(self, start: int, stop: int, out: np.ndarray) -> int:
        """Read rows [start, stop) into ``out`` (shape (stop-start, C, H, W)); return bytes read."""
        if stop <= start:
            return 0
        try:
            self.images.read_direct(out, source_sel=np.s_[start:stop])
        except OSError as err:
            raise DataError(f"{self.path}: read of rows {start}..{stop} failed ({err})") from None
        return out.nbytes

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int:
        """Read rows [start, stop) into the C-contiguous ``out``: one ``preadv`` for a contiguous
        dataset (h5py's ``read_direct`` otherwise); return the bytes read."""
        n = stop - start
        if n <= 0:
            return 0
        if self.fd is None:
            return self.read_rows(start, stop, out)
        want = n * self.row_bytes
        got = os.preadv(
            self.fd,
            [memoryview(out.reshape(-1).view(np.uint8))[:want]],
            self.offset + start * self.row_bytes,
        )
        if got != want:
            raise DataError(f"{self.path}: short read at rows {start}..{stop} (truncated shard?)")
        return got

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.file is None:
            return
        try:
            self.file.close()
        except Exception:  # closing a broken file must not mask the real error
            pass
        self.file = None
