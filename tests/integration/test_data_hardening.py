"""Hostile and careless inputs to ``hpcbench prep`` and the data reader.

Each test builds the bad input for real (directories, symbolic links, FIFOs, hand-edited
manifests, crafted PNG headers, files owned by another uid) and runs the shipped code: the CLI in
a subprocess where a user would, the reader in-process. Expected: one line on stderr naming the
file and field, a non-zero exit, nothing of the user's deleted, nothing half-written.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hpcbench.data import DataError, Manifest
from hpcbench.data_prep import ConvertOptions, convert, synthetic
from tests.conftest import hpcbench
from tests.integration.test_data_prep import make_folder


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    convert(
        synthetic(180, 3),
        root,
        ConvertOptions(size=(20, 16), grayscale=True, shard_samples=40, progress=False, workers=1),
    )
    return root


def edit_manifest(root: Path, change: Callable[[dict], object]) -> None:
    path = root / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# ---- --overwrite never deletes what is not ours ----------------------------------------------------
def test_overwrite_refuses_a_directory_that_is_not_a_dataset(tmp_path):
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "thesis.tex").write_text("years of work")
    (victim / "sub" / "data.csv").write_text("1,2\n")
    before = snapshot(victim)
    r = hpcbench(
        "prep", "synthetic", "victim", "--samples", "90", "--size", "8x8", "-q", "--overwrite",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert "victim" in line and "not an hpcbench dataset" in line
    assert snapshot(victim) == before and leftovers(tmp_path) == []


def test_overwrite_refuses_the_source_itself(tmp_path):
    make_folder(tmp_path / "photos")
    before = snapshot(tmp_path / "photos")
    r = hpcbench("prep", "folder", "photos", "photos", "--size", "8x8", "--overwrite", cwd=tmp_path)
    assert r.returncode == 2 and "photos" in one_line(r.stderr)
    assert snapshot(tmp_path / "photos") == before and leftovers(tmp_path) == []


def test_overwrite_refuses_a_dataset_that_is_or_holds_the_source(tmp_path, dataset):
    make_folder(dataset / "inner")  # the user keeps the images inside an old dataset
    make_folder(dataset, seed=1)  # ... or the class directories right beside the shards
    before = snapshot(dataset)
    (tmp_path / "alias").symlink_to("ds/inner")  # the same, through a symbolic link
    for source in ("ds/inner", "ds", "alias"):
        r = hpcbench("prep", "folder", source, "ds", "--size", "8x8", "--overwrite", cwd=tmp_path)
        assert r.returncode == 2
        assert "source" in one_line(r.stderr), r.stderr
    assert snapshot(dataset) == before and leftovers(tmp_path) == []


def test_overwrite_refuses_a_fake_manifest_beside_other_files(tmp_path):
    """A one-line manifest.json claiming our format does not make a directory ours."""
    victim = tmp_path / "proj"
    (victim / "src").mkdir(parents=True)
    (victim / "src" / "main.py").write_text("print(1)\n")
    (victim / "manifest.json").write_text('{"format": "hpcbench-shards"}')
    before = snapshot(victim)
    r = hpcbench(
        "prep", "synthetic", "proj", "--samples", "90", "--size", "8x8", "-q", "--overwrite",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2 and "not an hpcbench dataset" in one_line(r.stderr)
    assert snapshot(victim) == before and leftovers(tmp_path) == []


@pytest.mark.parametrize("extra", ["NOTES.txt", "results/run1.json"])
def test_overwrite_refuses_a_dataset_holding_files_it_did_not_write(tmp_path, dataset, extra):
    (dataset / extra).parent.mkdir(parents=True, exist_ok=True)
    (dataset / extra).write_text("the user's notes\n")
    before = snapshot(dataset)
    r = hpcbench(
        "prep", "synthetic", "ds", "--samples", "90", "--size", "8x8", "-q", "--overwrite",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert extra.split("/")[0] in line and "did not write" in line, line
    assert snapshot(dataset) == before and leftovers(tmp_path) == []


def test_overwrite_refuses_a_source_class_linked_into_the_output(tmp_path, dataset):
    """A class folder of the source that is a link into the dataset being replaced: its images
    would be deleted with the old dataset."""
    make_folder(tmp_path / "raw")
    make_folder(dataset / "extra", seed=1)
    src = tmp_path / "src"
    src.mkdir()
    classes = sorted(p.name for p in (tmp_path / "raw").iterdir())
    for name in classes[1:]:
        (src / name).symlink_to(tmp_path / "raw" / name)
    (src / classes[0]).symlink_to(dataset / "extra" / classes[0])
    before = snapshot(dataset)
    r = hpcbench("prep", "folder", "src", "ds", "--size", "8x8", "--overwrite", cwd=tmp_path)
    assert r.returncode == 2
    assert "source" in one_line(r.stderr), r.stderr
    assert snapshot(dataset) == before and leftovers(tmp_path) == []


def test_overwrite_refuses_a_listed_image_inside_the_output(tmp_path, dataset):
    """A CSV list whose entry is a link to a file in the output directory."""
    truth = make_folder(tmp_path / "imgs")
    rows = [f"imgs/{f},{c}" for f, c in sorted(truth.items())]
    shard = next(dataset.glob("*.h5"))
    (tmp_path / "imgs" / "alias.png").symlink_to(shard)
    rows.append(f"imgs/alias.png,{rows[0].split(',')[1]}")
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    before = snapshot(dataset)
    r = hpcbench("prep", "csv", "list.csv", "ds", "--size", "8x8", "--overwrite", cwd=tmp_path)
    assert r.returncode == 2
    assert "source" in one_line(r.stderr), r.stderr
    assert snapshot(dataset) == before


def test_output_inside_the_image_folder_is_refused(tmp_path):
    make_folder(tmp_path / "photos")
    r = hpcbench("prep", "folder", "photos", "photos/ds", "--size", "8x8", cwd=tmp_path)
    assert r.returncode == 2 and "inside" in one_line(r.stderr)
    assert not (tmp_path / "photos" / "ds").exists() and leftovers(tmp_path / "photos") == []


def test_output_beside_a_csv_in_its_directory_is_allowed(tmp_path):
    truth = make_folder(tmp_path)
    (tmp_path / "list.csv").write_text("".join(f"{f},{c}\n" for f, c in sorted(truth.items())))
    r = hpcbench("prep", "csv", "list.csv", "data/x", "--size", "8x8", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = hpcbench(
        "prep", "csv", "list.csv", "data/x", "--size", "8x8", "-q", "--overwrite", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr


# ---- symbolic links in an image folder -------------------------------------------------------------
def folder_sources(out: Path, src: Path) -> list[str]:
    return [os.path.realpath(src / n) for n in (out / "sources.txt").read_text().splitlines() if n]


def test_symlink_loops_are_walked_once_without_duplicates(tmp_path):
    truth = make_folder(tmp_path / "src")
    (tmp_path / "src" / "cat" / "self").symlink_to(".")
    (tmp_path / "src" / "cat" / "again").symlink_to(".")  # two loops: exponential if followed
    (tmp_path / "src" / "dog" / "up").symlink_to("..")  # back to the root: all classes again
    r = hpcbench(
        "prep", "folder", "src", "ds", "--size", "8x8", "-q", "--split", "60/20/20",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    real = folder_sources(tmp_path / "ds", tmp_path / "src")
    assert len(real) == len(set(real)) == len(truth)
    m = Manifest.load(tmp_path / "ds")
    assert sum(s.samples for s in m.splits.values()) == len(truth)


def test_a_class_linked_to_another_class_is_refused_naming_both(tmp_path):
    make_folder(tmp_path / "src")
    (tmp_path / "src" / "kitten").symlink_to("cat")
    r = hpcbench("prep", "folder", "src", "ds", "--size", "8x8", "-q", cwd=tmp_path)
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert "kitten" in line and "cat" in line
    assert not (tmp_path / "ds").exists() and leftovers(tmp_path) == []


def test_one_file_under_two_classes_is_refused_and_under_one_class_kept_once(tmp_path):
    truth = make_folder(tmp_path / "src")
    os.link(tmp_path / "src" / "cat" / "img0.png", tmp_path / "src" / "cat" / "copy.png")
    r = hpcbench("prep", "folder", "src", "once", "--size", "8x8", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    real = folder_sources(tmp_path / "once", tmp_path / "src")
    assert len(real) == len(set(real)) == len(truth)
    (tmp_path / "src" / "dog" / "cat.png").symlink_to("../cat/img0.png")
    r = hpcbench("prep", "folder", "src", "twice", "--size", "8x8", "-q", cwd=tmp_path)
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert "dog/cat.png" in line and "cat/copy.png" in line  # copy.png sorts first


# ---- manifests with bad normalisation; NaN in arrays ------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [("std", [0.0]), ("std", [math.nan]), ("mean", [math.inf]), ("std", [0.2, 0.3])],
)
def test_bad_normalisation_is_refused_naming_the_field(dataset, field, value):
    edit_manifest(dataset, lambda d: d["normalization"].__setitem__(field, value))
    with pytest.raises(DataError, match=rf"manifest.json: normalization.{field}"):
        Manifest.load(dataset)
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
    assert r.returncode == 1 and f"normalization.{field}" in one_line(r.stderr)
    r = hpcbench("prep", "info", str(dataset), cwd=dataset.parent)
    assert r.returncode == 2 and "manifest.json" in one_line(r.stderr)


def test_normalization_of_a_manifest_built_in_code_refuses_zero_std():
    m = Manifest("x", ["a", "b"], [1, 2, 2], "uint8", {}, mean=[0.5], std=[0.0])
    with pytest.raises(DataError, match=r"normalization.std\[0\] is 0"):
        m.normalization()


def test_nan_in_float_arrays_is_refused_naming_file_and_index(tmp_path):
    images = np.full((30, 6, 5), 0.5, dtype=np.float32)
    images[7, 2, 3] = np.nan
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", np.arange(30) % 3)
    r = hpcbench("prep", "arrays", "x.npy", "y.npy", "out", "-q", cwd=tmp_path)
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert "x.npy" in line and "[7, 2, 3]" in line and "nan" in line
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("labels", [np.arange(30) % 3 * 1.0, (np.arange(60) % 3).reshape(30, 2)])
def test_float_or_2d_labels_are_refused_naming_the_file(tmp_path, labels):
    np.save(tmp_path / "x.npy", np.zeros((30, 6, 5), dtype=np.uint8))
    np.save(tmp_path / "y.npy", labels)
    r = hpcbench("prep", "arrays", "x.npy", "y.npy", "out", "-q", cwd=tmp_path)
    assert r.returncode == 2 and "y.npy" in one_line(r.stderr)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


# ---- shards that disagree with the manifest ---------------------------------------------------------
def test_shard_shape_disagreeing_with_the_manifest_names_shard_and_field(dataset):
    edit_manifest(dataset, lambda d: d["sample"].__setitem__("shape", [1, 20, 16]))
    from hpcbench.data.verify import verify_dataset

    with pytest.raises(DataError, match=r"train-00000.h5: images are \(40, 1, 16, 20\)"):
        verify_dataset(dataset, check_hash=False)
    r = hpcbench("prep", "verify", "--no-hash", str(dataset), cwd=dataset.parent)
    assert r.returncode == 1 and "images are" in one_line(r.stderr)


# ---- manifests that are not manifests ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["directory", "binary", "nested", "fifo"])
def test_a_manifest_that_is_not_json_text_gives_one_line(tmp_path, kind):
    root = tmp_path / "ds"
    root.mkdir()
    path = root / "manifest.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)
    else:
        os.mkfifo(path)
    r = hpcbench("prep", "info", "ds", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "manifest.json" in one_line(r.stderr)


def test_info_into_a_closed_pipe_exits_quietly(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    classes = [f"class-number-{k:06d}" for k in range(50_000)]
    Manifest("big", classes, [1, 2, 2], "uint8", {}, [0.5], [0.25]).save(root)
    script = (
        f"{sys.executable} -m hpcbench prep info ds 2>err | head -n 1 >/dev/null; "
        'echo "${PIPESTATUS[0]}" >rc'
    )
    subprocess.run(["bash", "-c", script], cwd=tmp_path, timeout=60, check=True)
    assert (tmp_path / "err").read_text() == ""
    assert int((tmp_path / "rc").read_text()) != 0


def test_control_characters_in_class_names_are_escaped_by_info(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    classes = ["plain", "two\nlines", "\x1b[2J\x1b[31mred"]
    Manifest("n\x1bame", classes, [1, 2, 2], "uint8", {}, [0.5], [0.25]).save(root)
    r = hpcbench("prep", "info", "ds", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "two\nlines" not in r.stdout
    assert "two\\nlines" in r.stdout and "\\x1b[31mred" in r.stdout


def test_empty_shard_name_is_refused(dataset):
    edit_manifest(dataset, lambda d: d["splits"]["test"]["shards"][0].__setitem__("file", ""))
    with pytest.raises(DataError, match="shard file name"):
        Manifest.load(dataset)
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
    assert r.returncode == 1 and "shard file name" in one_line(r.stderr)


def inflate_first_train_shard(d: dict, samples: int) -> None:
    split = d["splits"]["train"]
    extra = samples - split["shards"][0]["samples"]
    split["shards"][0]["samples"] = samples
    split["samples"] += extra
    split["class_counts"][0] += extra


@pytest.mark.parametrize("absurd", ["samples", "shape", "bytes"])
def test_absurd_counts_and_shapes_are_refused_before_allocating(dataset, absurd):
    if absurd == "samples":
        edit_manifest(dataset, lambda d: inflate_first_train_shard(d, 10**15))
    elif absurd == "shape":
        edit_manifest(dataset, lambda d: d["sample"].__setitem__("shape", [1, 100_000, 100_000]))
    else:  # the manifest claims sizes consistent with the count, the files are small

        def claim(d: dict) -> None:
            inflate_first_train_shard(d, 10**12)
            d["splits"]["train"]["shards"][0]["bytes"] = 10**12 * 320 + 4096

        edit_manifest(dataset, claim)
    r = hpcbench("prep", "verify", "--no-hash", str(dataset), cwd=dataset.parent, timeout=60)
    assert r.returncode == 1
    line = one_line(r.stderr)
    assert "manifest.json" in line or "train-00000.h5" in line
    pytest.importorskip("torch")
    code = (  # in a subprocess: a regression would allocate or loop for ever, not fail
        "from hpcbench.data import DataError, ShardedDataset\n"
        "try:\n"
        f"    ds = ShardedDataset({str(dataset)!r}, 'train', batch_size=8, rank=0, world_size=1)\n"
        "    next(iter(ds))\n"
        "except DataError as err:\n"
        "    print('DataError:', err)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=dataset
    )
    assert p.returncode == 0 and p.stdout.startswith("DataError:"), p.stderr


def test_a_fifo_named_as_a_shard_does_not_hang(dataset, tmp_path):
    shard = dataset / "train-00000.h5"
    shard.unlink()
    os.mkfifo(shard)
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent, timeout=60)
    assert r.returncode == 1 and "train-00000.h5: not a regular file" in one_line(r.stderr)
    code = (
        "from hpcbench.data import ShardedDataset\n"
        f"ShardedDataset({str(dataset)!r}, 'train', batch_size=8, rank=0, world_size=1, "
        f"stage_dir={str(tmp_path / 'stage')!r})\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert p.returncode != 0 and "train-00000.h5: not a regular file" in p.stderr


# ---- images that would exhaust memory -----------------------------------------------------------------
def png(path: Path, width: int, height: int, body: bytes | None = None) -> None:
    """A 1-bit grayscale PNG of the given size (all black), written by hand: no pixels in RAM."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    if body is None:
        row = b"\x00" * (1 + (width + 7) // 8)
        z = zlib.compressobj(9)
        body = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def test_decompression_bombs_are_skipped_and_listed_or_fatal_under_strict(tmp_path):
    make_folder(tmp_path / "src")
    png(tmp_path / "src" / "dog" / "bomb.png", 30_000, 30_000, body=zlib.compress(b"\x00" * 64))
    png(tmp_path / "src" / "fox" / "large.png", 10_000, 10_000)  # PIL warns above 89 Mpixels
    r = hpcbench("prep", "folder", "src", "strict", "--size", "8x8", "--strict", cwd=tmp_path)
    assert r.returncode == 2 and "unreadable image" in one_line(r.stderr)
    assert not (tmp_path / "strict").exists() and leftovers(tmp_path) == []
    r = hpcbench("prep", "folder", "src", "lenient", "--size", "8x8", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    listed = (tmp_path / "lenient" / "skipped.txt").read_text()
    assert "dog/bomb.png\tDecompressionBomb" in listed
    assert "fox/large.png\tDecompressionBomb" in listed


# ---- staging in a shared directory ---------------------------------------------------------------------
def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("planting files as another user needs root (chown to uid 65534)")


def batches(ds: Iterable[tuple[Any, Any]]) -> list[bytes]:
    return [x.numpy().tobytes() for x, _ in ds]


def plant_shard(root: Path, dataset: Path, m: Manifest) -> None:
    """A same-size shard with other pixels, and a stamp claiming the manifest's sha256."""
    import h5py

    root.mkdir(parents=True, exist_ok=True)
    for s in m.splits["train"].shards:
        data = bytearray((dataset / s.file).read_bytes())
        with h5py.File(dataset / s.file, "r") as f:
            at = f["images"].id.get_offset()
        data[at : at + 200] = bytes(200)  # the first rows' pixels: same size, same layout
        (root / s.file).write_bytes(bytes(data))
        (root / f".{s.file}.sha256").write_text(s.sha256 + "\n")
    for p in [root, *root.iterdir()]:
        os.chown(p, 65534, 65534)
    root.chmod(0o777)


def test_a_shard_planted_by_another_user_is_never_read(dataset, tmp_path):
    pytest.importorskip("torch")
    need_root()
    from hpcbench.data import ShardedDataset

    m = Manifest.load(dataset)
    stage = tmp_path / "shared-tmp"
    stage.mkdir(mode=0o1777)
    plant_shard(stage / f"hpcbench-{m.dataset_id}", dataset, m)
    kw = dict(batch_size=8, rank=0, world_size=1, shuffle=False, normalize=False)
    want = batches(ShardedDataset(dataset, "train", **kw))
    got = batches(ShardedDataset(dataset, "train", stage_dir=stage, **kw))
    assert got == want


@pytest.mark.parametrize("how", ["other-owner", "symlink", "group-writable"])
def test_a_private_staging_directory_not_ours_is_refused(dataset, tmp_path, how):
    pytest.importorskip("torch")
    need_root()
    from hpcbench.data import ShardedDataset

    m = Manifest.load(dataset)
    stage = tmp_path / "shared-tmp"
    stage.mkdir(mode=0o1777)
    mine = stage / f"hpcbench-{os.geteuid()}"
    if how == "other-owner":
        plant_shard(mine / m.dataset_id, dataset, m)
        os.chown(mine, 65534, 65534)
    elif how == "symlink":
        plant_shard(tmp_path / "elsewhere", dataset, m)
        mine.symlink_to(tmp_path / "elsewhere")
    else:
        mine.mkdir()
        mine.chmod(0o775)
    with pytest.raises(DataError, match=rf"{mine}: .*staging directory"):
        ShardedDataset(dataset, "train", batch_size=8, rank=0, world_size=1, stage_dir=stage)


@pytest.mark.parametrize("how", ["writable, not sticky", "above it writable", "other owner"])
def test_a_stage_dir_others_could_rename_in_is_refused(dataset, tmp_path, how):
    """Whoever can rename entries of the stage_dir (or of a directory above it) could swap this
    user's private directory for their own between its check and its use."""
    pytest.importorskip("torch")
    from hpcbench.data import ShardedDataset

    shared = tmp_path / "shared"
    shared.mkdir()
    stage = shared / "stage"
    stage.mkdir()
    if how == "writable, not sticky":
        stage.chmod(0o777)
        culprit = stage
    elif how == "above it writable":
        shared.chmod(0o777)
        culprit = shared
    else:
        need_root()
        os.chown(stage, 65534, 65534)
        culprit = stage
    with pytest.raises(DataError, match=rf"{stage}: {culprit} .*choose a stage_dir of your own"):
        ShardedDataset(dataset, "train", batch_size=8, rank=0, world_size=1, stage_dir=stage)
    assert not (stage / f"hpcbench-{os.geteuid()}").exists()


def test_staged_copies_live_in_a_private_directory(dataset, tmp_path):
    pytest.importorskip("torch")
    from hpcbench.data import ShardedDataset

    stage = tmp_path / "stage"
    ShardedDataset(dataset, "train", batch_size=8, rank=0, world_size=1, stage_dir=stage)
    mine = stage / f"hpcbench-{os.geteuid()}"
    st = os.lstat(mine)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()
    assert sorted(p.name for p in mine.rglob("*.h5")) == sorted(
        s.file for s in Manifest.load(dataset).splits["train"].shards
    )


# ---- SIGTERM (scancel, a time limit) ----------------------------------------------------------------
def test_sigterm_during_prep_removes_the_temporary_directory(tmp_path):
    env = {**os.environ}
    env.pop("PYTHONUNBUFFERED", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcbench", "prep", "synthetic", "big", "--samples", "400000",
         "--workers", "2", "-q"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    tmp = tmp_path / f".big.tmp-{proc.pid}"
    deadline = time.monotonic() + 120
    while not tmp.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tmp.exists(), "the conversion never started"
    while not any(tmp.glob("*.h5")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # workers are writing shards
    os.killpg(proc.pid, signal.SIGTERM)  # as scancel does: every process of the step
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 143, f"exit {proc.returncode}: {stderr}"
    assert "Traceback" not in stderr and "terminated" in stderr.strip().splitlines()[-1]
    assert leftovers(tmp_path) == [] and not (tmp_path / "big").exists()


def test_a_pool_worker_signalled_before_its_initializer_dies_quietly():
    """Pool.terminate() (run on the way out of a SIGTERM) signals a worker the pool has just forked
    to replace a dead one; it still holds the CLI's handler. It must die of the signal, not print
    a traceback of the CLI's exception."""
    from hpcbench.cli import prep as cli_prep

    cli_prep._handler_pid = os.getpid()
    previous = signal.signal(signal.SIGTERM, cli_prep._on_sigterm)
    try:
        pid = os.fork()
        if pid == 0:  # the freshly forked worker
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
            except BaseException:
                os._exit(3)
            os._exit(4)
        _, status = os.waitpid(pid, 0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status


@pytest.mark.parametrize("kind", ["csv", "json", "arrays"])
def test_a_fifo_named_as_a_source_file_does_not_hang(tmp_path, kind):
    os.mkfifo(tmp_path / "list")
    np.save(tmp_path / "y.npy", np.arange(30) % 3)
    args = {"csv": ["list"], "json": ["list"], "arrays": ["list", "y.npy"]}[kind]
    r = hpcbench("prep", kind, *args, "out", "--size", "8x8", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "list: " in one_line(r.stderr)
    assert "not a regular file" in r.stderr and not (tmp_path / "out").exists()


def test_a_stage_dir_naming_an_unset_variable_is_refused_not_created(
    dataset, tmp_path, monkeypatch
):
    """``--stage-dir $TMPDIR`` on a node where TMPDIR is not set: one line naming the variable;
    no directory literally called ``$TMPDIR`` appears where the job runs."""
    from hpcbench.data import ShardedDataset

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPCBENCH_NO_SUCH_DIR", raising=False)
    with pytest.raises(
        DataError, match=r"\$HPCBENCH_NO_SUCH_DIR/stage: HPCBENCH_NO_SUCH_DIR is not set"
    ):
        ShardedDataset(
            dataset, "train", batch_size=32, rank=0, world_size=4,
            stage_dir="$HPCBENCH_NO_SUCH_DIR/stage",
        )  # fmt: skip
    assert not any("$" in p.name for p in tmp_path.rglob("*"))
