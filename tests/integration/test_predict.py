"""``python -m hpcbench.predict`` for real: a model the trainer checkpointed, JPEG folders and an
HDF5 dataset, the single-process loop as the reference, and real MPI ranks (mpiexec) as the
pipeline and as data-parallel ranks; the local scheduler as the job's way in."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import have_module, hpcbench, mpiexec_available, require

pytestmark = pytest.mark.mpi


def env(**extra: str) -> dict[str, str]:
    full = {**os.environ, **extra}
    full["PATH"] = str(Path(sys.executable).parent) + os.pathsep + full.get("PATH", "")
    return full


def run(args: list[str], cwd: Path, ranks: int = 1, timeout: float = 300, **extra: str):
    cmd = [sys.executable, "-m", "hpcbench.predict", *args]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env(**extra), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Image folders (96x72 JPEGs), the training folder as a 24x24 RGB dataset, a checkpoint."""
    require(have_module("torch") and have_module("mpi4py") and mpiexec_available(), "torch and MPI")
    from hpcbench.data_prep import ConvertOptions, convert, image_folder
    from hpcbench.data_prep.synthetic import write_image_folder

    root = tmp_path_factory.mktemp("predict")
    write_image_folder(root / "train-images", 270, size=(96, 72))
    write_image_folder(root / "images", 120, size=(96, 72), first=50_000)
    convert(image_folder(root / "train-images"), root / "data",
            ConvertOptions(size=(24, 24), progress=False, workers=1))  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "hpcbench.train", "--data", str(root / "data"), "--epochs", "2",
         "--progress", "none", "--output-dir", str(root / "model")],
        cwd=root, env=env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "predictions.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def report(out: Path) -> dict:
    return json.loads((out / "predict.json").read_text())


def assert_same_predictions(got: Path, want: Path) -> None:
    a, b = rows(got), rows(want)
    assert [r["item"] for r in a] == [r["item"] for r in b]
    for x, y in zip(a, b, strict=True):
        for key in x:
            if key.startswith("probability"):
                assert abs(float(x[key]) - float(y[key])) <= 1e-6, (key, x, y)
            else:
                assert x[key] == y[key], (key, x, y)


def test_every_mode_and_rank_count_predicts_what_the_single_loop_does_on_an_image_folder(trained):
    common = ["--checkpoint", str(trained / "model"), "--input", str(trained / "images"),
              "--top-k", "3", "--batch-size", "16"]  # fmt: skip
    ref = run([*common, "--output-dir", "single"], trained)
    assert ref.returncode == 0, ref.stderr
    single = report(trained / "single")
    assert single["mode"] == "single" and single["measured"]["items"] == 120
    assert len(rows(trained / "single")) == 120
    assert 0 <= single["metrics"]["accuracy"] <= 1 and single["metrics"]["items"] == 120
    matrix = np.array(single["metrics"]["confusion"])
    assert matrix.sum() == 120 and matrix.shape == (9, 9)
    header = list(rows(trained / "single")[0])
    assert header == ["item", "label", "class", "probability", "class_2", "probability_2",
                      "class_3", "probability_3"]  # fmt: skip
    # auto: calibrated at 6 ranks here, at 3 on the HDF5 set and at 4 through the local scheduler
    # (below)
    for ranks, roles, out in (
        (3, "reader=1,predict=1", "p3"),
        (6, "auto", "p6"),
        (4, "reader=1,preprocess=1,predict=1", "p4x"),
    ):
        r = run([*common, "--roles", roles, "--output-dir", out], trained, ranks=ranks)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = report(trained / out)
        assert doc["mode"] == "pipeline" and doc["world_size"] == ranks
        assert sum(doc["plan"]["roles"].values()) == ranks
        if roles != "auto":
            given = {k: int(v) for k, v in (kv.split("=") for kv in roles.split(","))}
            assert doc["plan"]["roles"] == {"preprocess": 0, "sink": 1, **given}
        else:  # calibrated: the plan printed with its prediction, the run measured beside it
            assert "pipeline plan:" in r.stdout and "predicted" in r.stdout
            assert doc["plan"]["predicted_items_per_s"] > 0 and doc["measured"]["vs_predicted"] > 0
        assert_same_predictions(trained / out, trained / "single")
        assert doc["metrics"] == single["metrics"]
        stages = {s["stage"]: s for s in doc["stages"]}
        assert set(stages) >= {"reader", "predict", "sink"}
        assert all(s["items"] == 120 for s in stages.values())
        assert all(0 <= s["busy_pct"] <= 100.5 for s in stages.values())
        assert len(doc["ranks"]) == ranks and all(x["peak_rss_mb"] > 0 for x in doc["ranks"])
    dp = run([*common, "--mode", "data-parallel", "--output-dir", "dp"], trained, ranks=4)
    assert dp.returncode == 0, dp.stderr
    assert report(trained / "dp")["mode"] == "data-parallel"
    assert_same_predictions(trained / "dp", trained / "single")


