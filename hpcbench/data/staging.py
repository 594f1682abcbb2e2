"""Staging: copy a rank's shards once per job to node-local storage, verifying sha256 on the way.

On a cluster the dataset sits on the shared parallel filesystem; reading it every epoch from
there is what saturates the metadata and object servers. ``stage_shards`` copies the shards a
rank will read into ``<stage_dir>/hpcbench-<uid>/<dataset id>/`` (e.g. ``$TMPDIR`` or
``/dev/shm``):

- ``<stage_dir>`` is often shared by every user of the node, so nothing in it is trusted by name:
  it and every directory above it must be owned by root or this user and, when others may write
  there, sticky (``/tmp``, ``/dev/shm``); ``hpcbench-<uid>`` is created with mode 0700 and must be a real directory (not a symbolic
  link), owned by this uid, writable by nobody else; otherwise staging stops with an error
  naming it. Files inside are opened with ``O_NOFOLLOW`` and must be owned by this uid;
- each file is copied to a temporary name while its sha256 is computed, then renamed, so a crash
  never leaves a half-copied shard that looks whole (Streaming's stale ``/dev/shm``, streaming#781);
- ranks of one node that share a shard copy it once (an ``flock`` per file);
- a shard already staged by this or an earlier job with the same content is reused: the dataset
  id is a hash of all shard hashes, and a ``.sha256`` stamp is written only after verification.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import stat
from pathlib import Path

from hpcbench.data.manifest import DataError, Manifest, ShardInfo
from hpcbench.files import NotRegularFile, open_regular

log = logging.getLogger(__name__)
COPY_CHUNK = 8 << 20
PRIVATE = 0o700


def expanded(stage_dir: str | os.PathLike[str]) -> Path:
    """``stage_dir`` with its environment variables (``$TMPDIR``) expanded on this node; one that
    is not set here is an error (expanded to nothing, or kept as ``$TMPDIR``, it would stage
    into the wrong place or into a directory literally named ``$TMPDIR``)."""
    import re

    text = os.fspath(stage_dir)
    for name in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text):
        if not os.environ.get(name):
            raise DataError(
                f"{text}: {name} is not set on this node; set it or give the staging directory's path"
            )
    return Path(os.path.expandvars(text))


def user_root(stage_dir: str | os.PathLike[str]) -> Path:
    """This user's directory under ``stage_dir``: ``<stage_dir>/hpcbench-<uid>``."""
    return expanded(stage_dir) / f"hpcbench-{os.geteuid()}"


def staging_root(manifest: Manifest, stage_dir: str | os.PathLike[str]) -> Path:
    return user_root(stage_dir) / manifest.dataset_id


def private_directory(path: Path) -> Path:
    """Create ``path`` (mode 0700) or accept it only if it is a real directory of ours that
    nobody else can write to; raise DataError naming it otherwise."""
    try:
        path.mkdir(mode=PRIVATE)
    except FileExistsError:
        pass
    except OSError as err:
        raise DataError(f"{path}: cannot create the staging directory ({err.strerror})") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        why = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise DataError(f"{path}: is {why}; the staging directory must be a real directory")
    if st.st_uid != os.geteuid():
        raise DataError(
            f"{path}: owned by uid {st.st_uid}, not {os.geteuid()}; refusing this staging "
            "directory (remove it, or choose another stage_dir)"
        )
    if st.st_mode & 0o022:
        raise DataError(
            f"{path}: mode {stat.S_IMODE(st.st_mode):o} lets others write; refusing this staging "
            "directory (chmod 700 it)"
        )
    return path


def trusted_ancestry(path: Path) -> None:
    """Refuse ``path`` when a user other than this one (or root) could rename or replace what
    lies in it, and so swap this user's staging directory between its check and its use: it
    and every directory above it must be owned by root or this uid, and writable by nobody
    else unless sticky (as ``/tmp`` and ``/dev/shm`` are). OpenSSH checks key files the same way.
    """
    me = os.geteuid()
    real = Path(os.path.realpath(path))
    for directory in (real, *real.parents):
        st = os.stat(directory)
        if st.st_uid not in (0, me):
            raise DataError(
                f"{path}: {directory} is owned by uid {st.st_uid}, who could replace this "
                "user's staged files; choose a stage_dir of your own (e.g. $TMPDIR)"
            )
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise DataError(
                f"{path}: {directory} (mode {stat.S_IMODE(st.st_mode):o}) lets others rename "
                "what it holds and is not sticky; choose a stage_dir of your own (e.g. $TMPDIR)"
            )


