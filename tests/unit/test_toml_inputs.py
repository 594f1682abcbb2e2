"""Every TOML file hpcbench reads (a job spec, the trainer's --config, a matrix, a sweep, a
profile) goes through one reader: regular files only, bounded, and every failure one line naming
the file, never a hang on a FIFO nor a traceback for a file nested too deeply."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import hpcbench

DEEP = "a = " + "[" * 5000 + "]" * 5000 + "\n"


def trainer(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcbench.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("what", ["fifo", "deep", "device"])
def test_a_spec_file_that_is_no_toml_file_is_one_line(tmp_path, what):
    spec = tmp_path / "spec.toml"
    if what == "fifo":
        os.mkfifo(spec)
    elif what == "deep":
        spec.write_text(DEEP)
    else:
        spec = Path("/dev/zero")
    line = one_line(hpcbench("render", "--scheduler", "local", str(spec), cwd=tmp_path, timeout=30))
    assert str(spec) in line


@pytest.mark.parametrize("what", ["fifo", "deep"])
def test_a_trainer_config_that_is_no_toml_file_is_one_line(tmp_path, what):
    config = tmp_path / "train.toml"
    if what == "fifo":
        os.mkfifo(config)
    else:
        config.write_text(DEEP)
    line = one_line(trainer("--config", str(config), cwd=tmp_path))
    assert f"--config {config}" in line
