"""``hpcbench prep verify``: prove a dataset directory matches its manifest, or name the first
file that does not (missing, truncated, corrupted, wrong shape, wrong labels)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import UNLABELED, DataError, Manifest
from hpcbench.data.shards import OpenShard, check_shard_file, file_sha256
from hpcbench.files import printable


def verify_dataset(root: str | os.PathLike[str], check_hash: bool = True) -> Manifest:
    """Check every shard against the manifest; raise DataError naming the first problem."""
    root = Path(root)
    manifest = Manifest.load(root)
    for split, info in manifest.splits.items():
        counts = np.zeros(manifest.num_classes, dtype=np.int64)
        for shard in info.shards:
            path = root / shard.file
            check_shard_file(path, shard)
            if check_hash and (digest := file_sha256(path)) != shard.sha256:
                raise DataError(
                    f"{path}: sha256 {digest[:12]}… does not match the manifest's {shard.sha256[:12]}… (corrupted shard)"
                )
            opened = OpenShard(path, shard, manifest.shape, manifest.dtype)
            try:
                labels = opened.labels
            finally:
                opened.close()
            if labels.shape != (shard.samples,):
                raise DataError(f"{path}: {labels.shape} labels for {shard.samples} samples")
            if not info.labeled:
                if len(labels) and (labels != UNLABELED).any():
                    raise DataError(
                        f"{path}: the {split} split is unlabeled but the shard stores labels "
                        f"other than {UNLABELED}"
                    )
                continue
            if len(labels) and (labels.min() < 0 or labels.max() >= manifest.num_classes):
                raise DataError(f"{path}: labels outside 0..{manifest.num_classes - 1}")
            counts += np.bincount(labels, minlength=manifest.num_classes)
        if info.labeled and counts.tolist() != info.class_counts:
            raise DataError(
                f"{root / 'manifest.json'}: {split} class counts {info.class_counts} differ from the shards' {counts.tolist()}"
            )
    return manifest


def unreferenced_files(manifest: Manifest) -> list[str]:
    """Shard-like files in the directory that the manifest does not name (left-overs)."""
    assert manifest.root is not None
    named = {s.file for info in manifest.splits.values() for s in info.shards}
    return sorted(printable(p.name) for p in manifest.root.glob("*.h5") if p.name not in named)