def stage_shards(
    manifest: Manifest, shards: list[ShardInfo], stage_dir: str | os.PathLike[str]
) -> dict[str, Path]:
    """Copy ``shards`` under ``stage_dir``; return file name -> staged path."""
    base = expanded(stage_dir)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{base}: cannot create the staging directory ({err.strerror})") from None
    trusted_ancestry(base)
    private_directory(user_root(stage_dir))
    root = private_directory(staging_root(manifest, stage_dir))
    return {s.file: _stage_one(manifest, s, root) for s in shards}


def _open_ours(path: Path, flags: int, mode: int = 0o600) -> int:
    """Open ``path`` without following a symbolic link; it must be a regular file of ours."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise DataError(f"{path}: not a regular file owned by uid {os.geteuid()}; refusing it")
    os.set_blocking(fd, True)
    return fd


def _stage_one(manifest: Manifest, shard: ShardInfo, root: Path) -> Path:
    dest = root / shard.file
    stamp = root / f".{shard.file}.sha256"
    try:
        lock = _open_ours(root / f".{shard.file}.lock", os.O_RDWR | os.O_CREAT)
    except OSError as err:
        raise DataError(f"{root / shard.file}: cannot lock for staging ({err.strerror})") from None
    with os.fdopen(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if _already_staged(dest, stamp, shard):
            return dest
        _copy_verified(manifest.shard_path(shard), root, shard)
        os.replace(root / f".{shard.file}.tmp-{os.getpid()}", dest)
        _write_stamp(stamp, shard.sha256)
        log.info("staged %s to %s", manifest.shard_path(shard), dest)
        return dest


def _copy_verified(source: Path, root: Path, shard: ShardInfo) -> None:
    """Copy ``source`` to ``.<file>.tmp-<pid>`` in ``root``, checking its sha256 on the way."""
    tmp = root / f".{shard.file}.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    h = hashlib.sha256()
    try:
        src_fd = open_regular(source)
        out_fd = _open_ours(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(src_fd, "rb") as src, os.fdopen(out_fd, "wb") as out:
            while block := src.read(COPY_CHUNK):
                h.update(block)
                out.write(block)
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{source}: shard named in the manifest is missing") from None
    except NotRegularFile:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{source}: not a regular file (a shard must be an HDF5 file)") from None
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise DataError(f"staging {source} to {root}: {err.strerror}") from None
    if h.hexdigest() != shard.sha256:
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"{source}: sha256 {h.hexdigest()[:12]}… does not match the manifest's "
            f"{shard.sha256[:12]}… (corrupted shard)"
        )


def _write_stamp(stamp: Path, digest: str) -> None:
    tmp = stamp.with_name(f"{stamp.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    with os.fdopen(_open_ours(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as fh:
        fh.write(digest + "\n")
    os.replace(tmp, stamp)


def _already_staged(dest: Path, stamp: Path, shard: ShardInfo) -> bool:
    """True when ``dest`` and its stamp are our own regular files and agree with ``shard``."""
    try:
        fd = _open_ours(dest, os.O_RDONLY)
        size = os.fstat(fd).st_size
        os.close(fd)
        if size != shard.bytes:
            return False
        with os.fdopen(_open_ours(stamp, os.O_RDONLY), "r") as fh:
            return fh.read(200).strip() == shard.sha256
    except (OSError, DataError):
        return False


def unstage(manifest: Manifest, stage_dir: str | os.PathLike[str]) -> None:
    """Remove this dataset's staged copies (e.g. from /dev/shm at the end of a job)."""
    import shutil

    root = staging_root(manifest, stage_dir)
    if _is_our_directory(root.parent) and _is_our_directory(root):
        shutil.rmtree(root, ignore_errors=True)


def _is_our_directory(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
