"""The trainer's view of a sharded dataset: per-rank batch sizes, each epoch's sample order, and
iterators over this rank's train batches and evaluation slices.

Two orders (``--data-order``):

- ``global`` (default): per epoch one permutation of the train split, seeded by (seed, epoch);
  global batch j is ``perm[j*G:(j+1)*G]``, cut into per-rank slices of the ranks' batch sizes in
  rank order. Any number of ranks, and any strategy, sees the same global batches: the comparison
  is fair and the results equal. The MPI strategy computes it on rank 0 and Scatters the slices.
- ``shards``: each rank reads only its own shards (:class:`hpcbench.data.ShardedDataset`);
  global batches then depend on the number of ranks.

Evaluation: each rank takes a contiguous 1/W of the split; metrics are summed over ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from hpcbench.data.indexed import SampleReader
from hpcbench.data.manifest import MANIFEST_NAME, DataError, Manifest
from hpcbench.data.sampler import range_of_rank
from hpcbench.data.shards import OpenShard
from hpcbench.this_rank import largest_remainder
from hpcbench.train.config import DEFAULT_GLOBAL_BATCH, ConfigError, TrainConfig


def split_batch(global_batch: int, weights: list[float]) -> list[int]:
    """Per-rank batch sizes proportional to ``weights``, summing to ``global_batch``."""
    return largest_remainder(global_batch, weights)


class TrainData:
    def __init__(self, config: TrainConfig, rank: int, world_size: int) -> None:
        self.config, self.rank, self.world_size = config, rank, world_size
        self.manifest = Manifest.load(config.data.data)
        if config.batch.batch_size_per_rank is not None:
            self.batch_sizes = [config.batch.batch_size_per_rank] * world_size
        else:
            weights = config.batch.rank_weights or [1.0] * world_size
            if len(weights) != world_size:
                raise ConfigError(
                    f"--rank-weights has {len(weights)} values for {world_size} ranks"
                )
            g = config.batch.global_batch_size or DEFAULT_GLOBAL_BATCH
            if g < world_size:
                raise ConfigError(f"--global-batch-size {g} is smaller than the {world_size} ranks")
            self.batch_sizes = split_batch(g, weights)
            if min(self.batch_sizes) < 1:
                raise ConfigError(
                    f"--rank-weights {weights} leave a rank with no sample of the global batch {g}"
                )
        self.global_batch = sum(self.batch_sizes)
        self.batch_size = self.batch_sizes[rank]
        # this rank's share of the global batch: its gradient weight
        self.weight = self.batch_size / self.global_batch
        train = self.manifest.split("train")
        if config.data.data_order == "global":
            paths = None
            if config.data.stage_dir:  # every rank reads from every shard in this order
                from hpcbench.data.staging import stage_shards

                staged = stage_shards(self.manifest, list(train.shards), config.data.stage_dir)
                paths = [staged[s.file] for s in train.shards]
            self.reader = SampleReader(self.manifest, "train", paths)
            self.sharded = None
            steps = train.samples // self.global_batch
            if steps == 0:
                raise ConfigError(
                    f"the train split has {train.samples} samples, fewer than one global batch of {self.global_batch}"
                )
        else:
            from hpcbench.data.reader import ShardedDataset

            self.reader = None
            self.sharded = ShardedDataset(
                config.data.data,
                "train",
                batch_size=self.batch_size,
                rank=rank,
                world_size=world_size,
                seed=config.batch.seed,
                normalize=False,
                stage_dir=config.data.stage_dir,
            )
            steps = len(self.sharded)
        self.steps = min(steps, config.batch.max_steps) if config.batch.max_steps else steps
        self._eval: dict[str, SampleReader] = {}

    # ---- order ---------------------------------------------------------------------------------
    def epoch_index(self, epoch: int) -> np.ndarray:
        """The epoch's global batches: (steps, global batch) sample ids. Same on every rank."""
        n = self.manifest.split("train").samples
        perm = np.random.default_rng([self.config.batch.seed, epoch, 17]).permutation(n)
        return perm[: self.steps * self.global_batch].reshape(self.steps, self.global_batch)

    def rank_slices(self, index: np.ndarray) -> list[np.ndarray]:
        """``index`` cut into every rank's (steps, batch size) slice, in rank order."""
        bounds = np.cumsum([0] + self.batch_sizes)
        return [
            np.ascontiguousarray(index[:, a:b])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]

    # ---- batches ---------------------------------------------------------------------------------
    def train_batches(
        self, epoch: int, my_index: np.ndarray | None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """This rank's batches of the epoch: uint8/float16 images and int64 labels (numpy)."""
        if self.sharded is not None:
            self.sharded.set_epoch(epoch)
            for step, (x, y) in enumerate(self.sharded):
                if step >= self.steps:
                    break
                yield self.checked("train", x.numpy(), y.numpy())
            return
        assert self.reader is not None and my_index is not None
        for ids in my_index:
            yield self.checked("train", *self.reader.read(ids))

    def eval_batches(self, split: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if split not in self.manifest.splits:
            return
        reader = self._eval.get(split)
        if reader is None:
            reader = self._eval[split] = SampleReader(self.manifest, split)
        lo, hi = range_of_rank(reader.samples, self.rank, self.world_size)
        size = self.config.batch.eval_batch_size
        for start in range(lo, hi, size):
            yield self.checked(split, *reader.read(np.arange(start, min(hi, start + size))))

    def checked(
        self, split: str, images: np.ndarray, labels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The batch as it is, once its labels are known to be class numbers of the manifest."""
        k = self.manifest.num_classes
        if len(labels) and (labels.min() < 0 or labels.max() >= k):
            raise DataError(bad_label(self.manifest, split))
        return images, labels

    def io_stats(self) -> dict[str, int]:
        """This epoch's reads on this rank (the counters restart with each epoch)."""
        if self.sharded is not None:
            s = self.sharded.io_stats()
            return {
                "bytes_read": s["bytes_read"],
                "files_opened": s["files_opened"],
                "shards_read": len(s["shards_read"]),
            }
        assert self.reader is not None
        return self.reader.take_io_stats()


def bad_label(manifest: Manifest, split: str) -> str:
    """The first sample of ``split``, in shard order, whose label is not a class of the manifest
    (read again from the shards: this runs once, on the way out)."""
    k = manifest.num_classes
    for shard in manifest.split(split).shards:
        path = manifest.shard_path(shard)
        opened = OpenShard(path, shard, manifest.shape, manifest.dtype)
        try:
            labels = np.asarray(opened.labels)
        finally:
            opened.close()
        wrong = np.flatnonzero((labels < 0) | (labels >= k))
        if len(wrong):
            row = int(wrong[0])
            return (
                f"{path}: sample {row} of the {split} split has label {int(labels[row])}, "
                f"outside the manifest's {k} classes (labels 0..{k - 1})"
            )
    return f"{manifest.root}: the {split} split holds labels outside the manifest's {k} classes"


def ensure_dataset(config: TrainConfig, rank: int, log: Callable[[str], None]) -> None:
    """Refuse a --data without a dataset, except at the default place, where rank 0 generates
    the built-in synthetic set (the other ranks then :func:`wait_for_dataset`)."""
    from hpcbench.train.config import DEFAULT_DATA

    root = Path(config.data.data)
    if (root / MANIFEST_NAME).exists():
        return
    if root.parts[-2:] != Path(DEFAULT_DATA).parts:  # only the default place is generated
        raise ConfigError(
            f"--data {config.data.data}: no dataset there (make one with 'hpcbench prep …')"
        )
    if rank == 0:
        from hpcbench.data_prep import ConvertOptions, convert, synthetic

        log(f"generating the built-in synthetic dataset into {root} (once)")
        convert(
            synthetic(),
            root,
            ConvertOptions(size=(197, 148), grayscale=True, progress=False),
            use_mpi=False,
        )


def wait_for_dataset(config: TrainConfig, timeout_s: float = 900) -> None:
    """Wait until this rank sees the manifest rank 0 wrote (a shared file system may show a new
    file on other nodes a little later)."""
    import time

    root = Path(config.data.data)
    deadline = time.monotonic() + timeout_s
    while not (root / MANIFEST_NAME).exists():
        if time.monotonic() > deadline:
            raise ConfigError(f"{root}: the dataset rank 0 wrote is not visible from this rank")
        time.sleep(0.5)
