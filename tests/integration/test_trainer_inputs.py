"""The trainer refuses what it cannot use, and stops what goes wrong, before it costs a run.

Real processes throughout: ``python -m hpcbench.train`` alone, under ``mpiexec -n 2`` and under
``torchrun`` with two ranks, on a tiny synthetic dataset (a few steps, a few seconds each).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import have_module, mpiexec_available, need_module, require
from tests.integration.test_trainer import launch, run

need_module("torch")

TRAIN = ["-m", "hpcbench.train"]
QUICK = ["--epochs", "2", "--global-batch-size", "16", "--max-steps", "6", "--progress", "none"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    root = tmp_path_factory.mktemp("inputs") / "shapes"
    convert(synthetic(300, 9), root, ConvertOptions(size=(16, 12), grayscale=True, progress=False))
    return root


def need_launcher(strategy: str) -> None:
    if strategy == "mpi":
        require(mpiexec_available() and have_module("mpi4py"), "mpiexec and mpi4py")


def one_line(stderr: str) -> str:
    """The only line on stderr (no traceback, no second message)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def results_written(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("*")) if run_dir.is_dir() else []


# ---- options ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "option,value",
    [
        ("--lr", "inf"),
        ("--lr", "nan"),
        ("--lr", "1e39"),  # finite, but beyond float32, where torch keeps it
        ("--weight-decay", "1e39"),
        ("--momentum", "-5"),
        ("--momentum", "1"),
        ("--momentum", "nan"),
        ("--weight-decay", "-1"),
        ("--weight-decay", "inf"),
        ("--warmup-epochs", "nan"),
        ("--bucket-mb", "inf"),
        ("--rank-weights", "1,inf"),
        ("--model", "small_cnn:abc"),
        ("--model", "mlp:-5"),
        ("--model", "mlp:0"),
        ("--model", "resnet18:4"),
    ],
)
def test_bad_numbers_and_model_specs_are_one_line_usage_errors(option, value, tiny, tmp_path):
    out = tmp_path / "run"
    r = run(
        [
            sys.executable,
            *TRAIN,
            "--data",
            str(tiny),
            *QUICK,
            option,
            value,
            "--output-dir",
            str(out),
        ],
        tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    line = one_line(r.stderr)
    assert option in line and (value in line or as_float(value) in line), line
    assert "epoch 1/" not in r.stdout and results_written(out) == []


def as_float(value: str) -> str:
    try:
        return str(float(value))
    except ValueError:
        return value


@pytest.mark.mpi
@pytest.mark.parametrize(
    "bad",
    [["--lr", "inf"], ["--epochs", "many"], ["--no-such-option"], ["--config", "missing.toml"]],
)
def test_a_bad_option_under_mpiexec_exits_2_and_is_said_once(bad, tiny, tmp_path):
    need_launcher("mpi")
    r = run(launch("mpi", 2, [*TRAIN, "--data", str(tiny), *bad]), tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "MPI_Abort" not in r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and bad[0] in errors[0], r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("problem", ["no dataset", "output dir is a file", "ranks > batch"])
def test_a_set_up_error_under_mpiexec_is_one_line_and_exits_2(problem, tiny, tmp_path):
    """Errors found after MPI started (the dataset, the run directory, the batch split): every
    rank agrees on them and exits 2 itself; nothing calls MPI_Abort."""
    need_launcher("mpi")
    blocker = tmp_path / "taken"
    blocker.write_text("someone else's file\n")
    args = {
        "no dataset": ["--data", str(tmp_path / "nothing"), "--output-dir", str(tmp_path / "o")],
        "output dir is a file": ["--data", str(tiny), "--output-dir", str(blocker)],
        "ranks > batch": ["--data", str(tiny), "--global-batch-size", "1"],
    }[problem]
    r = run(launch("mpi", 2, [*TRAIN, *args, "--progress", "none"]), tmp_path, timeout=180)
    assert r.returncode == 2, r.stdout + r.stderr
    one_line(r.stderr)
    assert "MPI_Abort" not in r.stdout + r.stderr and "epoch 1/" not in r.stdout
    assert blocker.read_text() == "someone else's file\n"


# ---- the output directory -----------------------------------------------------------------------
def _unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() == 0:  # root writes through permission bits; /proc takes no new files
        return Path("/proc")
    d = tmp_path / "readonly"
    d.mkdir()
    d.chmod(0o555)
    return d


@pytest.mark.parametrize("kind", ["existing file", "below a file", "unwritable directory"])
def test_an_unusable_output_dir_is_refused_before_training(kind, tiny, tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("someone else's file\n")
    target = {
        "existing file": blocker,
        "below a file": blocker / "run",
        "unwritable directory": _unwritable_dir(tmp_path),
    }[kind]
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), *QUICK, "--output-dir", str(target)],
        tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    line = one_line(r.stderr)
    assert "--output-dir" in line and str(target) in line, line
    assert "epoch 1/" not in r.stdout  # refused before any training
    assert blocker.read_text() == "someone else's file\n"


def test_the_output_dir_is_created_and_left_without_probe_files(tiny, tmp_path):
    out = tmp_path / "new" / "run"
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), *QUICK, "--output-dir", str(out)],
        tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert results_written(out) == [
        "checkpoints", "epochs.csv", "metrics.json", "steps.csv", "telemetry"
    ]  # fmt: skip
    assert not [p for p in out.rglob(".*")]  # no probe or temporary file left


