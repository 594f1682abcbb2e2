"""The rank-aware reader over real HDF5 shards: what each rank reads, DataLoader workers,
staging, and that the built-in synthetic set is genuinely learnable."""

from __future__ import annotations

import numpy as np
import pytest

from hpcbench.data import Manifest, ShardedDataset, shards
from hpcbench.data.sampler import rank_pieces
from hpcbench.data.shards import OpenShard
from hpcbench.data_prep import ConvertOptions, convert, synthetic
from tests.conftest import need_module

torch = need_module("torch")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "shapes"
    # 1800 samples, 1530 train in shards of 200: ranges of 2 and 4 ranks cut through shards.
    convert(
        synthetic(1800, 9),
        root,
        ConvertOptions(size=(24, 20), grayscale=True, shard_samples=200, progress=False),
    )
    return root


def epoch_rows(ds: ShardedDataset, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    ds.set_epoch(epoch)
    xs, ys = zip(*ds, strict=True)
    return torch.cat(xs).numpy(), torch.cat(ys).numpy()


@pytest.mark.parametrize("world", [1, 2, 4])
def test_each_rank_reads_its_share_of_bytes_and_only_its_own_shards(dataset, world):
    m = Manifest.load(dataset)
    train = m.split("train")
    sizes = [s.samples for s in train.shards]
    split_bytes = train.samples * m.sample_bytes
    shard_bytes = max(sizes) * m.sample_bytes
    seen = []
    for rank in range(world):
        ds = ShardedDataset(
            dataset, "train", batch_size=32, rank=rank, world_size=world, normalize=False
        )
        x, y = epoch_rows(ds, 0)
        st = ds.io_stats()
        assert abs(st["bytes_read"] - split_bytes / world) <= shard_bytes
        assert st["bytes_read"] == len(y) * m.sample_bytes  # nothing read but the samples yielded
        own = {train.shards[p.shard].file for p in rank_pieces(sizes, rank, world)}
        # (the drop policy may skip a rank's few rows in a boundary shard: subset, not equality)
        assert set(st["shards_read"]) <= own and st["files_opened"] == len(st["shards_read"])
        assert st["batches"] == len(ds) and st["samples"] == len(y)
        seen.append({(img.tobytes(), int(lab)) for img, lab in zip(x, y, strict=True)})
    # disjoint across ranks
    assert sum(len(s) for s in seen) == len(set().union(*seen))
    assert (
        len(
            {
                len(ShardedDataset(dataset, "train", batch_size=32, rank=r, world_size=world))
                for r in range(world)
            }
        )
        == 1
    )


def test_epochs_reshuffle_reproducibly_and_eval_sees_everything_once(dataset):
    ds = ShardedDataset(dataset, "train", batch_size=16, rank=0, world_size=1, seed=1)
    a0, _ = epoch_rows(ds, 0)
    again, _ = epoch_rows(
        ShardedDataset(dataset, "train", batch_size=16, rank=0, world_size=1, seed=1), 0
    )
    a1, _ = epoch_rows(ds, 1)
    np.testing.assert_array_equal(a0, again)
    assert not np.array_equal(a0, a1)
    m = Manifest.load(dataset)
    for world in (1, 3):
        labels = np.concatenate(
            [
                epoch_rows(
                    ShardedDataset(dataset, "test", batch_size=50, rank=r, world_size=world), 0
                )[1]
                for r in range(world)
            ]
        )
        assert np.bincount(labels, minlength=9).tolist() == m.split("test").class_counts


def test_normalised_batches_use_the_manifest_statistics(dataset):
    m = Manifest.load(dataset)
    raw, _ = epoch_rows(
        ShardedDataset(dataset, "val", batch_size=8, rank=0, world_size=1, normalize=False), 0
    )
    norm, _ = epoch_rows(ShardedDataset(dataset, "val", batch_size=8, rank=0, world_size=1), 0)
    assert raw.dtype == np.uint8 and norm.dtype == np.float32
    np.testing.assert_allclose(norm, (raw / 255 - m.mean[0]) / m.std[0], rtol=1e-5, atol=1e-5)


def plan_rows(ds: ShardedDataset, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The epoch's batches (images, labels) as the plan says, read row by row."""
    m = ds.manifest
    opened = [OpenShard(ds.paths[i], s, m.shape, m.dtype) for i, s in enumerate(ds.info.shards)]
    out = []
    for batch in ds.plan.epoch_batches(epoch):
        x = np.empty((len(batch), *m.shape), dtype=m.dtype)
        for j, (shard, row) in enumerate(batch):
            opened[shard].read_into(row, row + 1, x[j : j + 1])
        out.append((x, np.array([opened[shard].labels[row] for shard, row in batch])))
    for o in opened:
        o.close()
    return out


@pytest.mark.parametrize("threshold", [0, 1 << 30], ids=["row-to-place", "run-then-place"])
@pytest.mark.parametrize("split", ["train", "val"])
def test_batches_are_the_plan_rows_and_stay_the_consumers(dataset, monkeypatch, threshold, split):
    """Rows land where the plan serves them, whichever way they are placed; every batch stays as
    it was when yielded (none is a view of a buffer that a later window refills); normalised
    batches are exactly ``stored * scale + shift`` in float32."""
    monkeypatch.setattr(shards, "SCATTER_MIN_ROW_BYTES", threshold)
    batch, window = (24, 100) if split == "train" else (4, 8)  # val: 18 samples on rank 1
    kw = dict(batch_size=batch, rank=1, world_size=2, window_bytes=window * 480, seed=4)
    raw = ShardedDataset(dataset, split, normalize=False, **kw)
    norm = ShardedDataset(dataset, split, **kw)
    assert len(raw.plan.windows(1)) > 2  # several windows: buffers are reused
    want = plan_rows(raw, 1)
    raw.set_epoch(1)
    norm.set_epoch(1)
    got, got_norm = list(raw), list(norm)  # every batch held to the end of the epoch
    assert len(got) == len(want)
    for k, ((x, y), (wx, wy)) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(x.numpy(), wx), f"batch {k} is not the plan's rows"
        assert np.array_equal(y.numpy(), wy), f"batch {k} has not the plan's labels"
    scale, shift = raw.manifest.normalization()
    for (x, y), (xn, yn) in zip(got, got_norm, strict=True):
        exact = np.multiply(x.numpy(), scale, dtype=np.float32) + shift
        assert xn.dtype == torch.float32 and np.array_equal(xn.numpy(), exact)
        assert torch.equal(y, yn)
    assert raw.io_stats()["bytes_read"] == sum(x.numel() for x, _ in got)


@pytest.mark.parametrize("workers", [2])
def test_dataloader_workers_read_each_byte_once_and_counters_reach_the_parent(dataset, workers):
    plain = ShardedDataset(dataset, "train", batch_size=32, rank=1, world_size=2, normalize=False)
    x0, y0 = epoch_rows(plain, 3)
    # Touch the files in the parent first: the workers must not reuse its HDF5 handles.
    par = ShardedDataset(dataset, "train", batch_size=32, rank=1, world_size=2, normalize=False)
    list(par)
    loader = torch.utils.data.DataLoader(
        par, batch_size=None, num_workers=workers, persistent_workers=True
    )
    outputs = []
    for epoch in (3, 4):
        par.set_epoch(epoch)
        xs, ys = zip(*loader, strict=True)
        x, y = torch.cat(xs).numpy(), torch.cat(ys).numpy()
        st = par.io_stats()
        assert len(xs) == len(plain)
        assert st["bytes_read"] == plain.io_stats()["bytes_read"] == x.nbytes
        assert st["samples"] == len(y)
        if epoch == 3:  # same samples as without workers (order interleaved by window)
            key = lambda a, b: sorted(zip([r.tobytes() for r in a], b.tolist(), strict=True))  # noqa: E731
            assert key(x, y) == key(x0, y0)
        outputs.append(x)
    assert not np.array_equal(*outputs)  # set_epoch reached the persistent workers: a new order


def test_staging_copies_own_shards_once_and_reads_from_the_copy(dataset, tmp_path):
    stage = tmp_path / "stage"
    ds = ShardedDataset(dataset, "train", batch_size=32, rank=0, world_size=4, stage_dir=stage)
    staged = sorted(p.name for p in stage.rglob("*.h5"))
    assert staged == sorted(ds.info.shards[i].file for i in ds.plan.shards)
    assert all(str(p).startswith(str(stage)) for i, p in enumerate(ds.paths) if i in ds.plan.shards)
    mtimes = {p: p.stat().st_mtime_ns for p in stage.rglob("*.h5")}
    ShardedDataset(
        dataset, "train", batch_size=32, rank=0, world_size=4, stage_dir=stage
    )  # next job
    assert mtimes == {p: p.stat().st_mtime_ns for p in stage.rglob("*.h5")}
    x, _ = epoch_rows(ds, 0)
    ref, _ = epoch_rows(ShardedDataset(dataset, "train", batch_size=32, rank=0, world_size=4), 0)
    np.testing.assert_array_equal(x, ref)
    assert not [p for p in stage.rglob("*") if ".tmp-" in p.name]