def test_an_hdf5_dataset_is_classified_alike_at_3_4_and_6_ranks(trained):
    common = ["--checkpoint", str(trained / "model" / "checkpoints"), "--input",
              str(trained / "data"), "--split", "test", "--batch-size", "8"]  # fmt: skip
    assert run([*common, "--output-dir", "h1"], trained).returncode == 0
    want = rows(trained / "h1")
    from hpcbench.data import Manifest

    assert len(want) == Manifest.load(trained / "data").split("test").samples
    assert want[0]["item"] == "test/0" and want[0]["label"]
    for ranks, roles in (
        (3, "auto"),
        (4, "reader=2,predict=1"),
        (6, "reader=1,preprocess=2,predict=2"),
    ):
        out = f"h{ranks}"
        r = run([*common, "--roles", roles, "--output-dir", out], trained, ranks=ranks)
        assert r.returncode == 0, r.stdout + r.stderr
        assert_same_predictions(trained / out, trained / "h1")
    # what the trainer's own evaluation measured on this split is what prediction measures
    metrics = json.loads((trained / "model" / "metrics.json").read_text())
    assert report(trained / "h1")["metrics"]["accuracy"] == pytest.approx(
        metrics["test"]["accuracy"], abs=1e-9
    )


def test_credits_bound_each_ranks_memory_behind_a_slow_predictor(trained, tmp_path):
    """Readers could read everything at once; with a predictor 10x slower than them, the credits
    must hold every rank to the bound the plan states (while far more data flows through)."""
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    big = tmp_path / "big"  # 3x256x256 samples (192 KiB): 1.5 MiB units of 8, 72 MiB in all
    convert(synthetic(384, 9), big, ConvertOptions(size=(256, 256), grayscale=False,
                                                    split="100", progress=False, workers=1))  # fmt: skip
    r = run(["--checkpoint", str(trained / "model"), "--input", str(big), "--batch-size", "8",
             "--split", "train", "--roles", "reader=1,preprocess=1,predict=1", "--output-dir",
             "slow"], tmp_path, ranks=4, HPCBENCH_PREDICT_SLOW="0.1")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = report(tmp_path / "slow")
    assert doc["measured"]["items"] == 384
    bound = doc["plan"]["memory_bound_mb"]
    total_mb = 384 * 3 * 256 * 256 / 2**20
    ranks = {x["role"]: x for x in doc["ranks"]}
    # the protocol: never more queued than the credits granted, nor more sent and not yet taken
    # (one producer and one consumer per link here)
    first, second = (
        doc["plan"]["credits"]["reader->preprocess"],
        doc["plan"]["credits"]["preprocess->predict"],
    )
    assert ranks["preprocess"]["max_queue"] <= first and ranks["predict"]["max_queue"] <= second
    assert ranks["reader"]["max_held"] <= first and ranks["preprocess"]["max_held"] <= second
    # the memory: each rank grew by at most its bound (plus 48 MiB for MPI and the allocator),
    # far below the data that went through it
    assert bound["reader"] < total_mb / 4
    for role in ("reader", "preprocess", "predict"):
        assert ranks[role]["growth_mb"] <= bound[role] + 48, (role, ranks[role], bound)
    assert ranks["reader"]["wait_credit_s"] > 1.0  # the reader was held back, not just slow


