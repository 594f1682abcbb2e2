"""The trainer's options, declared once: ``--help`` shows every default from the field itself, a
TOML file written from a configuration loads back equal, flags override it, and a bad file is one
line and exit 2 through ``python -m hpcbench.train`` (real processes; no torch is needed for it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.train.command_line import parse_args
from hpcbench.train.config import OPTIONS, ConfigError, TrainConfig
from hpcbench.train.config_file import to_toml
from tests.conftest import need_module

FIELDS = OPTIONS


def train(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full = {k: v for k, v in full.items() if not k.startswith(("PMI_", "OMPI_", "SLURM_"))}
    return subprocess.run(
        [sys.executable, "-m", "hpcbench.train", *args],
        cwd=cwd,
        env={**full, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def expected_default(value: object) -> str:
    """The default as the help should print it: as typed on the command line, or unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def help_entries(text: str) -> dict[str, str]:
    """Each option's entry of ``--help``, on one line, by each of its flags."""
    entries: dict[str, str] = {}
    for block in re.split(r"\n(?=  -)", text):
        block = block.split("\n\n")[0]  # not the next group's title
        if block.startswith("  -"):
            invocation = re.split(r"\s{2,}", block.strip())[0]
            for flag in re.findall(r"--[a-z-]+", invocation):
                entries[flag] = " ".join(block.split())
    return entries


def test_help_prints_every_default_from_the_option_itself(tmp_path):
    env = {"COLUMNS": "1000", "HPCBENCH_DATA": str(tmp_path / "my data")}
    r = train("--help", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    entries = help_entries(r.stdout)
    defaults = {f.name: TrainConfig().value(f.name) for f in FIELDS}
    defaults["data"] = str(tmp_path / "my data")  # the default follows $HPCBENCH_DATA
    for f in FIELDS:
        flag = "--" + f.name.replace("_", "-")
        assert flag in entries, f"{flag} is not in --help"
        assert entries[flag].count("(default") == 1, entries[flag]  # no default typed in the help
        shown = re.findall(r"\(default: (.*?)(?:, meaning .*)?\)$", entries[flag])
        assert shown == [expected_default(defaults[f.name])], entries[flag]
    assert "--no-overlap" in entries and "--config" in entries


def test_a_config_written_to_toml_loads_back_equal(tmp_path):
    config = TrainConfig(
        data=str(tmp_path / 'odd "name"\\ü'),
        strategy="mpi",
        model="mlp:64",
        epochs=3,
        global_batch_size=48,
        rank_weights=[1.0, 4.0, 4.5],
        optimizer="adamw",
        lr=1e-05,
        momentum=0.0,
        weight_decay=1e30,
        schedule="onecycle",
        warmup_epochs=0.5,
        seed=7,
        threads=3,
        output_dir="runs/x",
        max_steps=11,
        overlap=False,
        bucket_mb=0.25,
        sync_bn=True,
        stage_dir="/dev/shm",
        progress="none",
    )
    path = tmp_path / "run.toml"
    path.write_text(to_toml(config), encoding="utf-8")
    assert parse_args(["--config", str(path)]) == config
    defaults = tmp_path / "defaults.toml"  # unset options stay unset
    defaults.write_text(to_toml(TrainConfig()), encoding="utf-8")
    assert parse_args(["--config", str(defaults)]) == TrainConfig()


def test_flags_override_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        'model = "rnn"\nglobal-batch-size = 64\nepochs = 4\nrank_weights = [1, 3]\noverlap = false\n'
    )
    got = parse_args(["--config", str(path), "--epochs", "2", "--overlap", "--rank-weights", "2,2"])
    want = TrainConfig(
        model="rnn", global_batch_size=64, epochs=2, rank_weights=[2.0, 2.0], overlap=True
    )
    assert got == want
    # A batch flag replaces the file's other batch option instead of clashing with it.
    path.write_text("global_batch_size = 64\n")
    got = parse_args(["--config", str(path), "--batch-size-per-rank", "8"])
    assert (got.batch.global_batch_size, got.batch.batch_size_per_rank) == (None, 8)


