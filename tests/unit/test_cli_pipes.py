"""Output into a pipe whose reader has gone (``hpcbench history | head -1``): every command ends
quietly, as a Unix tool killed by SIGPIPE does, with no BrokenPipeError traceback and no
"Exception ignored" line at the interpreter's exit. The pipes are real: the reader closes its end
before the command writes (deterministic) or after reading one line (as ``head -1`` does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.history import record_results
from tests.unit.test_bench_analysis import _small

QUIET = (0, 141)  # what a command may end with when its reader went away


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """A history with a result in it, and an empty job registry."""
    root = tmp_path_factory.mktemp("pipes")
    found = {
        **os.environ,
        "HPCBENCH_HISTORY": str(root / "history.sqlite"),
        "HPCBENCH_STATE_DIR": str(root / "state"),
    }
    found.pop("PYTHONUNBUFFERED", None)
    old = os.environ.get("HPCBENCH_HISTORY")
    os.environ["HPCBENCH_HISTORY"] = found["HPCBENCH_HISTORY"]
    try:
        for name in ("a", "b", "c"):
            record_results(_small(root / name, two_train=52.0))
    finally:
        if old is None:
            os.environ.pop("HPCBENCH_HISTORY")
        else:
            os.environ["HPCBENCH_HISTORY"] = old
    return found


def _closed_before(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``hpcbench ARGS`` writing into a pipe whose read end is already closed."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "hpcbench", *args],
            stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env=env, text=True, timeout=120, cwd=Path(env["HPCBENCH_STATE_DIR"]).parent,
        )  # fmt: skip
    finally:
        os.close(write)


COMMANDS = [
    ["history"],
    ["history", "--help"],
    ["status"],
    ["report", "--help"],
    ["bench", "--help"],
    ["sweep", "--help"],
    ["--help"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_reader_gone_before_the_first_line_ends_the_command_quietly(env, args):
    done = _closed_before(args, env)
    assert done.returncode in QUIET, done.stderr
    assert "BrokenPipeError" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["history", "status", "report --help"])
def test_head_reading_one_line_ends_the_command_quietly(env, command):
    """The shell's own pipe into head -1: its status is the command's (pipefail)."""
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c",
         f"{sys.executable} -m hpcbench {command} 2>err | head -1 >/dev/null; echo $?; cat err"],
        capture_output=True, text=True, env=env, timeout=120,
        cwd=Path(env["HPCBENCH_STATE_DIR"]).parent,
    )  # fmt: skip
    status, _, err = done.stdout.partition("\n")
    assert int(status) in QUIET, done.stdout
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