def test_unreadable_images_are_skipped_by_name_or_fatal_with_strict(trained, tmp_path):
    import shutil

    folder = tmp_path / "images"
    shutil.copytree(trained / "images", folder)
    victim = next((folder / "disc").iterdir())
    (folder / "disc" / "broken.jpg").write_bytes(victim.read_bytes()[:300])
    (folder / "star" / "empty.png").write_bytes(b"")
    common = ["--checkpoint", str(trained / "model"), "--input", str(folder)]
    r = run([*common, "--roles", "reader=1,preprocess=1,predict=1", "--credits", "2",
             "--output-dir", "o"], tmp_path, ranks=4)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"{folder / 'disc' / 'broken.jpg'}: unreadable image, skipped" in r.stderr
    assert f"{folder / 'star' / 'empty.png'}: unreadable image, skipped" in r.stderr
    doc = report(tmp_path / "o")
    assert doc["plan"]["credits"] == {"reader->preprocess": 2, "preprocess->predict": 2,
                                      "predict->sink": 2}  # fmt: skip
    assert doc["plan"]["predicted_items_per_s"] is None  # nothing calibrated: nothing claimed
    assert sorted(s["item"] for s in doc["skipped"]) == ["disc/broken.jpg", "star/empty.png"]
    assert doc["measured"]["items"] == 120 and len(rows(tmp_path / "o")) == 120
    for ranks in (1, 4):
        strict = run([*common, "--strict", "--output-dir", f"s{ranks}"], tmp_path, ranks=ranks)
        assert strict.returncode == 2, strict.stderr
        assert "broken.jpg: unreadable image" in strict.stderr and "--strict" in strict.stderr
        assert "Traceback" not in strict.stderr
        assert not (tmp_path / f"s{ranks}" / "predictions.csv").exists()


def test_a_killed_or_failing_rank_ends_the_run_naming_it(trained, tmp_path):
    common = ["--checkpoint", str(trained / "model"), "--input", str(trained / "images"),
              "--batch-size", "4", "--roles", "reader=1,preprocess=1,predict=1"]  # fmt: skip
    # a hang would outlast the timeout (120 s) and fail the test
    killed = run([*common, "--output-dir", "k"], tmp_path, ranks=4, timeout=120,
                 HPCBENCH_FAIL_AT="3:2:kill", HPCBENCH_PREDICT_SLOW="0.2")  # fmt: skip
    assert killed.returncode != 0
    out = killed.stdout + killed.stderr
    assert "rank 3 is killed (SIGKILL) at unit 2" in out
    assert not (tmp_path / "k" / "predictions.csv").exists()
    failing = run([*common, "--output-dir", "f"], tmp_path, ranks=4, timeout=120,
                  HPCBENCH_FAIL_AT="2:1")  # fmt: skip
    assert failing.returncode != 0
    assert (
        "hpcbench predict: rank 2 (preprocess) failed: RuntimeError: failure drill"
        in failing.stderr
    )


