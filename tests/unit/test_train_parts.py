"""The trainer's pure parts: batch splitting, options, node lists, metrics, strategy choice."""

from __future__ import annotations

import numpy as np
import pytest

from hpcbench.train.command_line import parse_args
from hpcbench.train.config import ConfigError, TrainConfig
from hpcbench.train.data import split_batch
from tests.conftest import need_module

torch = need_module("torch")  # hpcbench.train.runtime and the models need it

from hpcbench.environments.slurm import first_host  # noqa: E402


@pytest.mark.parametrize(
    "batch,weights,want",
    [
        (32, [1, 1], [16, 16]),
        (32, [1, 1, 1], [11, 11, 10]),
        (24, [1, 2, 5], [3, 6, 15]),
        (10, [1, 4, 4], [1, 5, 4]),
    ],
)
def test_split_batch_is_proportional_and_sums_to_the_global_batch(batch, weights, want):
    got = split_batch(batch, weights)
    assert sum(got) == batch and got == want


def test_options_are_checked_with_one_line_errors():
    assert parse_args([]).batch.global_batch_size is None
    with pytest.raises(ConfigError, match="--rank-weights needs --data-order global"):
        parse_args(["--rank-weights", "1,2", "--data-order", "shards"])
    with pytest.raises(ConfigError, match="--epochs must be at least 1"):
        parse_args(["--epochs", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--global-batch-size", "8", "--batch-size-per-rank", "4"])
    cfg = TrainConfig(rank_weights=[1, 0])
    with pytest.raises(ConfigError, match="positive"):
        cfg.check()


@pytest.mark.parametrize(
    "nodelist,host",
    [("node1", "node1"), ("node[1-2]", "node1"), ("gpu[03-05,7],cpu1", "gpu03"), ("a,b", "a")],
)
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host


def test_macro_f1_and_accuracy_from_a_confusion_matrix():
    from hpcbench.train.metrics import Meter

    confusion = np.array([[3, 1, 0], [0, 2, 0], [0, 0, 0]], dtype=np.float64)  # class 2 absent
    m = Meter.summarise(np.concatenate([[6.0], confusion.reshape(-1)]), 3)
    assert (
        m["accuracy"] == pytest.approx(5 / 6)
        and m["samples"] == 6
        and m["loss"] == pytest.approx(1.0)
    )
    f1_0, f1_1 = 2 * 3 / (3 + 4), 2 * 2 / (3 + 2)
    assert m["macro_f1"] == pytest.approx((f1_0 + f1_1) / 2)


def test_strategy_auto_follows_the_launcher(monkeypatch):
    from hpcbench.this_rank import LaunchInfo
    from hpcbench.train.runtime import Runtime
    from hpcbench.train.strategies import choose

    def rt(launcher, world):
        return Runtime(
            LaunchInfo(0, world, 0, world, 0, launcher, "h"), torch.device("cpu"), 1, "gloo"
        )

    auto = TrainConfig()
    assert choose(auto, rt("single", 1)) == "single"
    assert choose(auto, rt("mpich", 4)) == "mpi"
    assert choose(auto, rt("openmpi", 2)) == "mpi"
    assert choose(auto, rt("torchrun", 2)) == "ddp"
    assert choose(auto, rt("slurm", 2)) == "ddp"
    assert choose(TrainConfig(strategy="mpi"), rt("torchrun", 2)) == "mpi"


def test_models_adapt_to_channels_classes_and_size():
    from hpcbench.train.models import build_model

    x = torch.zeros(2, 1, 40, 56)
    for name in ("small_cnn", "mlp", "rnn", "resnet18", "mobilenet_v3_small"):
        assert build_model(name, (1, 40, 56), 7)(x).shape == (2, 7), name
    with pytest.raises(ConfigError, match="needs square images"):
        build_model("vit_b_16", (1, 40, 56), 7)
    with pytest.raises(ConfigError, match="resnet9000: no such model .did you mean resnet50"):
        build_model("resnet9000", (1, 40, 56), 7)


def test_rendezvous_under_srun_comes_from_the_node_list_and_job_id(monkeypatch):
    from hpcbench.this_rank import LaunchInfo
    from hpcbench.train.runtime import rendezvous

    for k in ("MASTER_ADDR", "MASTER_PORT", "HPCBENCH_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    launch = LaunchInfo(3, 4, 1, 2, 1, "slurm", "gpu08")
    assert rendezvous(launch) == ("gpu07", 20000 + 123456 % 20000)
    monkeypatch.setenv("MASTER_ADDR", "head")
    monkeypatch.setenv("MASTER_PORT", "29400")
    assert rendezvous(launch) == ("head", 29400)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--lr", "inf"], "--lr must be a finite number in (0, 1e30], got inf"),
        (["--lr", "-0.1"], "--lr must be a finite number in (0, 1e30], got -0.1"),
        (["--momentum", "-5"], "--momentum must be a finite number in [0, 1), got -5.0"),
        (["--momentum", "1"], "--momentum must be a finite number in [0, 1), got 1.0"),
        (["--weight-decay=-inf"], "--weight-decay must be a finite number in [0, 1e30], got -inf"),
        (
            ["--warmup-epochs", "inf"],
            "--warmup-epochs must be a finite number in [0, 1e6], got inf",
        ),
        (["--lr", "1e39"], "--lr must be a finite number in (0, 1e30], got 1e+39"),
        (["--bucket-mb", "nan"], "--bucket-mb must be a finite number in (0, 1e6], got nan"),
        (
            ["--rank-weights", "1,nan"],
            "--rank-weights must all be finite positive numbers, got 1,nan",
        ),
    ],
)
def test_float_options_must_be_finite_and_in_range(args, message):
    with pytest.raises(ConfigError) as caught:
        parse_args(args)
    assert str(caught.value) == message


def test_boundary_values_of_float_options_are_accepted():
    cfg = parse_args(["--momentum", "0", "--weight-decay", "0", "--warmup-epochs", "0"])
    assert (cfg.batch.momentum, cfg.batch.weight_decay, cfg.batch.warmup_epochs) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    "spec,want",
    [
        ("small_cnn", ("small_cnn", None)),
        ("mlp:512", ("mlp", 512)),
        ("resnet18", ("resnet18", None)),
    ],
)
def test_model_specs_parse(spec, want):
    from hpcbench.train.config import parse_model

    assert parse_model(spec) == want


