"""The doctor's filesystem step: read bandwidth of the job's data, from each node alone and from
all nodes at once, and of each node's local staging directory.

The data is ``--path`` (a file or a directory of files, such as a data set's HDF5 shards: read
up to ``max_bytes`` of it), else a file the doctor writes in the run directory. Before each read
the file's pages are dropped from this node's cache (``posix_fadvise(DONTNEED)``), so that what
is measured is the filesystem, not memory. Node leaders read one after another (each alone),
then together (the contention a shared filesystem sees when every rank of a job starts reading).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

CHUNK = 4 << 20
DEFAULT_BYTES = 64 << 20


class FilesystemError(ValueError):
    """A path the doctor cannot read: one line naming it."""


def data_files(path: Path, max_bytes: int) -> list[Path]:
    """The regular files to read under ``path`` (a file or a directory), up to ``max_bytes``."""
    if not path.exists():
        raise FilesystemError(f"--path {path}: no such file or directory")
    if path.is_file():
        return [path]
    files, total = [], 0
    for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
        files.append(f)
        total += f.stat().st_size
        if total >= max_bytes:
            break
    if not files:
        raise FilesystemError(f"--path {path}: holds no regular file to read")
    return files


def write_probe_file(folder: Path, size: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "doctor-read.bin"
    block = os.urandom(CHUNK)
    tmp = folder / f".doctor-read.bin.{os.getpid()}"
    with tmp.open("wb") as f:
        for _ in range(max(1, size // CHUNK)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(target)
    return target


def read_bandwidth(files: list[Path], max_bytes: int) -> float:
    """MB/s reading ``files`` (up to ``max_bytes``), their cached pages dropped first."""
    total, start = 0, time.perf_counter()
    for path in files:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while total < max_bytes:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                total += len(chunk)
        finally:
            os.close(fd)
        if total >= max_bytes:
            break
    seconds = time.perf_counter() - start
    return total / seconds / 1e6 if seconds > 0 else 0.0


def staging_bandwidth(size: int) -> tuple[str, float]:
    """This node's staging directory (``$TMPDIR``, else /tmp): MB/s reading a file written there."""
    base = Path(os.environ.get("TMPDIR") or tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix="hpcbench-doctor-", dir=base) as folder:
        target = write_probe_file(Path(folder), size)
        return str(base), read_bandwidth([target], size)
