"""``--tensorboard DIR``: real runs (one process, and DDP on 2 ranks under torchrun) whose event
files, read back with TensorBoard's own EventAccumulator, hold the tags and exactly the values of
the run's metrics.json (as float32, as TensorBoard stores scalars), in one event file per run
(rank 0 alone writes). Without the package (simulated: a sitecustomize on PYTHONPATH makes
``import tensorboard`` fail) the run stops in set-up with one line, exit 2, before any training.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcbench.train.command_line import build_parser, parse_args
from hpcbench.train.config import TrainConfig
from hpcbench.train.config_file import to_toml
from hpcbench.train.tensorboard import END_TAGS, EPOCH_TAGS, MISSING
from tests.conftest import need_module
from tests.integration.test_trainer import REPO, launch, run

EPOCHS = 3
ARGS = ["--epochs", str(EPOCHS), "--val-every", "2", "--global-batch-size", "16"]
ARGS += ["--progress", "none"]


# ---- the option -----------------------------------------------------------------------------
def test_the_option_is_in_help_and_round_trips_through_a_config_file(tmp_path):
    assert "--tensorboard DIR" in build_parser().format_help()
    assert TrainConfig().output.tensorboard is None
    assert parse_args(["--tensorboard", "tb"]).output.tensorboard == "tb"
    config = TrainConfig(tensorboard="runs/tb dir")
    path = tmp_path / "run.toml"
    path.write_text(to_toml(config), encoding="utf-8")
    assert 'tensorboard = "runs/tb dir"' in path.read_text()
    assert parse_args(["--config", str(path)]) == config
    assert parse_args(["--config", str(path), "--tensorboard", "x"]).output.tensorboard == "x"


# ---- real runs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_data(shapes_data):
    need_module("torch")
    return shapes_data(900, 9, (16, 12))  # shared with the other trainer modules


def train(strategy: str, ranks: int, data: Path, cwd: Path, *extra: str, **kw):
    args = ["-m", "hpcbench.train", "--data", str(data), *ARGS, *extra]
    return run(launch(strategy, ranks, args), cwd, **kw)


def read_board(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def f32(value: float) -> float:
    """A number as TensorBoard stores a scalar."""
    return float(np.float32(value))


def assert_board_matches(acc, metrics: dict) -> None:
    epochs = metrics["epochs"]
    tags = set(acc.Tags()["scalars"])
    assert tags == {tag for _, tag in EPOCH_TAGS} | {tag for _, _, tag in END_TAGS}, tags
    for key, tag in EPOCH_TAGS:
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = [(r["epoch"], f32(r[key])) for r in epochs if r[key] is not None]
        assert got == want, tag
    # validated at epochs 2 and 3 only (--val-every 2, and the last)
    assert [e.step for e in acc.Scalars("val/accuracy")] == [2, 3]
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3]
    for section, key, tag in END_TAGS:
        assert [(e.step, e.value) for e in acc.Scalars(tag)] == [
            (EPOCHS, f32(metrics[section][key]))
        ], tag
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert f'strategy = "{metrics["config"]["strategy"]}"' in text
    hparams = acc.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(hparams), hparams


def event_files(root: Path) -> list[Path]:
    return sorted(root.rglob("events.out.tfevents.*"))


@pytest.mark.torch
def test_one_process_logs_every_epoch_and_the_test(small_data, tmp_path):
    need_module("tensorboard")
    r = train("single", 1, small_data, tmp_path, "--output-dir", "runs/one", "--tensorboard", "tb")
    assert r.returncode == 0, r.stdout + r.stderr
    metrics = json.loads((tmp_path / "runs/one/metrics.json").read_text())
    # relative DIR: from the working directory; one subdirectory per run, named as the run's
    assert [p.parent for p in event_files(tmp_path / "tb")] == [tmp_path / "tb" / "one"]
    assert_board_matches(read_board(tmp_path / "tb" / "one"), metrics)


@pytest.mark.torch
@pytest.mark.mpi
def test_ddp_on_two_ranks_writes_one_event_file_from_rank_0(small_data, tmp_path):
    need_module("tensorboard")
    out, tb = tmp_path / "runs" / "ddp-2", tmp_path / "tb"
    r = train("ddp", 2, small_data, tmp_path, "--output-dir", str(out), "--tensorboard", str(tb))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["run"]["world_size"] == 2 and metrics["run"]["strategy"] == "ddp"
    assert [p.parent for p in event_files(tb)] == [tb / "ddp-2"]  # rank 0 alone wrote
    assert_board_matches(read_board(tb / "ddp-2"), metrics)


# ---- failures in set-up ---------------------------------------------------------------------
NO_TENSORBOARD = """
import importlib.abc, sys

class _NoTensorBoard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorboard" or name.startswith("tensorboard."):
            raise ModuleNotFoundError(f"No module named {name!r} (test shim)", name=name)
        return None

sys.meta_path.insert(0, _NoTensorBoard())
"""


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.torch
def test_without_the_package_set_up_stops_with_one_line(small_data, tmp_path):
    """The package's absence is simulated: a sitecustomize.py first on PYTHONPATH puts a finder
    in front of sys.meta_path that refuses ``tensorboard`` (and its submodules)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_TENSORBOARD)
    pythonpath = f"{shim}:{REPO}"
    probe = subprocess.run(
        [sys.executable, "-c", "import tensorboard"],
        env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 1 and "test shim" in probe.stderr  # the shim does hide it
    r = train(
        "single",
        1,
        small_data,
        tmp_path,
        "--output-dir",
        "runs/x",
        "--tensorboard",
        "tb",
        extra_env={"PYTHONPATH": pythonpath},
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert one_line(r.stderr) == f"hpcbench train: error: {MISSING}"
    assert "epoch" not in r.stdout  # no training started
    assert not (tmp_path / "tb").exists() and not (tmp_path / "runs/x/metrics.json").exists()


@pytest.mark.torch
def test_a_directory_that_takes_no_files_is_one_line_naming_it(small_data, tmp_path):
    need_module("tensorboard")
    (tmp_path / "tb").write_text("a file, not a directory")
    r = train("single", 1, small_data, tmp_path, "--output-dir", "runs/x", "--tensorboard", "tb")
    assert r.returncode == 2, r.stdout + r.stderr
    assert one_line(r.stderr).startswith(f"hpcbench train: error: --tensorboard {tmp_path / 'tb'}")
    assert "epoch" not in r.stdout
