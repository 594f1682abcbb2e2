"""Opening files hpcbench did not write without trusting what they are, and printing their names.

A path named by a manifest, a staging directory, a source listing, a results directory or a
profile may turn out to be a FIFO (``open`` would block forever), a device (``/dev/zero`` never
ends), a directory or a dangling symbolic link. These helpers open with ``O_NONBLOCK`` and check
``fstat`` before any byte is read, and read at most a bound, so such a path gives its caller's
one-line error naming it instead of a hang or an exhausted memory.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """The path exists but is not a regular file (FIFO, device, directory, socket)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(errno.EINVAL, "not a regular file", os.fspath(path))


def open_regular(path: str | os.PathLike[str], follow_symlinks: bool = True) -> int:
    """A read-only descriptor of the regular file at ``path`` (blocking mode restored).

    Raises FileNotFoundError / OSError as ``os.open`` does, and :class:`NotRegularFile` for
    anything that is not a regular file. ``follow_symlinks=False`` refuses a symbolic link
    (``O_NOFOLLOW``: ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path``; ValueError when it holds more than ``limit``."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > limit:
            raise ValueError(f"larger than {limit:,} bytes")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes")
    return data


def read_tail(path: str | os.PathLike[str], limit: int) -> bytes:
    """The last ``limit`` bytes (at most) of the regular file at ``path``: a log that grew
    large, a FIFO or a link to ``/dev/zero`` cannot hang or exhaust the reader."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - limit))
        return fh.read(limit)


def regular_size(path: Path) -> int:
    """The size of the regular file at ``path`` (symbolic links followed)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path)
    return st.st_size


def printable(text: object) -> str:
    """``text`` with control and other non-printable characters escaped (``\\n``, ``\\x1b``), so
    a class or file name cannot move the cursor, clear the screen or fake extra lines."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)
    )