@pytest.mark.parametrize(
    "spec,message",
    [
        ("small_cnn:abc", "width after ':' must be a whole number >= 2"),
        ("small_cnn:1", "width after ':' must be a whole number >= 2"),
        ("mlp:-5", "width after ':' must be a whole number >= 1"),
        ("mlp:0", "width after ':' must be a whole number >= 1"),
        ("rnn:", "width after ':' must be a whole number >= 1"),
        ("mlp:٣", "width after ':' must be a whole number >= 1"),
        ("resnet18:4", "only small_cnn, mlp, rnn take a width"),
        (":8", "give a model name"),
    ],
)
def test_bad_model_specs_are_refused_with_the_option_named(spec, message):
    with pytest.raises(ConfigError, match="^--model .*" + message.replace("(", r"\(")):
        parse_args(["--model", spec])


def test_the_results_layout_is_documented():
    """Every column of epochs.csv and every key of metrics.json's epoch records is named in
    docs/training.md, next to the layout that hpcbench/train/documents.py declares."""
    from pathlib import Path

    from hpcbench.run_documents import CSV_COLUMNS, EPOCH_FIELDS

    docs = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    assert [key for key, _, _ in EPOCH_FIELDS][: len(CSV_COLUMNS)] == CSV_COLUMNS
    missing = [key for key, _, _ in EPOCH_FIELDS if f"`{key}`" not in docs]
    assert missing == []


@pytest.mark.parametrize(
    "value,seconds",
    [("0.25", 0.25), ("2", 2.0), ("", 0.0), ("0", 0.0), ("-1", 0.0), ("61", 0.0), ("x", 0.0),
     ("nan", 0.0), ("inf", 0.0)],
)  # fmt: skip
def test_the_slow_step_drill_reads_seconds_from_0_to_60_and_ignores_the_rest(
    value, seconds, monkeypatch
):
    from hpcbench.train.drills import STEP_DELAY_VARIABLE, step_delay

    monkeypatch.setenv(STEP_DELAY_VARIABLE, value)
    assert step_delay() == seconds