# ---- non-finite training ------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("strategy,ranks", [("single", 1), ("mpi", 2), ("ddp", 2)])
def test_a_diverging_run_stops_at_the_step_and_writes_no_results(strategy, ranks, tiny, tmp_path):
    need_launcher(strategy)
    out = tmp_path / "run"
    r = run(
        launch(
            strategy,
            ranks,
            [*TRAIN, "--data", str(tiny), *QUICK, "--lr", "1e12", "--output-dir", str(out)],
        ),
        tmp_path,
        timeout=240,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "training diverged at epoch 1, step " in r.stderr, r.stderr
    assert r.stderr.count("training diverged") == 1, r.stderr
    assert "MPI_Abort" not in r.stdout + r.stderr
    assert "epoch 1/2:" not in r.stdout  # stopped inside the first epoch
    assert results_written(out) == []
    if strategy != "ddp":  # torchrun adds its own report of the failed workers
        one_line(r.stderr)


# ---- labels -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def too_few_classes(tiny, tmp_path_factory) -> Path:
    """The tiny set with its manifest claiming 8 classes: the shards still hold labels 0..8."""
    import shutil

    root = tmp_path_factory.mktemp("labels") / "shapes"
    shutil.copytree(tiny, root)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["classes"] = manifest["classes"][:8]
    for split in manifest["splits"].values():
        counts = split["class_counts"]
        split["class_counts"] = counts[:7] + [counts[7] + counts[8]]
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.mark.mpi
@pytest.mark.parametrize(
    "strategy,ranks,order", [("single", 1, "global"), ("single", 1, "shards"), ("mpi", 2, "global")]
)
def test_labels_beyond_the_classes_are_one_line_naming_the_sample(
    strategy, ranks, order, too_few_classes, tmp_path
):
    need_launcher(strategy)
    out = tmp_path / "run"
    r = run(
        launch(
            strategy,
            ranks,
            [
                *TRAIN,
                "--data",
                str(too_few_classes),
                *QUICK,
                "--data-order",
                order,
                "--output-dir",
                str(out),
            ],
        ),
        tmp_path,
        timeout=240,
    )
    assert r.returncode in (1, 2), r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    line = next(x for x in r.stderr.splitlines() if "label 8" in x)
    assert "8 classes" in line and "train" in line, line
    if order == "global":
        assert "train-00000.h5" in line and "sample " in line, line
    assert results_written(out) == []


# ---- pretrained weights the user provides ----------------------------------------------------------
def test_weights_the_user_provides_start_the_model_and_bad_ones_are_one_line(tiny, tmp_path):
    """``--weights FILE``: torchvision's ImageNet-shaped resnet18 weights (3 channels, 1000
    classes; random here, as nothing is downloaded) start a 1-channel, 9-class resnet18: every
    tensor but the head is the file's (the first convolution summed over RGB), the head is new.
    Weights of another model, a file that is not one, a missing file: one line naming it."""
    import torch
    import torchvision

    from hpcbench.train.checkpoint_file import checkpoint_files, decode

    torch.manual_seed(1)
    imagenet = torchvision.models.resnet18(num_classes=1000).state_dict()
    torch.save(
        {"state_dict": {f"module.{k}": v for k, v in imagenet.items()}}, tmp_path / "r18.pth"
    )
    out = tmp_path / "run"
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), "--model", "resnet18", "--weights",
         str(tmp_path / "r18.pth"), "--epochs", "1", "--max-steps", "1", "--lr", "1e-30",
         "--momentum", "0", "--weight-decay", "0", "--output-dir", str(out)],
        tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    said = "weights: 120 of 122 tensors from"  # the state dict's buffers included
    assert said in r.stdout and "fc.weight, fc.bias initialised anew for 9 classes" in r.stdout
    (_, path), *_ = checkpoint_files(out / "checkpoints")
    trained = decode(path)["model"]
    assert torch.equal(trained["layer3.1.conv2.weight"], imagenet["layer3.1.conv2.weight"])
    assert torch.allclose(trained["conv1.weight"], imagenet["conv1.weight"].sum(1, keepdim=True))
    assert trained["fc.weight"].shape == (9, 512)
    # a bad file, through the trainer's command line: one line, status 2, nothing trained
    (tmp_path / "junk.pth").write_bytes(b"not a weights file")
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), "--model", "resnet18", "--weights",
         str(tmp_path / "junk.pth"), *QUICK, "--output-dir", str(tmp_path / "out-junk")],
        tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    line = one_line(r.stderr)
    assert f"--weights {tmp_path / 'junk.pth'}: not a PyTorch weights file" in line, line
    # the others by the same reader, in this process (each a trainer's start-up saved)
    from hpcbench.train.config import ConfigError
    from hpcbench.train.models import build_model, load_weights

    torch.save(build_model("small_cnn", (1, 12, 16), 9).state_dict(), tmp_path / "cnn.pth")
    model = build_model("resnet18", (1, 12, 16), 9)
    for weights, says in (("cnn.pth", "does not fit this model"), ("none.pth", "no such file")):
        with pytest.raises(ConfigError) as err:
            load_weights(model, str(tmp_path / weights), 9)
        assert str(err.value).startswith(f"--weights {tmp_path / weights}: {says}"), err.value


