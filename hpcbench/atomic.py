"""Writing a file so that readers see the old content or the new, never half of it: a temporary
file in the same directory, then a rename. Every output hpcbench writes goes through here.

Modes are requests, as for ``open``: the process umask is applied, so a user with ``umask 077``
gets files nobody else can read (a script copy may hold secrets passed with ``--env``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process umask, read without changing it (Linux ≥ 4.7), else by setting it back."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` to ``path`` (parents created) through a temporary file and a rename.

    The file gets ``mode`` less the umask; the temporary file is private until it is complete.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomically(path: Path, data: Any) -> Path:
    """``data`` as indented JSON with a final newline, written as :func:`write_atomically`
    does."""
    return write_atomically(path, json.dumps(data, indent=1) + "\n")


def lock_directory(directory: Path) -> int:
    """Create ``directory`` and hold ``directory/.lock`` (an exclusive ``flock``) until this
    process ends; the lock's file descriptor. ``BlockingIOError`` when another process holds it,
    another ``OSError`` when the directory cannot be used."""
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BlockingIOError(f"{directory / '.lock'} is held by another process") from None
    return fd
