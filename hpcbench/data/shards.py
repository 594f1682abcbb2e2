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

from hpcbench.data.manifest import DataError, ShardInfo
from hpcbench.files import NotRegularFile, open_regular, regular_size

HASH_CHUNK = 8 << 20
IOV_MAX = 1024  # buffers per preadv: Linux's limit (POSIX guarantees at least 16)
# Rows at least this large are read straight to scattered places (one iovec each); smaller ones
# are read as a run, then placed: a Python object per row costs more than copying it again
# (measured on the synthetic set: the two break even near 9 KiB rows).
SCATTER_MIN_ROW_BYTES = 8 << 10


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


def byte_view(out: np.ndarray) -> memoryview:
    """The bytes of the C-contiguous array ``out``, flat, writable."""
    if not out.flags.c_contiguous:
        raise ValueError("rows can only be read into a C-contiguous array")
    return memoryview(out.reshape(-1).view(np.uint8))


class OpenShard:
    """A read-only shard: checked against the manifest when opened, read by row ranges.

    For a contiguous dataset (what the converters write) the byte offset of the pixels is taken
    from HDF5 once, and a run of rows is read with one ``os.preadv`` into the caller's buffer, or
    scattered, each row to wherever the caller wants it (:meth:`read_placed`): exactly the bytes
    asked for, no intermediate copy, no HDF5 lock held while reading. Anything else (a chunked
    dataset written by another tool) goes through h5py's ``read_direct``.
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

    @property
    def direct(self) -> bool:
        """True when rows are read with ``preadv`` (a contiguous dataset), not through HDF5."""
        return self.fd is not None

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int:
        """Read rows [start, stop) into the C-contiguous ``out``: one ``preadv`` for a contiguous
        dataset (h5py's ``read_direct`` otherwise); return the bytes read."""
        n = stop - start
        if n <= 0:
            return 0
        if self.fd is None:
            return self.read_rows(start, stop, out)
        return self._preadv(start, [byte_view(out)[: n * self.row_bytes]])

    def read_placed(self, start: int, out: np.ndarray, places: np.ndarray) -> int:
        """Read rows ``start, start+1, …`` into ``out[places[0]], out[places[1]], …`` (``out``
        C-contiguous, rows of this shard's shape, ``places`` distinct) the cheapest way: one run
        when the places follow each other, else each row straight to its place (one iovec per
        row, :meth:`read_scattered`) when rows are large and the dataset contiguous, else a run
        into a temporary then placed with one copy. Return the bytes read."""
        n = len(places)
        if n == 0:
            return 0
        first = int(places[0])
        if int(places[-1]) - first == n - 1 and (n < 3 or bool(np.all(np.diff(places) == 1))):
            return self.read_into(start, start + n, out[first : first + n])
        if self.direct and self.row_bytes >= SCATTER_MIN_ROW_BYTES:
            return self.read_scattered(start, out, places)
        rows = np.empty((n, *out.shape[1:]), dtype=out.dtype)
        got = self.read_into(start, start + n, rows)
        out[places] = rows
        return got

    def read_scattered(self, start: int, out: np.ndarray, places: np.ndarray) -> int:
        """Read rows ``start, start+1, …`` into ``out[places[0]], out[places[1]], …`` with one
        iovec per row: the kernel copies each row straight to its place, in as few ``preadv``
        calls as the iovec limit allows. Contiguous datasets only (see :attr:`direct`); return
        the bytes read."""
        if self.fd is None:
            raise ValueError(f"{self.path}: a chunked dataset cannot be read scattered")
        size = self.row_bytes
        if len(places) and not (
            out[:1].nbytes == size and 0 <= places.min() <= places.max() < len(out)
        ):
            raise ValueError(f"places {places.min()}..{places.max()} are not rows of {out.shape}")
        flat = byte_view(out)
        return self._preadv(start, [flat[at : at + size] for at in (places * size).tolist()])

    def _preadv(self, start: int, buffers: list[memoryview]) -> int:
        """Fill ``buffers`` in turn from the bytes of rows ``start, …``; return the bytes read."""
        assert self.fd is not None and self.offset is not None
        first = offset = self.offset + start * self.row_bytes
        for i in range(0, len(buffers), IOV_MAX):
            group = buffers[i : i + IOV_MAX]
            want = sum(b.nbytes for b in group)
            if os.preadv(self.fd, group, offset) != want:
                rows = (offset - self.offset) // self.row_bytes
                raise DataError(f"{self.path}: short read at row {rows} (truncated shard?)")
            offset += want
        return offset - first

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