def test_a_fifo_or_a_device_as_resume_or_weights_is_one_line_not_a_hang(tiny, tmp_path):
    """Opening a FIFO blocks until a writer comes, reading /dev/zero never ends: --resume and
    --weights open regular files only, as the data files are opened."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # one of them through the trainer's command line: one line, status 2, no hang
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), "--model", "mlp", "--resume", str(fifo),
         *QUICK, "--output-dir", str(tmp_path / "out")],
        tmp_path,
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    line = one_line(r.stderr)
    assert str(fifo) in line and "not a regular file" in line, line
    # every one by the readers themselves, in this process
    from hpcbench.train.checkpoint_file import CheckpointError, decode
    from hpcbench.train.config import ConfigError
    from hpcbench.train.models import build_model, load_weights

    model = build_model("mlp", (1, 12, 16), 9)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(ConfigError, match="not a regular file"):
            load_weights(model, str(path), 9)
        with pytest.raises(CheckpointError, match="not a regular file"):
            decode(path)


def test_resume_takes_a_run_directory_as_predict_takes_it(tiny, tmp_path):
    """``--resume runs/RUN``: the newest valid checkpoint of the run (in its checkpoints/), as
    ``predict --checkpoint runs/RUN`` reads it; a directory without one is one line."""
    first = tmp_path / "first"
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), "--model", "mlp", *QUICK,
         "--checkpoint-every", "2", "--output-dir", str(first)],
        tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    newest = first / "checkpoints" / "ckpt-12.pt"  # 2 epochs of 6 steps
    assert newest.exists(), sorted(p.name for p in (first / "checkpoints").iterdir())
    for given in (first, first / "checkpoints"):
        r = run(
            [sys.executable, *TRAIN, "--data", str(tiny), "--model", "mlp", *QUICK,
             "--resume", str(given), "--output-dir", str(tmp_path / "again")],
            tmp_path,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"resuming from {newest}" in r.stdout + r.stderr, r.stdout + r.stderr
    (tmp_path / "empty").mkdir()
    r = run(
        [sys.executable, *TRAIN, "--data", str(tiny), "--model", "mlp", *QUICK,
         "--resume", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "none")],
        tmp_path,
    )  # fmt: skip
    assert r.returncode == 2 and "no checkpoint (ckpt-N.pt)" in one_line(r.stderr), r.stderr
