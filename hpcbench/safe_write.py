"""Writing inside a run directory that someone else may write too, without following links.

A run directory on a shared filesystem is often writable by a group. Whoever can write it can
plant ``telemetry`` as a symbolic link to the victim's home, or ``telemetry/rank-0.jsonl`` as a
link to the victim's ``~/.bashrc``, and a writer that follows links appends to, truncates or
deletes the victim's files. :class:`RunSubdir` holds one directory of a run directory
(``telemetry/``, ``.measure/``, ``traces/``) open by descriptor and does every operation
relative to it:

- the directory itself is opened with ``O_NOFOLLOW``: a link there is refused
  (:class:`UnsafePath`), as is a directory owned by another user;
- a file is opened with ``O_NOFOLLOW`` (``O_CREAT | O_EXCL`` when it is new) and kept only when
  it is a regular file of this user with one link (never a FIFO, a device, a hard link);
- a rewrite goes through a private temporary file of unpredictable name (mode 0600, created
  with ``O_EXCL``, as ``tempfile.mkstemp`` makes one, but inside the directory held open) and
  ``os.replace``, which replaces a link rather than writing through it.

The run directory itself is the user's choice (a link there is theirs) and is followed.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from hpcbench.atomic import current_umask

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NO_LINK = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path inside a run directory that is not this user's own directory or regular file
    (a symbolic link, another user's file, a FIFO, a hard link): never written through."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EPERM, f"{why}: not written through", os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _own(path: Path, st: os.stat_result, kind: str) -> None:
    """Refuse what is not this user's (a directory) or this user's single-linked regular file."""
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise UnsafePath(path, "not a regular file")
    if st.st_uid != os.geteuid():
        raise UnsafePath(path, f"owned by uid {st.st_uid}, not this user's")
    if kind == "file" and st.st_nlink > 1:
        raise UnsafePath(path, f"a file with {st.st_nlink} hard links")


class RunSubdir:
    """The directory ``parent/name`` held open (made when ``create``, mode ``mode`` less the
    umask); :class:`UnsafePath` when it is a link or another user's, FileNotFoundError when it
    is missing and not made. Close it (or use it as a context manager)."""

    def __init__(self, parent: str | Path, name: str, create: bool = True,
                 mode: int = 0o777) -> None:  # fmt: skip
        self.path = Path(parent) / name
        if create:
            Path(parent).mkdir(parents=True, exist_ok=True)
        top = os.open(parent, _DIR_FLAGS)
        try:
            if create:
                try:
                    os.mkdir(name, mode, dir_fd=top)
                except FileExistsError:
                    pass
            try:
                self.fd = os.open(name, _DIR_FLAGS | _NO_LINK, dir_fd=top)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    link = stat.S_ISLNK(os.lstat(name, dir_fd=top).st_mode)
                    why = "a symbolic link" if link else "not a directory"
                    raise UnsafePath(self.path, why) from None
                raise
        finally:
            os.close(top)
        try:
            _own(self.path, os.fstat(self.fd), "directory")
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> RunSubdir:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open_fd(self, name: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor of the regular file ``name`` (checked before any byte moves)."""
        try:
            fd = os.open(name, flags | _NO_LINK, mode, dir_fd=self.fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise UnsafePath(self.path / name, "a symbolic link") from None
            raise
        try:
            _own(self.path / name, os.fstat(fd), "file")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_append(self, name: str) -> BinaryIO:
        """``name`` opened to append (and read), made (``O_EXCL``) when it does not exist."""
        flags = os.O_RDWR | os.O_APPEND
        try:
            fd = self.open_fd(name, flags)
        except FileNotFoundError:
            fd = self.open_fd(name, flags | os.O_CREAT | os.O_EXCL)
        return os.fdopen(fd, "a+b")

    def read(self, name: str, limit: int) -> bytes:
        """The bytes of the regular file ``name`` (this user's); ValueError beyond ``limit``."""
        with os.fdopen(self.open_fd(name, os.O_RDONLY), "rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{self.path / name}: larger than {limit:,} bytes")
        return data

    def write_atomically(self, name: str, data: bytes, mode: int = 0o644) -> Path:
        """Replace ``name`` by ``data`` through a private temporary file; its path."""
        for _ in range(100):
            tmp = f".{name}.{secrets.token_hex(8)}.tmp"
            try:
                fd = self.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name", os.fspath(self.path))
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), mode & ~current_umask())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.unlink(tmp)
            raise
        return self.path / name

    def unlink(self, name: str) -> None:
        """Remove the entry ``name`` of this directory (a link is removed, never followed)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def remove_if_empty(self) -> None:
        """Remove this directory when nothing is left in it (a link put in its place is not)."""
        try:
            if not os.listdir(self.fd):
                os.rmdir(self.path)
        except OSError:
            pass
