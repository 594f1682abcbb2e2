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


@pytest.fixture(scope="session")
def sge_cluster():
    """A single-host Grid Engine (tests/cluster/sge-up.sh), stopped at the end by sge-down.sh."""
    up = subprocess.run(
        ["bash", str(HERE / "sge-up.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if up.returncode == 3 and not IN_CI:
        pytest.skip("the test Grid Engine needs root (tests/cluster/sge-up.sh)")
    if up.returncode != 0:
        pytest.fail(f"tests/cluster/sge-up.sh failed:\n{up.stdout}\n{up.stderr[-3000:]}")
    import os

    saved = {k: os.environ.get(k) for k in ("SGE_ROOT", "SGE_CELL")}
    os.environ.update(SGE_ROOT="/var/lib/gridengine", SGE_CELL="default")
    yield up.stdout.strip()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    subprocess.run(
        ["bash", str(HERE / "sge-down.sh")],
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
