"""The output directory of a conversion: never inside or over its sources; replaced (with
``--overwrite``) only when it holds an hpcbench dataset and nothing else, and then by a
rename that an interrupt cannot leave half done; only the files hpcbench wrote are removed."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

from hpcbench.data.manifest import FORMAT_NAME, MANIFEST_NAME, DataError, Manifest
from hpcbench.data_prep.source import Source
from hpcbench.files import printable

log = logging.getLogger(__name__)

EXTRA_FILES = ("skipped.txt", "sources.txt", "source_ids.txt")


def dataset_files(path: Path) -> set[str] | None:
    """The names a conversion wrote into ``path`` (its manifest, the shards it lists,
    skipped.txt, sources.txt) when ``path`` is a real directory holding a valid hpcbench
    manifest, else None."""
    if path.is_symlink() or not path.is_dir():
        return None
    try:
        manifest = Manifest.load(path)
    except DataError:
        return None
    shards = {s.file for split in manifest.splits.values() for s in split.shards}
    return {MANIFEST_NAME, *EXTRA_FILES, *shards}


def dataset_problem(path: Path) -> str | None:
    """Why ``--overwrite`` may not replace ``path``, or None when it is a dataset of ours and
    holds nothing else (a directory hpcbench wrote whole, so removing it loses nothing else)."""
    ours = dataset_files(path)
    if ours is None:
        return (
            f"exists and is not an hpcbench dataset (no valid {MANIFEST_NAME} with "
            f'"format": "{FORMAT_NAME}")'
        )
    with os.scandir(path) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name not in ours or not entry.is_file(follow_symlinks=False):
                return f"holds {printable(entry.name)}, which hpcbench did not write there"
    return None


def is_dataset(path: Path) -> bool:
    """True when ``path`` is a dataset directory that ``--overwrite`` may replace."""
    return dataset_problem(path) is None


def _read_paths(source: Source) -> list[str]:
    """Every file and directory the conversion reads, as given (item files included: a class
    folder or list entry may be a link into the output)."""
    return [*source.inputs, *(getattr(source, "paths", None) or [])]


def check_output(out: Path, source: Source, overwrite: bool) -> None:
    """Raise DataError unless writing (and with ``overwrite``, replacing) ``out`` is safe."""
    real_out = Path(os.path.realpath(out))
    for given in _read_paths(source):
        real = Path(os.path.realpath(given))
        if real == real_out or real.is_relative_to(real_out):
            raise DataError(
                f"{out}: is or contains the source {printable(given)}; choose an output "
                "directory outside it"
            )
    for given in source.scanned:
        if real_out.is_relative_to(os.path.realpath(given)):
            raise DataError(
                f"{out}: inside the source directory {given}; choose an output directory outside it"
            )
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise DataError(f"{out}: exists (choose another directory or pass --overwrite)")
    if out.is_symlink():
        raise DataError(
            f"{out}: a symbolic link; --overwrite replaces only a real dataset directory"
        )
    problem = dataset_problem(out)
    if problem:
        raise DataError(
            f"{out}: {problem}; --overwrite replaces only a directory holding an hpcbench "
            "dataset and nothing else: remove it yourself or choose another directory"
        )


def swap_in(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` (a dataset: checked before converting, and
    again here) is moved aside first and removed after. SIGINT/SIGTERM wait until the renames
    are done, so an interrupt never leaves neither the old dataset nor the new one."""
    blocked = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        if not os.path.lexists(out):
            os.replace(tmp, out)
            return
        ours = dataset_files(out)
        problem = dataset_problem(out)
        if ours is None or problem:
            raise DataError(f"{out}: changed while converting and {problem}; left as it is")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old, out)
            raise
        _remove_dataset(old, ours)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _remove_dataset(old: Path, ours: set[str]) -> None:
    """Remove the replaced dataset: only the files hpcbench wrote, then the directory; anything
    that appeared there meanwhile is left, with a warning."""
    for name in ours:
        with contextlib.suppress(FileNotFoundError):
            (old / name).unlink()
    try:
        old.rmdir()
    except OSError:
        log.warning(
            "hpcbench prep: %s held files hpcbench did not write; left there for you to check", old
        )
