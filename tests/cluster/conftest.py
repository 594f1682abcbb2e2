"""The real test SLURM cluster: brought up once per session by tests/cluster/slurm-up.sh and
stopped at the end by slurm-down.sh (only if this session started it). In CI a cluster that
cannot start fails the tests; on a laptop without root they skip with the reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def slurm_cluster():
    up = subprocess.run(
        ["bash", str(HERE / "slurm-up.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if up.returncode == 3 and not IN_CI:
        pytest.skip("the test SLURM cluster needs root (tests/cluster/slurm-up.sh)")
    if up.returncode != 0:
        pytest.fail(f"tests/cluster/slurm-up.sh failed:\n{up.stdout}\n{up.stderr[-3000:]}")
    started_here = "already running" not in up.stdout
    yield up.stdout.strip()
    if started_here:
        subprocess.run(
            ["bash", str(HERE / "slurm-down.sh")],
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
