"""Launch detection in real MPI processes (:mod:`hpcbench.this_rank`): an MPI whose variables
hpcbench does not read is still found through mpi4py once the program has started it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import have_module, mpiexec_available, require


def run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` with the venv's mpiexec first on PATH and no launcher variables inherited."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PMI_", "OMPI_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE")
    }
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.mpi
def test_launch_detection_falls_back_to_mpi4py_world(tmp_path):
    """An MPI whose variables hpcbench does not know (simulated by removing MPICH's): the world
    comes from mpi4py's COMM_WORLD once the program has initialised MPI."""
    require(mpiexec_available() and have_module("mpi4py"), "mpiexec and mpi4py")
    code = (
        "import os, json\n"
        "from mpi4py import MPI\n"
        "for k in [k for k in os.environ if k.startswith(('PMI_', 'MPI_', 'OMPI_', 'HYDRA'))]: del os.environ[k]\n"
        "from hpcbench.this_rank import detect_launch\n"
        "i = detect_launch()\n"
        "row = [i.rank, i.world_size, i.local_rank, i.local_world_size, i.node_rank, i.launcher]\n"
        "with open(f'rank-{MPI.COMM_WORLD.Get_rank()}.json', 'w') as f: json.dump(row, f)\n"
    )
    r = run(["mpiexec", "-n", "2", sys.executable, "-c", code], tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    # one file per rank: the ranks' stdout can arrive interleaved on one line
    got = sorted(json.loads(p.read_text()) for p in tmp_path.glob("rank-*.json"))
    assert got == [[0, 2, 0, 2, 0, "mpi4py"], [1, 2, 1, 2, 0, "mpi4py"]]
