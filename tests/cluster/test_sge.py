"""hpcbench against a real single-host Grid Engine (tests/cluster/sge-up.sh): the sge template's
job trains on 2 ranks through qsub; status and cancel through qstat/qdel/qacct.

Grid Engine's execd resets PATH even with ``-V``, so the job names its python (``--python``), as a
user would name the cluster's."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import hpcbench

pytestmark = [pytest.mark.slurm]
TRAIN = [
    "--epochs",
    "1",
    "--max-steps",
    "4",
    "--global-batch-size",
    "16",
    "--eval-batch-size",
    "64",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from data_prep import ConvertOptions, convert, synthetic

    root = tmp_path_factory.mktemp("sgedata") / "shapes"
    convert(synthetic(450, 9), root, ConvertOptions(size=(16, 16), grayscale=True, progress=False))
    return root


def job_id_and_run_dir(stdout: str) -> tuple[str, Path]:
    job = re.search(r"submitted job (\S+) to sge", stdout)
    run_dir = re.search(r"run directory: (.+)", stdout)
    assert job and run_dir, stdout
    return job.group(1), Path(run_dir.group(1).strip())


def test_sge_job_trains_on_two_ranks(sge_cluster, workdir, data):
    r = hpcbench(
        "submit",
        "--scheduler",
        "sge",
        "--tasks-per-node",
        "2",
        "--python",
        sys.executable,
        "--wait",
        "--timeout",
        "300",
        "--",
        "--data",
        str(data),
        *TRAIN,
        cwd=workdir,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    _, run_dir = job_id_and_run_dir(r.stdout)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["run"]["world_size"] == 2 and metrics["run"]["strategy"] == "ddp"
    assert metrics["test"]["samples"] == 54


def test_sge_status_and_cancel(sge_cluster, workdir):
    r = hpcbench("submit", "--scheduler", "sge", "--program", "sleep 120", cwd=workdir)
    assert r.returncode == 0, r.stderr
    job, _ = job_id_and_run_dir(r.stdout)
    state = ""
    for _ in range(100):
        state = hpcbench("status", job, "--scheduler", "sge", cwd=workdir).stdout
        if "RUNNING" in state:
            break
        time.sleep(0.2)
    assert state.startswith(f"{job}\tRUNNING"), state
    assert hpcbench("cancel", job, "--scheduler", "sge", cwd=workdir).returncode == 0
    for _ in range(150):
        state = hpcbench("status", job, "--scheduler", "sge", cwd=workdir).stdout
        # just after qdel the job has left qstat and may not be in the accounting file yet
        if not any(s in state for s in ("RUNNING", "PENDING", "UNKNOWN")):
            break
        time.sleep(0.2)
    assert state.startswith(f"{job}\tCANCELLED") and "deleted with qdel" in state, state
