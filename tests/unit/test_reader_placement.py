"""The reader's placement of rows: each row read from a shard lands at its place in the served
order, by whichever way :meth:`OpenShard.read_placed` picks, and a window's places invert its order."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hpcbench.data import shards
from hpcbench.data.manifest import DataError, ShardInfo
from hpcbench.data.sampler import ShardPlan
from hpcbench.data.shards import OpenShard, file_sha256, write_shard
from tests.conftest import need_module

h5py = need_module("h5py")

SHAPE = [1, 6, 5]  # 30-byte rows: small, so the tests also set the scatter threshold


def make_shard(path, rows: int = 40, chunks: bool = False) -> tuple[OpenShard, np.ndarray]:
    images = np.arange(rows * 30, dtype=np.uint32).astype(np.uint8).reshape(rows, *SHAPE)
    images[:, 0, 0, 0] = np.arange(rows)  # every row distinct
    labels, index = np.arange(rows) % 3, np.arange(rows)
    if chunks:  # as another tool might write it: chunked, so read through h5py
        with h5py.File(path, "w") as f:
            f.create_dataset("images", data=images, chunks=(4, *SHAPE))
            f.create_dataset("labels", data=labels)
            f.create_dataset("index", data=index)
        info = ShardInfo(path.name, rows, path.stat().st_size, file_sha256(path))
    else:
        info = write_shard(path, images, labels, index, {})
    return OpenShard(path, info, SHAPE, "uint8"), images


@pytest.mark.parametrize("chunks", [False, True])
@pytest.mark.parametrize("threshold", [0, 1 << 30])  # one iovec per row / one run, then placed
@pytest.mark.parametrize(
    "places", [[4, 0, 7, 2, 5], [2, 3, 4, 5], [6], [1, 0], [0, 2, 1, 3]], ids=str
)
def test_read_placed_puts_every_row_at_its_place(tmp_path, monkeypatch, chunks, threshold, places):
    monkeypatch.setattr(shards, "SCATTER_MIN_ROW_BYTES", threshold)
    shard, images = make_shard(tmp_path / "s.h5", chunks=chunks)
    assert shard.direct is not chunks
    out = np.full((8, *SHAPE), 255, dtype=np.uint8)
    got = shard.read_placed(11, out, np.array(places))
    assert got == len(places) * 30
    want = np.full_like(out, 255)
    want[places] = images[11 : 11 + len(places)]
    np.testing.assert_array_equal(out, want)
    shard.close()


def test_rows_beyond_the_iovec_limit_take_several_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "IOV_MAX", 3)
    calls = []
    preadv = os.preadv
    monkeypatch.setattr(shards.os, "preadv", lambda *a: calls.append(1) or preadv(*a))
    shard, images = make_shard(tmp_path / "s.h5")
    places = np.random.default_rng(0).permutation(10)
    out = np.empty((10, *SHAPE), dtype=np.uint8)
    assert shard.read_scattered(5, out, places) == 300
    np.testing.assert_array_equal(out[places], images[5:15])
    assert len(calls) == 4
    shard.close()


def test_scattered_reads_refuse_what_they_cannot_place(tmp_path):
    shard, _ = make_shard(tmp_path / "s.h5")
    out = np.empty((4, *SHAPE), dtype=np.uint8)
    for bad in ([0, 4], [-1, 2]):
        with pytest.raises(ValueError, match="not rows"):
            shard.read_scattered(0, out, np.array(bad))
    with pytest.raises(ValueError, match="not rows"):
        shard.read_scattered(0, np.empty((4, 1, 6, 4), np.uint8), np.array([0, 1]))
    with pytest.raises(ValueError, match="C-contiguous"):
        shard.read_into(0, 2, np.empty((4, *SHAPE), np.uint8)[::2])
    shard.close()
    chunked, _ = make_shard(tmp_path / "c.h5", chunks=True)
    with pytest.raises(ValueError, match="chunked"):
        chunked.read_scattered(0, out, np.array([1, 0]))
    chunked.close()


def test_a_shard_truncated_after_opening_is_a_short_read(tmp_path):
    shard, _ = make_shard(tmp_path / "s.h5")
    os.truncate(shard.path, shard.offset + 20 * 30 + 7)
    out = np.empty((4, *SHAPE), dtype=np.uint8)
    with pytest.raises(DataError, match="short read"):
        shard.read_scattered(18, out, np.array([3, 1, 0, 2]))
    shard.close()


@pytest.mark.parametrize("shuffle", [True, False])
def test_window_places_invert_the_served_order(shuffle):
    plan = ShardPlan(
        [300, 250], rank=0, world_size=1, batch_size=16, shuffle=shuffle, window_samples=64
    )
    for w in plan.windows(2):
        places = w.places()
        if not shuffle:
            assert places is None
            continue
        assert w.order is not None
        np.testing.assert_array_equal(places[w.order], np.arange(w.samples))
