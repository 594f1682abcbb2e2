"""hpcbench against a real single-host Grid Engine (tests/cluster/sge-up.sh): the sge template's
job trains on 2 ranks through qsub; status and cancel through qstat/qdel/qacct.

Grid Engine's execd resets PATH even with ``-V``, so the job names its python (``--python``), as a
user would name the cluster's."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.cluster.conftest import TEST_SAMPLES, submitted_id, train_on
from tests.conftest import hpcbench

pytestmark = [pytest.mark.sge]


def test_sge_job_trains_on_two_ranks(sge_cluster, workdir, cluster_data):
    job, metrics = train_on(
        "sge", workdir, cluster_data, "--tasks-per-node", "2", "--python", sys.executable
    )
    assert metrics["run"]["world_size"] == 2 and metrics["run"]["strategy"] == "ddp"
    assert metrics["test"]["samples"] == TEST_SAMPLES
    # qacct's record of it, read when submit --wait saw it end and kept in its run directory
    from hpcbench import api

    record = json.loads((api.job(job).record.run_dir / "accounting.json").read_text())
    assert record["available"] and record["source"] == "qacct (Grid Engine accounting)"
    assert record["job"]["state"] == "COMPLETED" and record["job"]["cpus"] == 2
    assert record["job"]["cpu_time_s"] > 1 and record["job"]["max_vmsize_bytes"] > 100 << 20
    shown = hpcbench("status", "-v", job, "--scheduler", "sge", cwd=workdir).stdout
    assert "  accounting (from qacct (Grid Engine accounting)): COMPLETED exit 0;" in shown


def test_sge_status_and_cancel(sge_cluster, workdir):
    # the job must really sleep (started directly: no torchrun agent, which failed at once from
    # a python without torch; on a busy machine qdel came after its end)
    r = hpcbench("submit", "--scheduler", "sge", "--launcher", "direct", "--program", "sleep 120",
                 "--python", sys.executable, cwd=workdir)  # fmt: skip
    assert r.returncode == 0, r.stderr
    job = submitted_id(r.stdout, "sge")
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
