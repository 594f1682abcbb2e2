"""Staging: copy a rank's shards once per job to node-local storage, verifying sha256 on the way.

On a cluster the dataset sits on the shared parallel filesystem; reading it every epoch from
there is what saturates the metadata and object servers. ``stage_shards`` copies the shards a
rank will read into ``<stage_dir>/hpcbench-<dataset id>/`` (e.g. ``$TMPDIR`` or ``/dev/shm``):

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
from pathlib import Path

from hpcbench.data.manifest import DataError, Manifest, ShardInfo

log = logging.getLogger(__name__)
COPY_CHUNK = 8 << 20


def staging_root(manifest: Manifest, stage_dir: str | os.PathLike[str]) -> Path:
    return Path(os.path.expandvars(os.fspath(stage_dir))) / f"hpcbench-{manifest.dataset_id}"


def stage_shards(
    manifest: Manifest, shards: list[ShardInfo], stage_dir: str | os.PathLike[str]
) -> dict[str, Path]:
    """Copy ``shards`` under ``stage_dir``; return file name -> staged path."""
    root = staging_root(manifest, stage_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{root}: cannot create the staging directory ({err.strerror})") from None
    return {s.file: _stage_one(manifest, s, root) for s in shards}


def _stage_one(manifest: Manifest, shard: ShardInfo, root: Path) -> Path:
    dest = root / shard.file
    stamp = root / f".{shard.file}.sha256"
    with open(root / f".{shard.file}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _already_staged(dest, stamp, shard):
            return dest
        source = manifest.shard_path(shard)
        tmp = root / f".{shard.file}.tmp-{os.getpid()}"
        h = hashlib.sha256()
        try:
            with open(source, "rb") as src, open(tmp, "wb") as out:
                while block := src.read(COPY_CHUNK):
                    h.update(block)
                    out.write(block)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            raise DataError(f"{source}: shard named in the manifest is missing") from None
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise DataError(f"staging {source} to {root}: {err.strerror}") from None
        if h.hexdigest() != shard.sha256:
            tmp.unlink(missing_ok=True)
            raise DataError(
                f"{source}: sha256 {h.hexdigest()[:12]}… does not match the manifest's "
                f"{shard.sha256[:12]}… (corrupted shard)"
            )
        os.replace(tmp, dest)
        stamp.write_text(shard.sha256 + "\n")
        log.info("staged %s to %s", source, dest)
        return dest


def _already_staged(dest: Path, stamp: Path, shard: ShardInfo) -> bool:
    try:
        return dest.stat().st_size == shard.bytes and stamp.read_text().strip() == shard.sha256
    except OSError:
        return False


def unstage(manifest: Manifest, stage_dir: str | os.PathLike[str]) -> None:
    """Remove this dataset's staged copies (e.g. from /dev/shm at the end of a job)."""
    import shutil

    shutil.rmtree(staging_root(manifest, stage_dir), ignore_errors=True)