def test_bad_options_and_inputs_are_one_line_on_every_rank(trained, tmp_path):
    model = str(trained / "model")
    cases = [
        (1, ["--checkpoint", str(tmp_path / "nope"), "--input", "x"], "--checkpoint"),
        (1, ["--checkpoint", model, "--input", str(tmp_path / "nope")], "no such file"),
        (
            3,
            [
                "--checkpoint",
                model,
                "--input",
                str(trained / "images"),
                "--roles",
                "reader=1,preprocess=1,predict=1",
            ],
            "4 ranks for the 3 started",
        ),  # fmt: skip
        (2, ["--checkpoint", model, "--input", str(trained / "images")], "at least 3 ranks"),
    ]
    other = tmp_path / "other"
    (other / "giraffe").mkdir(parents=True)
    (other / "disc").mkdir()
    for d in ("giraffe", "disc"):
        (other / d / "a.jpg").write_bytes(
            (next((trained / "images" / "disc").iterdir())).read_bytes()
        )
    cases.append(
        (1, ["--checkpoint", model, "--input", str(other)], "sub-folder 'giraffe' is not one")
    )
    for ranks, args, said in cases:
        r = run([*args, "--output-dir", "o"], tmp_path, ranks=ranks)
        assert r.returncode == 2, (args, r.stderr)
        lines = [x for x in r.stderr.splitlines() if x.startswith("hpcbench predict")]
        assert len(lines) == 1 and said in lines[0], r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_through_the_local_scheduler_as_the_jobs_program(trained, workdir):
    r = hpcbench(
        *("submit", "--tasks-per-node", "4", "--launcher", "mpiexec", "--scheduler", "local"),
        *("--wait", "--module", "hpcbench.predict", "--", "--checkpoint", str(trained / "model")),
        *("--input", str(trained / "images"), "--roles", "auto"),
        cwd=workdir,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "classified 120 image(s)" in r.stdout
    found = list((workdir / "runs").rglob("predictions.csv"))
    assert len(found) == 1 and len(rows(found[0].parent)) == 120


def test_a_pipeline_slower_than_one_process_by_its_calibration_is_not_run(trained):
    """The slow-link drill makes every unit's transfer cost 20 ms in the calibration: every split
    is predicted slower than one process, so rank 0 predicts alone, as one process does."""
    common = ["--checkpoint", str(trained / "model"), "--input", str(trained / "images"),
              "--batch-size", "16"]  # fmt: skip
    if not (trained / "single").exists():
        assert run([*common, "--top-k", "3", "--output-dir", "single"], trained).returncode == 0
    r = run([*common, "--top-k", "3", "--output-dir", "alone"], trained, ranks=4,
            HPCBENCH_PREDICT_SLOW_LINK="0.02")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "slower than one process" in r.stdout and "rank 0 predicts alone" in r.stdout
    doc = report(trained / "alone")
    assert doc["mode"] == "single" and doc["world_size"] == 4
    assert doc["plan"]["alone"] is True
    assert doc["plan"]["predicted_items_per_s"] < doc["plan"]["one_process_items_per_s"]
    assert doc["measured"]["items"] == 120 and doc["measured"]["vs_predicted"] > 0
    assert_same_predictions(trained / "alone", trained / "single")
    bad = run([*common, "--output-dir", "bad"], trained, ranks=3, HPCBENCH_PREDICT_SLOW_LINK="x")
    assert bad.returncode != 0
    assert "HPCBENCH_PREDICT_SLOW_LINK='x': expected seconds" in bad.stderr


def test_new_images_in_dated_folders_and_a_csv_without_labels_are_classified_unlabelled(
    trained, tmp_path
):
    """Users' new images arrive in dated or camera folders, not class folders: read as
    unlabelled (said in one line), each image's sub-folder kept as its source; a CSV listing
    without a label column works too; a folder mixing classes and other names asks for
    --unlabelled."""
    import shutil

    new = tmp_path / "new"
    common = ["--checkpoint", str(trained / "model")]
    shutil.copytree(trained / "images" / "disc", new / "2026-11-01")  # the first day alone
    first = run([*common, "--input", str(new), "--output-dir", "d1"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert {g["source"] for g in rows(tmp_path / "d1")} == {"2026-11-01"}
    shutil.copytree(trained / "images" / "star", new / "2026-11-02" / "cam-b")  # deeper too
    r = run([*common, "--input", str(new), "--output-dir", "o"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "read as unlabelled images (its sub-folders are not the model's classes" in (
        r.stdout + r.stderr
    )
    got = rows(tmp_path / "o")
    assert len(got) == len(list(new.rglob("*.*"))) and {g["label"] for g in got} == {""}
    assert {g["source"] for g in got} == {"2026-11-01", "2026-11-02/cam-b"}
    listing = tmp_path / "new.csv"
    files = sorted(p.relative_to(tmp_path).as_posix() for p in new.rglob("*.*"))
    listing.write_text("file\n" + "".join(f"{f}\n" for f in files))
    r = run([*common, "--input", str(listing), "--output-dir", "c"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert [g["item"] for g in rows(tmp_path / "c")] == files
    shutil.copytree(trained / "images" / "disc", new / "disc")
    mixed = run([*common, "--input", str(new), "--output-dir", "m"], tmp_path)
    assert mixed.returncode == 2 and "give --unlabelled" in mixed.stderr, mixed.stderr
    forced = run([*common, "--input", str(new), "--unlabelled", "--output-dir", "u"], tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "disc" in {g["source"] for g in rows(tmp_path / "u")}
