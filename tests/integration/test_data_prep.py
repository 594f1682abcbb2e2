"""Converters against real image files and real HDF5 shards: round trips, labels, bad inputs.

Every conversion here writes real PNG/JPEG files with PIL and real HDF5 shards with h5py, and
reads them back through the shipped code paths (the CLI in a subprocess where the user would).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image, ImageOps

from hpcbench.data import DataError, Manifest, verify_dataset
from hpcbench.data_prep import (
    ConvertOptions,
    convert,
    csv_table,
    from_arrays,
    image_folder,
    metadata_json,
)
from tests.conftest import hpcbench, mpiexec_available, require

CLASSES = ["cat", "dog", "fox"]


def make_folder(root: Path, per_class: int = 6, seed: int = 0) -> dict[str, str]:
    """Images of varied size, mode and format; returns relative path -> class name."""
    rng = np.random.default_rng(seed)
    truth = {}
    for k, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            w, h = int(rng.integers(20, 60)), int(rng.integers(20, 60))
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            pixels[..., k] = 255  # a class signal, for nothing but realism
            img = Image.fromarray(pixels)
            if i % 3 == 1:
                img = img.convert("L")
            ext = ".png" if i % 2 == 0 else ".jpg"
            rel = f"{name}/img{i}{ext}"
            img.save(root / rel)
            truth[rel] = name
    return truth


def train_tiny(data: Path, run: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One epoch of the mlp on ``data`` into ``run`` (a real trainer process)."""
    from tests.integration.test_trainer import env

    r = subprocess.run(
        [sys.executable, "-m", "hpcbench.train", "--data", str(data), "--model", "mlp",
         "--epochs", "1", "--global-batch-size", "4", "--output-dir", str(run)],
        env=env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return run, r


def predict_rows(run: Path, data: Path, split: str, out: Path, *extra: str) -> list[dict]:
    """``python -m hpcbench.predict`` of ``split`` with ``run``'s checkpoint: predictions.csv."""
    from tests.integration.test_trainer import env

    r = subprocess.run(
        [sys.executable, "-m", "hpcbench.predict", "--checkpoint", str(run), "--input",
         str(data), "--split", split, "--output-dir", str(out), *extra],
        env=env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "predictions.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def stored_samples(manifest: Manifest) -> list[tuple[str, np.ndarray, int, int]]:
    """(split, image, label, source index) of every stored sample."""
    out = []
    for split, info in manifest.splits.items():
        for shard in info.shards:
            with h5py.File(manifest.root / shard.file, "r") as f:
                for img, label, idx in zip(
                    f["images"][()], f["labels"][()], f["index"][()], strict=True
                ):
                    out.append((split, img, int(label), int(idx)))
    return out


@pytest.mark.parametrize("policy", ["crop", "stretch", "pad"])
def test_image_folder_round_trip_equals_independently_resized_sources(tmp_path, policy):
    truth = make_folder(tmp_path / "src")
    m = convert(
        image_folder(tmp_path / "src"),
        tmp_path / "ds",
        ConvertOptions(size=(24, 16), resize=policy, split="50/25/25", progress=False, workers=2),
    )
    assert m.classes == CLASSES and m.shape == [3, 16, 24]
    sources = (tmp_path / "ds" / "sources.txt").read_text().splitlines()
    samples = stored_samples(m)
    assert len(samples) == len(truth) == sum(s.samples for s in m.splits.values())
    for _split, img, label, idx in samples:
        rel = sources[idx]
        assert CLASSES[label] == truth[rel]  # the label is the file's own class
        with Image.open(tmp_path / "src" / rel) as im:
            im = im.convert("RGB")
            if policy == "crop":
                want = ImageOps.fit(im, (24, 16), Image.Resampling.BILINEAR)
            elif policy == "stretch":
                want = im.resize((24, 16), Image.Resampling.BILINEAR)
            else:
                want = ImageOps.pad(im, (24, 16), Image.Resampling.BILINEAR, color=0)
        np.testing.assert_array_equal(img, np.asarray(want).transpose(2, 0, 1), err_msg=rel)
    # every class in every split, counts recorded
    for info in m.splits.values():
        assert all(c >= 1 for c in info.class_counts)
    verify_dataset(tmp_path / "ds")


def test_grayscale_float16_and_normalisation_statistics(tmp_path):
    make_folder(tmp_path / "src")
    m = convert(
        image_folder(tmp_path / "src"),
        tmp_path / "ds",
        ConvertOptions(size=(16, 16), grayscale=True, dtype="float16", split="2/1", progress=False),
    )
    assert m.shape == [1, 16, 16] and m.dtype == "float16" and set(m.splits) == {"train", "val"}
    train = [img for split, img, _, _ in stored_samples(m) if split == "train"]
    stack = np.stack(train).astype(np.float64)
    assert stack.dtype == np.float64 and 0 <= stack.min() and stack.max() <= 1
    assert m.mean[0] == pytest.approx(stack.mean(), abs=2e-3)
    assert m.std[0] == pytest.approx(stack.std(), abs=2e-3)


def test_metadata_json_and_csv_give_the_labels_they_name(tmp_path):
    truth = make_folder(tmp_path / "src")
    cat_ids = {"cat": 17, "dog": 3, "fox": 40}  # non-contiguous, unsorted ids
    files = sorted(truth)
    meta = {
        "images": [{"id": i + 100, "file_name": f} for i, f in enumerate(files)],
        "annotations": [
            {"image_id": i + 100, "category_id": cat_ids[truth[f]]} for i, f in enumerate(files)
        ],
        "categories": [{"id": v, "name": k} for k, v in cat_ids.items()],
    }
    (tmp_path / "src" / "meta.json").write_text(json.dumps(meta))
    m = convert(
        metadata_json(tmp_path / "src" / "meta.json"),
        tmp_path / "j",
        ConvertOptions(size=(8, 8), progress=False),
    )
    assert m.classes == ["dog", "cat", "fox"]  # ordered by category id
    assert m.source["category_ids"] == [3, 17, 40]
    names = (tmp_path / "j" / "sources.txt").read_text().splitlines()
    for _, _, label, idx in stored_samples(m):
        assert m.classes[label] == truth[names[idx]]

    with open(tmp_path / "src" / "list.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["path", "species"])
        for f in files:
            w.writerow([f, truth[f]])
    m = convert(
        csv_table(tmp_path / "src" / "list.csv", label_column="species"),
        tmp_path / "c",
        ConvertOptions(size=(8, 8), progress=False),
    )
    names = (tmp_path / "c" / "sources.txt").read_text().splitlines()
    assert m.classes == CLASSES
    for _, _, label, idx in stored_samples(m):
        assert m.classes[label] == truth[names[idx]]


def test_a_split_column_decides_the_splits_in_csv_and_json(tmp_path):
    """MAMe's CSV carries train/val/test in a column; a JSON may carry it on each image entry.
    Given one, every row lands in the split it names (any usual spelling), not in a random one;
    an unknown value is a one-line error naming the file, the row and the value."""
    truth = make_folder(tmp_path / "src", per_class=6)
    files = sorted(truth)
    spelled = {"train": "Train", "val": "validation", "test": "TEST"}
    wanted = {f: ("train", "train", "val", "test")[i % 4] for i, f in enumerate(files)}
    with open(tmp_path / "src" / "list.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "label", "subset"])
        for f in files:
            w.writerow([f, truth[f], spelled[wanted[f]]])
    cat_ids = {"cat": 1, "dog": 2, "fox": 3}
    meta = {
        "images": [
            {"id": i, "file_name": f, "subset": spelled[wanted[f]]} for i, f in enumerate(files)
        ],
        "annotations": [
            {"image_id": i, "category_id": cat_ids[truth[f]]} for i, f in enumerate(files)
        ],
        "categories": [{"id": v, "name": k} for k, v in cat_ids.items()],
    }
    (tmp_path / "src" / "meta.json").write_text(json.dumps(meta))
    for kind, listing in (("csv", "list.csv"), ("json", "meta.json")):
        out = tmp_path / f"by-{kind}"
        r = hpcbench(
            "prep",
            kind,
            f"src/{listing}",
            out.name,
            "--size",
            "8x8",
            "--split-column",
            "subset",
            "--quiet",
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stderr
        m = Manifest.load(out)
        names = (out / "sources.txt").read_text().splitlines()
        got = {names[idx]: split for split, _, _, idx in stored_samples(m)}
        assert got == wanted, kind
        assert {k: v.samples for k, v in m.splits.items()} == {
            k: list(wanted.values()).count(k) for k in ("train", "val", "test")
        }
    # Both ways of splitting at once, an unknown value, a missing column: one-line errors.
    r = hpcbench(
        "prep",
        "csv",
        "src/list.csv",
        "x1",
        "--size",
        "8x8",
        "--split-column",
        "subset",
        "--split",
        "80/20",
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "--split" in r.stderr and "--split-column" in r.stderr
    rows = (tmp_path / "src" / "list.csv").read_text().splitlines()
    rows[3] = rows[3].rsplit(",", 1)[0] + ",holdout"
    (tmp_path / "src" / "bad.csv").write_text("\n".join(rows) + "\n")
    r = hpcbench(
        "prep",
        "csv",
        "src/bad.csv",
        "x2",
        "--size",
        "8x8",
        "--split-column",
        "subset",
        cwd=tmp_path,
    )
    assert r.returncode != 0 and "bad.csv:4" in r.stderr and "'holdout'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x2").exists()
    r = hpcbench(
        "prep",
        "json",
        "src/meta.json",
        "x3",
        "--size",
        "8x8",
        "--split-column",
        "fold",
        cwd=tmp_path,
    )
    assert r.returncode != 0 and "meta.json" in r.stderr and "'fold'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x3").exists()


def test_metadata_json_with_conflicting_labels_is_refused(tmp_path):
    meta = {
        "images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.png"}],
        "annotations": [{"image_id": 1, "category_id": 1}, {"image_id": 1, "category_id": 2}],
        "categories": [{"id": 1, "name": "x"}, {"id": 2, "name": "y"}],
    }
    (tmp_path / "m.json").write_text(json.dumps(meta))
    with pytest.raises(
        DataError, match=r"image id 1 \(a.png\) has annotations with two different categories"
    ):
        metadata_json(tmp_path / "m.json")
    meta["annotations"] = [{"image_id": 9, "category_id": 1}]
    (tmp_path / "m.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="names image id 9"):
        metadata_json(tmp_path / "m.json")


def test_arrays_round_trip_and_limits(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (90, 12, 10), dtype=np.uint8)
    labels = np.arange(90) % 3
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", labels)
    m = convert(
        from_arrays(tmp_path / "x.npy", tmp_path / "y.npy"),
        tmp_path / "a",
        ConvertOptions(grayscale=True, progress=False, per_class=20, limit=45),
    )
    assert m.shape == [1, 12, 10] and m.classes == ["0", "1", "2"]
    samples = stored_samples(m)
    assert (
        len(samples) == 45
        and sum(m.splits["train"].class_counts)
        + sum(m.splits["test"].class_counts)
        + sum(m.splits["val"].class_counts)
        == 45
    )
    for _, img, label, idx in samples:
        np.testing.assert_array_equal(img[0], images[idx])
        assert label == labels[idx]
    with pytest.raises(DataError, match=r"float images must hold 0..1, found 0..3"):
        from_arrays(np.linspace(0, 3, 90 * 4).reshape(90, 2, 2), labels)


def test_channels_follow_the_source_unless_asked(tmp_path):
    """N×H×W arrays and a tree of single-channel images are stored with one channel (RGB would
    triple the bytes for nothing); a tree with colour images, N×H×W×3 arrays and --rgb /
    --grayscale keep or force what they say."""
    rng = np.random.default_rng(3)
    np.save(tmp_path / "gray.npy", rng.integers(0, 256, (30, 8, 6), dtype=np.uint8))
    np.save(tmp_path / "colour.npy", rng.integers(0, 256, (30, 8, 6, 3), dtype=np.uint8))
    np.save(tmp_path / "y.npy", np.arange(30) % 3)
    for name in CLASSES:
        (tmp_path / "lum" / name).mkdir(parents=True)
        for i in range(4):
            pixels = rng.integers(0, 256, (10, 12), dtype=np.uint8)
            Image.fromarray(pixels, "L").save(tmp_path / "lum" / name / f"{i}.png")
    make_folder(tmp_path / "mixed")
    gray, colour = ["arrays", "gray.npy", "y.npy"], ["arrays", "colour.npy", "y.npy"]
    size = ["--size", "12x10"]
    cases = [  # (positional arguments before the output, options, channels stored)
        (gray, [], 1),
        (gray, ["--rgb"], 3),
        (colour, [], 3),
        (colour, ["--grayscale"], 1),
        (["folder", "lum"], size, 1),
        (["folder", "lum"], [*size, "--rgb"], 3),
        (["folder", "mixed"], size, 3),
    ]
    for n, (positional, options, channels) in enumerate(cases):
        r = hpcbench("prep", *positional, f"out{n}", *options, "--quiet", cwd=tmp_path)
        assert r.returncode == 0, (positional, options, r.stderr)
        assert Manifest.load(tmp_path / f"out{n}").shape[0] == channels, (positional, options)
    # Via the library too: ConvertOptions' default follows the source.
    m = convert(
        from_arrays(tmp_path / "gray.npy", tmp_path / "y.npy"),
        tmp_path / "lib",
        ConvertOptions(progress=False),
    )
    assert m.shape == [1, 8, 6]


def test_cli_converts_a_folder_and_verify_and_info_report(tmp_path):
    make_folder(tmp_path / "src")
    r = hpcbench("prep", "folder", "src", "ds", "--size", "16x12", "--split", "70/30", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "train" in r.stdout and "cat" in r.stdout
    r = hpcbench("prep", "verify", "ds", cwd=tmp_path)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    r = hpcbench("prep", "info", "ds", cwd=tmp_path)
    assert "16x12 RGB" in r.stdout
    r = hpcbench("prep", "folder", "src", "ds2", cwd=tmp_path)
    assert r.returncode == 2 and "--size is required" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = hpcbench("prep", "folder", "src", "ds3", "--size", "1Ox2", cwd=tmp_path)
    assert r.returncode == 2 and "--size '1Ox2'" in r.stderr


def test_mpi_conversion_writes_the_same_shards_as_the_process_pool(tmp_path):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    args = [
        "prep",
        "synthetic",
        "--samples",
        "360",
        "--size",
        "20x16",
        "--shard-samples",
        "50",
        "-q",
    ]
    pool = hpcbench(*args, "pool", cwd=tmp_path)
    assert pool.returncode == 0, pool.stderr
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    env.pop("PYTHONUNBUFFERED", None)
    mpi = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-m", "hpcbench", *args, "mpi"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert mpi.returncode == 0, mpi.stderr
    a, b = Manifest.load(tmp_path / "pool"), Manifest.load(tmp_path / "mpi")
    assert len(a.splits["train"].shards) == 7  # 306 train samples in shards of 50
    for split in a.splits:  # byte-identical: rendering and writing do not depend on who does it
        assert [s.sha256 for s in a.splits[split].shards] == [
            s.sha256 for s in b.splits[split].shards
        ]
    assert leftovers(tmp_path) == []


# ---- bad inputs: a clear error naming the file, and nothing half-written -------------------------
def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_image_folder_with_an_empty_class_is_refused_naming_it(tmp_path):
    make_folder(tmp_path / "src")
    (tmp_path / "src" / "emu").mkdir()
    (tmp_path / "src" / "emu" / "notes.txt").write_text("no images here")
    r = hpcbench("prep", "folder", "src", "ds", "--size", "8x8", cwd=tmp_path)
    assert r.returncode == 2
    assert "src/emu: class directory has no images" in r.stderr
    assert not (tmp_path / "ds").exists() and leftovers(tmp_path) == []


def test_unreadable_image_is_skipped_and_listed_or_fatal_under_strict(tmp_path):
    make_folder(tmp_path / "src")
    good = (tmp_path / "src" / "dog" / "img0.png").read_bytes()
    (tmp_path / "src" / "dog" / "broken.png").write_bytes(good[: len(good) // 2])  # truncated PNG
    (tmp_path / "src" / "fox" / "text.jpg").write_text("not a jpeg")
    r = hpcbench("prep", "folder", "src", "strict", "--size", "8x8", "--strict", cwd=tmp_path)
    assert r.returncode == 2
    assert "unreadable image" in r.stderr and ("broken.png" in r.stderr or "text.jpg" in r.stderr)
    assert not (tmp_path / "strict").exists() and leftovers(tmp_path) == []

    r = hpcbench("prep", "folder", "src", "lenient", "--size", "8x8", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 unreadable image(s) skipped" in r.stderr
    listed = (tmp_path / "lenient" / "skipped.txt").read_text()
    assert "dog/broken.png\t" in listed and "fox/text.jpg\t" in listed
    m = Manifest.load(tmp_path / "lenient")
    assert m.skipped == 2 and sum(s.samples for s in m.splits.values()) == 18
    names = (tmp_path / "lenient" / "sources.txt").read_text().splitlines()
    for _, _, label, idx in stored_samples(m):  # no label shifted by the skipped files
        assert m.classes[label] == names[idx].split("/")[0]


@pytest.fixture
def dataset(tmp_path):
    r = hpcbench(
        "prep",
        "synthetic",
        "ds",
        "--samples",
        "450",
        "--size",
        "20x16",
        "--shard-samples",
        "100",
        "-q",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    return tmp_path / "ds"


def test_truncated_shard_is_named_by_verify_and_by_the_reader(dataset):
    shard = dataset / "train-00001.h5"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 500])
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
    assert r.returncode == 1
    assert f"{shard}: {len(data) - 500:,} bytes, the manifest says {len(data):,}" in r.stderr
    from hpcbench.data import ShardedDataset

    with pytest.raises(DataError, match=r"train-00001.h5: .*\(truncated or replaced shard\)"):
        ShardedDataset(dataset, "train", batch_size=10, rank=0, world_size=1, shuffle=False)


def test_flipped_bytes_fail_the_sha256_in_verify_and_in_staging(dataset, tmp_path):
    shard = dataset / "train-00000.h5"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
    assert (
        r.returncode == 1 and "train-00000.h5: sha256" in r.stderr and "corrupted shard" in r.stderr
    )
    r = hpcbench("prep", "verify", "--no-hash", str(dataset), cwd=dataset.parent)
    assert r.returncode == 0  # sizes and shapes still agree: only the hash can tell
    from hpcbench.data import ShardedDataset

    with pytest.raises(DataError, match="train-00000.h5: sha256 .*corrupted shard"):
        ShardedDataset(
            dataset, "train", batch_size=10, rank=0, world_size=1, stage_dir=tmp_path / "stage"
        )
    assert not [p for p in (tmp_path / "stage").rglob("*") if p.name.endswith(".h5")]


def test_manifest_naming_a_missing_shard(dataset):
    (dataset / "test-00000.h5").unlink()
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
    assert r.returncode == 1 and "test-00000.h5: shard named in the manifest is missing" in r.stderr


def test_broken_manifest_is_named(dataset):
    (dataset / "manifest.json").write_text("{not json")
    r = hpcbench("prep", "info", str(dataset), cwd=dataset.parent)
    assert r.returncode == 2 and "manifest.json: not valid JSON" in r.stderr


def test_a_manifest_s_unlabeled_flag_is_checked_against_the_shards(dataset):
    """``labeled: false`` is for a test set without labels: not on train, without class
    counts, only a boolean, and verify refuses shards that still store labels under it."""
    path = dataset / "manifest.json"
    good = json.loads(path.read_text())
    for change, says in (
        (lambda m: m["splits"]["test"].update(labeled="no"), "splits.test.labeled"),
        (lambda m: m["splits"]["train"].update(labeled=False), "splits.train is unlabeled"),
        (lambda m: m["splits"]["test"].update(labeled=False), "splits.test is unlabeled but"),
    ):
        bad = json.loads(json.dumps(good))
        change(bad)
        path.write_text(json.dumps(bad))
        r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
        assert r.returncode == 1 and says in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    bad = json.loads(json.dumps(good))
    bad["splits"]["test"].update(labeled=False, class_counts=[])
    path.write_text(json.dumps(bad))
    r = hpcbench("prep", "verify", str(dataset), cwd=dataset.parent)
    assert r.returncode == 1 and "test split is unlabeled but the shard stores labels" in r.stderr


def test_overwrite_replaces_atomically_and_refuses_without_the_flag(dataset):
    before = Manifest.load(dataset).dataset_id
    r = hpcbench(
        "prep", "synthetic", "ds", "--samples", "450", "--size", "20x16", "-q", cwd=dataset.parent
    )
    assert (
        r.returncode == 2 and "exists" in r.stderr and Manifest.load(dataset).dataset_id == before
    )
    r = hpcbench(
        "prep",
        "synthetic",
        "ds",
        "--samples",
        "450",
        "--size",
        "20x16",
        "--seed",
        "5",
        "-q",
        "--overwrite",
        cwd=dataset.parent,
    )
    assert r.returncode == 0, r.stderr
    assert Manifest.load(dataset).dataset_id != before and leftovers(dataset.parent) == []
    shutil.rmtree(dataset)


def test_the_synthetic_defaults_mirror_the_reference_study(tmp_path):
    """What `hpcbench prep synthetic OUT` makes without options (fewer samples, to stay quick):
    the reference study's 9 classes of 197x148 grayscale images split 85/2/13 in each class."""
    r = hpcbench("prep", "synthetic", "out", "--samples", "900", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = Manifest.load(tmp_path / "out")
    assert (len(m.classes), m.shape, m.dtype) == (9, [1, 148, 197], "uint8")
    for k in range(9):
        per_split = {name: m.splits[name].class_counts[k] for name in ("train", "val", "test")}
        assert per_split == {"train": 85, "val": 2, "test": 13}, per_split


def test_an_unlabeled_test_set_becomes_a_test_split_without_labels(tmp_path):
    """Herbarium's test metadata lists images and no annotations. ``--unlabeled-test`` stores
    them as the test split, flagged unlabeled, labels -1; verify accepts it; the trainer and
    ``hpcbench.predict`` classify it but report no accuracy for it; the labelled images are
    split into train and val only (a test part in ``--split`` is refused)."""
    truth = make_folder(tmp_path / "src", per_class=6)
    files = sorted(truth)
    cat_ids = {"cat": 1, "dog": 2, "fox": 3}
    meta = {
        "images": [{"id": i, "file_name": f} for i, f in enumerate(files)],
        "annotations": [
            {"image_id": i, "category_id": cat_ids[truth[f]]} for i, f in enumerate(files)
        ],
        "categories": [{"id": v, "name": k} for k, v in cat_ids.items()],
    }
    (tmp_path / "src" / "train.json").write_text(json.dumps(meta))
    (tmp_path / "test" / "images").mkdir(parents=True)
    for i, f in enumerate(files[:5]):
        shutil.copy(tmp_path / "src" / f, tmp_path / "test" / "images" / f"t{i}{Path(f).suffix}")
    listing = {
        "images": [
            {"id": 10 + i, "file_name": f"images/t{i}{Path(f).suffix}"}
            for i, f in enumerate(files[:5])
        ]
    }
    (tmp_path / "test" / "metadata.json").write_text(json.dumps(listing))
    # Herbarium 2022's test metadata is a bare list of entries
    (tmp_path / "test" / "list.json").write_text(json.dumps(listing["images"]))
    args = ["--size", "8x8", "--quiet"]
    r = hpcbench(
        "prep", "json", "src/train.json", "ds", "--unlabeled-test", "test/metadata.json",
        "--split", "80/20", *args, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = Manifest.load(tmp_path / "ds")
    assert [m.splits[s].labeled for s in ("train", "val", "test")] == [True, True, False]
    assert m.splits["test"].samples == 5 and m.splits["test"].class_counts == []
    assert m.splits["train"].samples + m.splits["val"].samples == len(files)
    stored = stored_samples(m)
    assert {label for split, _, label, _ in stored if split == "test"} == {-1}
    assert all(0 <= label < 3 for split, _, label, _ in stored if split != "test")
    names = (tmp_path / "ds" / "sources.txt").read_text().splitlines()
    assert sorted(names[idx] for split, _, _, idx in stored if split == "test") == sorted(
        f"images/t{i}{Path(f).suffix}" for i, f in enumerate(files[:5])
    )
    verify_dataset(tmp_path / "ds")
    r = hpcbench("prep", "verify", "ds", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unlabeled" in hpcbench("prep", "info", "ds", cwd=tmp_path).stdout
    # the same from a bare list, and from the Python API
    r = hpcbench(
        "prep", "json", "src/train.json", "ds2", "--unlabeled-test", "test/list.json", *args,
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert Manifest.load(tmp_path / "ds2").splits["test"].labeled is False
    # ids that are not integers ("--1", a superscript two) order as text, without a traceback
    odd = [
        {"id": k, "file_name": listing["images"][i]["file_name"]}
        for i, k in enumerate("--1 ²".split())
    ]
    (tmp_path / "test" / "odd.json").write_text(json.dumps(odd))
    r = hpcbench(
        "prep", "json", "src/train.json", "ds3", "--unlabeled-test", "test/odd.json", *args,
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0 and Manifest.load(tmp_path / "ds3").splits["test"].samples == 2, (
        r.stderr
    )
    # the trainer trains and validates, and classifies the test split without an accuracy
    run, r = train_tiny(tmp_path / "ds", tmp_path / "run")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["test"] == {"unlabeled": True, "samples": 5}, metrics["test"]
    assert "test: 5 unlabeled" in r.stdout, r.stdout
    rows = predict_rows(run, tmp_path / "ds", "test", tmp_path / "pred")
    assert len(rows) == 5 and all(row["label"] == "" for row in rows), rows
    report = json.loads((tmp_path / "pred" / "predict.json").read_text())
    assert report["metrics"] is None and report["measured"]["items"] == 5, report
    # a test part in --split, a missing or labelled listing: one line naming what is wrong
    for extra, says in (
        (["--unlabeled-test", "test/metadata.json", "--split", "80/10/10"], "--split"),
        (["--unlabeled-test", "test/none.json"], "test/none.json"),
        (["--unlabeled-test", "src/train.json"], "annotations"),
    ):
        r = hpcbench("prep", "json", "src/train.json", "bad", *extra, *args, cwd=tmp_path)
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "bad").exists()


def test_predictions_of_a_competition_layout_join_back_to_its_ids(tmp_path):
    """Herbarium 2021's layout: nested image folders, integer image ids that are not positions,
    sparse category ids, a test listing without labels (in an order of its own).
    ``predictions.csv`` of ``--split test`` names each row's source file and the listing's id,
    and the predicted class's own id: the competition's ``Id,Predicted`` is one csv read."""
    rng = np.random.default_rng(3)
    cat_ids = {"Abies alba": 17, "Betula nana": 204, "Carex flava": 3051}
    images, annotations, test = [], [], []
    for k, cid in enumerate(cat_ids.values()):
        for i in range(6):
            rel = f"images/{k:03d}/{i:02d}/{1000 + 7 * (6 * k + i)}.png"
            (tmp_path / "train" / rel).parent.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "train" / rel)
            image_id = 1000 + 7 * (6 * k + i)
            images.append({"id": image_id, "file_name": rel})
            annotations.append({"image_id": image_id, "category_id": cid, "id": len(annotations)})
    categories = [{"id": cid, "name": name} for name, cid in cat_ids.items()]
    (tmp_path / "train" / "metadata.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    for i in range(5):
        rel = f"images/{i // 2:03d}/{90_000 + 13 * i}.png"
        (tmp_path / "test" / rel).parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / "test" / rel)
        test.append({"id": 90_000 + 13 * i, "file_name": rel})
    listing = {"images": test[::-1]}  # the listing's order is not its ids'
    (tmp_path / "test" / "metadata.json").write_text(json.dumps(listing))
    r = hpcbench(
        "prep", "json", "train/metadata.json", "ds", "--unlabeled-test", "test/metadata.json",
        "--size", "8x8", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run, _ = train_tiny(tmp_path / "ds", tmp_path / "run")
    rows = predict_rows(run, tmp_path / "ds", "test", tmp_path / "pred", "--top-k", "2")
    submission = {int(row["id"]): int(row["class_id"]) for row in rows}
    assert sorted(submission) == sorted(t["id"] for t in test)
    assert set(submission.values()) <= set(cat_ids.values())
    files = {t["id"]: t["file_name"] for t in test}
    names = {v: k for k, v in cat_ids.items()}
    for row in rows:
        assert row["source"] == files[int(row["id"])], row
        assert names[int(row["class_id"])] == row["class"], row
        assert names[int(row["class_id_2"])] == row["class_2"], row
        assert row["label"] == "", row
    # the labelled validation split names its sources and ids the same way
    val = predict_rows(run, tmp_path / "ds", "val", tmp_path / "pval")
    by_id = {im["id"]: im["file_name"] for im in images}
    assert val and all(by_id[int(row["id"])] == row["source"] for row in val), val


def test_a_split_with_too_few_samples_of_a_class_is_warned_with_a_split_that_fits(tmp_path):
    """30 images a class and the default 85/2/13: one validation image a class, so validation
    accuracy is 0 or 100 % a class. prep says so and proposes a split; one that fits is quiet."""
    rng = np.random.default_rng(0)
    for name in CLASSES:
        (tmp_path / "src" / name).mkdir(parents=True)
        for i in range(30):
            pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "src" / name / f"{i}.png")
    r = hpcbench("prep", "folder", "src", "ds", "--size", "8x8", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert any("split val holds 1 sample(s) of class" in w for w in warnings), r.stderr
    suggested = warnings[-1].split("try --split ")[1]
    r = hpcbench("prep", "folder", "src", "ds2", "--size", "8x8", "--quiet", "--split", suggested,
                 cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    counts = Manifest.load(tmp_path / "ds2").splits
    assert min(counts["val"].class_counts) >= 5 and min(counts["test"].class_counts) >= 5
