"""SLURM's own accounting, read for real: the test cluster's slurmdbd and MariaDB
(tests/cluster/slurm-up.sh) answer ``sacct`` as a production cluster's do. A two-node job's
record (queue wait, elapsed, MaxRSS per step, state, exit code, CPU efficiency) is read once
when ``submit --wait`` sees it end, kept as accounting.json in its run directory, and shown by
``status --verbose`` and ``api.job(...).accounting()``; this cluster gathers no energy (no
RAPL here), so the record says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from hpcbench import api
from hpcbench.jobs.accounting.reading import read_accounting
from tests.cluster.conftest import train_on
from tests.conftest import have_module, hpcbench, require

pytestmark = pytest.mark.slurm


def test_a_finished_jobs_accounting_is_read_once_and_kept(slurm_cluster, workdir, cluster_data):
    require(have_module("torch"), "torch")
    # slurm-up.sh started slurmdbd: sacct answers (it refuses on a cluster without)
    answer = subprocess.run(["sacct", "-n", "-X", "-S", "now"], capture_output=True, text=True)
    assert answer.returncode == 0, answer.stderr
    # the slow-step drill keeps the ranks alive through SLURM's memory samples (every 2 s here)
    env = {"HPCBENCH_STEP_DELAY": "0.5"}
    job_id, _ = train_on("slurm", workdir, cluster_data, "--nodes", "2", env=env)
    run_dir = api.job(job_id).record.run_dir
    record = json.loads((run_dir / "accounting.json").read_text())
    assert record["available"] and record["source"] == "sacct (SLURM accounting)"
    job = record["job"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    assert job["nodes"] == 2 and job["nodelist"] == "node[1-2]"
    assert job["queue_wait_s"] is not None and 0 <= job["queue_wait_s"] < 300
    assert job["elapsed_s"] >= 1 and job["cpu_time_s"] > 0
    assert 0 < job["cpu_efficiency"] <= 1.0
    # the trainer's ranks (torch and all) hold far more than 20 MiB at their peak
    assert job["max_rss_bytes"] > 20 << 20
    steps = {s["step"]: s for s in record["steps"]}
    assert {"batch", "0"} <= set(steps)  # the batch script, and srun starting the nodes
    assert max(s["max_rss_bytes"] or 0 for s in steps.values()) == job["max_rss_bytes"]
    if os.path.exists("/sys/class/powercap/intel-rapl"):
        assert job["energy_j"] is not None
    else:
        assert job["energy_j"] is None
        assert record["energy_reason"] == (
            "this cluster gathers no energy (AcctGatherEnergyType = acct_gather_energy/none)"
        )

    # read once: status --verbose and the API use the kept record, sacct is not asked again
    bindir = workdir / "recorders"
    bindir.mkdir()
    log = workdir / "sacct.calls"
    real = shutil.which("sacct")
    (bindir / "sacct").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec {real} "$@"\n')
    (bindir / "sacct").chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = hpcbench("status", "--verbose", job_id, cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{job_id}\tCOMPLETED")
    assert lines[1].startswith("  accounting (from sacct (SLURM accounting)): COMPLETED exit 0;")
    assert "on node[1-2]" in lines[1]
    assert any(line.startswith("    memory: high-water ") for line in lines)
    # what the job used of what it asked for, from slurmdbd's own figures
    cpus = record["job"]["cpus"]
    used = record["job"]["cpu_time_s"] / record["job"]["elapsed_s"]
    assert f"    used: asked for {cpus} CPUs, used {used:.1f} on average" in r.stdout, r.stdout
    assert not log.exists()
    assert api.job(job_id).accounting() == record

    # sacct's answer, as hpcbench reads it, for the recorded outputs (tests/unit/recorded)
    again = read_accounting("slurm", job_id)
    assert again["job"] == record["job"]


def test_status_verbose_of_a_job_hpcbench_did_not_submit(slurm_cluster, workdir):
    """A job submitted by hand: its accounting is printed, nothing is written anywhere."""
    done = subprocess.run(
        ["sbatch", "--parsable", "--wrap", "sleep 1", "-o", str(workdir / "o")],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    job_id = done.stdout.strip()
    for _ in range(60):
        r = hpcbench("status", "-v", job_id, "--scheduler", "slurm", cwd=workdir)
        if "COMPLETED" in r.stdout.splitlines()[0]:
            break
        time.sleep(1)
    assert "accounting (from sacct (SLURM accounting)): COMPLETED exit 0" in r.stdout, r.stdout
    assert sorted(p.name for p in workdir.iterdir()) == ["o"]
