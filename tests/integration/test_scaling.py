"""The scaling model's calibration with real MPI and real torch.distributed (gloo), read back by
``hpcbench predict-scaling``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import have_module, mpiexec_available, need_module, require
from tests.integration.test_trainer import env

need_module("torch")


@pytest.mark.mpi
def test_a_calibration_over_three_ranks_times_compute_and_both_libraries(tmp_path):
    require(mpiexec_available() and have_module("mpi4py"), "mpiexec and mpi4py")
    out = tmp_path / "calibration.json"
    r = subprocess.run(
        ["mpiexec", "-n", "3", sys.executable, "-m", "hpcbench.scaling", "--model", "mlp:32",
         "--shape", "1x16x16", "--classes", "4", "--batches", "16,4", "--steps", "3",
         "--backends", "mpi,gloo", "--threads", "1", "--device", "cpu", "--out", str(out)],
        env=env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads(out.read_text())
    machine = record["machine"]
    assert machine["ranks"] == 3 and machine["nodes"] == 1 and machine["threads_per_rank"] == 1
    assert record["compute"]["batches"] == [16, 4] and min(record["compute"]["step_s"]) > 0
    from hpcbench.scaling.calibrate import sizes_up_to

    sizes = sizes_up_to(sum(record["parameter_bytes"]))
    assert sizes[0] == 4 and sizes[-1] == sum(record["parameter_bytes"]) > 1024
    for backend in ("mpi", "gloo"):
        rows = record["allreduce"][backend]
        assert {(p, n) for p, n, _ in rows} == {(p, n) for p in (2, 3) for n in sizes}
        assert all(t > 0 for _, _, t in rows)
    p = subprocess.run(
        [sys.executable, "-m", "hpcbench", "predict-scaling", str(out), "--ranks", "2,3,16"],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "(mpi, 3 rank(s)/node)" in p.stdout and "(ddp, 3 rank(s)/node)" in p.stdout


def test_one_rank_cannot_calibrate_and_says_so(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "hpcbench.scaling", "--out", str(tmp_path / "c.json")],
        env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "hpcbench.scaling: needs at least 2 ranks (mpiexec -n 2 or more)"
    ]
    assert not (tmp_path / "c.json").exists()
