"""Sharded datasets: the on-disk format (manifest + HDF5 shards), the rank-aware reader, the
built-in synthetic set.

Importing this package needs only numpy and h5py; the torch reader is loaded on first use, so that
``hpcbench prep`` runs on a login node without torch.
"""

from __future__ import annotations

from typing import Any

from hpcbench.data.manifest import MANIFEST_NAME, DataError, Manifest, ShardInfo, SplitInfo

__all__ = [
    "MANIFEST_NAME",
    "DataError",
    "Manifest",
    "ShardInfo",
    "SplitInfo",
    "ShardPlan",
    "ShardedDataset",
    "verify_dataset",
]


def __getattr__(name: str) -> Any:
    if name == "ShardedDataset":
        from hpcbench.data.reader import ShardedDataset

        return ShardedDataset
    if name == "ShardPlan":
        from hpcbench.data.sampler import ShardPlan

        return ShardPlan
    if name == "verify_dataset":
        from hpcbench.data.verify import verify_dataset

        return verify_dataset
    raise AttributeError(name)