@pytest.mark.parametrize(
    "content,message",
    [
        ("lrr = 0.1\n", "run.toml: unknown option 'lrr'; did you mean 'lr'?"),
        ("[train]\nlr = 0.1\n", "run.toml: unknown option 'train'"),
        ('epochs = "5"\n', "run.toml: epochs must be a whole number, got '5'"),
        ("epochs = 2.5\n", "run.toml: epochs must be a whole number, got 2.5"),
        ('lr = "fast"\n', "run.toml: lr must be a number, got 'fast'"),
        ('sync-bn = "yes"\n', "run.toml: sync-bn must be true or false, got 'yes'"),
        ('rank-weights = "1,4"\n', "run.toml: rank-weights must be a list of numbers, got '1,4'"),
        ("lr = 0.1\nlr = 0.2\n", "--config run.toml: not valid TOML ("),
        ("epochs = 2\nepochs_ = 3\n", "run.toml: unknown option 'epochs_'"),
        (
            "max-steps = 2\nmax_steps = 3\n",
            "run.toml: 'max-steps' and 'max_steps' are the same option",
        ),
        ("lr = inf\n", "run.toml: lr must be a finite number in (0, 1e30], got inf"),
        (f"lr = 1{'0' * 400}\n", "run.toml: lr must be a finite number in (0, 1e30], got inf"),
        ('strategy = "fast"\n', "run.toml: strategy must be one of auto, single, ddp, mpi, dp"),
        ('model = "mlp:0"\n', "run.toml: model mlp:0: the width after ':' must be a whole number"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_key(content, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.toml").write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        parse_args(["--config", "run.toml"])
    assert str(caught.value).startswith(message), caught.value
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "problem,content,message",
    [
        ("unknown key", b"epochs = 2\nspeed = 3\n", "run.toml: unknown option 'speed'"),
        ("wrong type", b"max_steps = [1]\n", "run.toml: max_steps must be a whole number"),
        ("not UTF-8", b'model = "mlp\xff"\n', "--config run.toml: not UTF-8 text (byte 12)"),
        ("not TOML", b"epochs = \n", "--config run.toml: not valid TOML"),
        ("missing file", None, "--config run.toml: no such file"),
        ("a directory", "dir", "--config run.toml: not a regular file"),
    ],
)
def test_a_bad_file_exits_2_with_one_line(problem, content, message, tmp_path):
    path = tmp_path / "run.toml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    r = train("--config", "run.toml", "--data", str(tmp_path / "nothing"), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert one_line(r.stderr).startswith(f"hpcbench train: error: {message}"), r.stderr
    assert r.stdout == ""


def test_a_good_file_reaches_the_run(tmp_path):
    """The file's options are the run's: here its dataset, which is missing (exit 2, named)."""
    need_module("torch")  # the run gets as far as placing the rank
    (tmp_path / "run.toml").write_text(f"data = '{tmp_path / 'elsewhere'}'\nepochs = 1\n")
    r = train("--config", "run.toml", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--data {tmp_path / 'elsewhere'}: no dataset there" in one_line(r.stderr)


def test_a_prefix_of_an_option_is_not_that_option():
    # "--output" would otherwise be --output-dir: a benchmark's reserved flags could be reached
    with pytest.raises(SystemExit) as stop:
        parse_args(["--output", "/tmp/x"])
    assert stop.value.code == 2


def test_strategies_options_join_the_parallelism_branch_where_they_ask_and_a_clash_is_left_out(
    capsys,
):
    """The options a strategy declares are placed after the option their ``after`` names (the
    built-in ones where ``--help`` has always listed them); one whose name is taken is named on
    stderr and left out, the trainer's own option kept."""
    from dataclasses import dataclass, fields

    from hpcbench.train.option_fields import option
    from hpcbench.train.options_running import (
        SharedParallelismOptions,
        assemble,
        strategies_options,
    )

    built = [f.name for f in fields(TrainConfig().parallelism)]
    assert built == ["strategy", "device", "threads", "overlap", "bucket_mb", "precision",
                     "channels_last", "compile", "grad_compression", "error_feedback",
                     "cuda_aware_mpi", "resync_every"]  # fmt: skip
    assert TrainConfig(bucket_mb=50).parallelism.bucket_mb == 50

    @dataclass
    class Plugged:
        threads: int = option(3, help="taken")
        first: int = option(1, help="placed after the strategy", after="strategy")
        last: int = option(2, help="placed at the end")

    made = assemble(SharedParallelismOptions, [*strategies_options(), Plugged])
    names = [f.name for f in fields(made)]
    assert names[:2] == ["strategy", "first"] and names[-1] == "last"
    assert names.count("threads") == 1 and made().threads is None  # the trainer's own kept
    said = capsys.readouterr().err
    assert "the option threads of " in said and "Plugged is already an option" in said
