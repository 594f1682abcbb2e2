"""``hpcbench bench`` on the real two-node SLURM test cluster: each run its own sbatch job
(single, DDP across both nodes, MPI ranks started by srun), results collected into one directory."""

from __future__ import annotations

import csv
import json

import pytest

from tests.cluster.conftest import TRAIN_ARGS, bench_on_slurm
from tests.conftest import have_module, hpcbench, own_training_example, require

pytestmark = pytest.mark.slurm


def test_a_matrix_runs_as_slurm_jobs(slurm_cluster, workdir, cluster_data):
    require(have_module("torch") and have_module("mpi4py"), "torch and mpi4py")
    (workdir / "m.toml").write_text(
        f"""name = "cluster"
repetitions = 1
trainer_args = {json.dumps(["--data", str(cluster_data), *TRAIN_ARGS])}

[[config]]
name = "single"
strategy = "single"

[[config]]
name = "ddp-2n"
strategy = "ddp"
nodes = 2

[[config]]
name = "mpi-2n"
strategy = "mpi"
nodes = 2
launcher = "srun"
"""
    )
    # SLURM samples a job's memory every 2 s here (JobAcctGatherFrequency=task=2): the slow-step
    # drill keeps each run's ranks alive through a few samples (a single run of 4 steps ends
    # within one second, before the first, and then sacct has no MaxRSS to give)
    results = bench_on_slurm(workdir, "m.toml", timeout=900, env={"HPCBENCH_STEP_DELAY": "1"})
    assert results == workdir / "runs" / "bench-cluster"
    runs = json.loads((results / "runs.json").read_text())["runs"]
    assert [(x["config"], x["status"], x["scheduler"]) for x in runs] == [
        ("single", "completed", "slurm"),
        ("ddp-2n", "completed", "slurm"),
        ("mpi-2n", "completed", "slurm"),
    ]
    for run in runs:
        metrics = json.loads((results / run["run_dir"] / "metrics.json").read_text())
        assert metrics["provenance"]["job_id"] == run["job_id"]
        if run["config"] != "single":
            assert metrics["run"]["world_size"] == 2
            assert metrics["provenance"]["nodelist"] == "node[1-2]"
    rep = hpcbench("report", str(results), cwd=workdir, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    md = (results / "report" / "report.md").read_text()
    assert "| mpi-2n |" in md and "node[1-2]" in md  # the hosts the ranks saw, in the provenance
    # what slurmdbd recorded of each run's job: its state, queue wait and memory high-water
    assert "## What the scheduler recorded" in md and "sacct (SLURM accounting)" in md
    with (results / "report" / "tables" / "accounting.csv").open() as f:
        rows = {row["config"]: row for row in csv.DictReader(f)}
    for name in ("single", "ddp-2n", "mpi-2n"):
        row = rows[name]
        assert row["available"] == "True" and row["states"] == "COMPLETED=1", row
        assert 0 <= float(row["queue_wait_s_median"]) < 300
        assert float(row["max_rss_bytes_median"]) > 20 << 20  # a rank's torch, at its peak
        assert f"| {name} | 1 | COMPLETED 1 |" in md


def test_the_own_training_example_is_measured_across_two_nodes_under_srun(slurm_cluster, workdir):
    """jobs/own-training's script (its own model, ImageFolder) as any program in a matrix, its
    mpi4py loop's ranks srun's tasks on both nodes: each learns its place from srun (PMI-2 or
    SLURM's variables), and rank 0 gathers the others' records through mpi4py."""
    require(have_module("torch") and have_module("mpi4py"), "torch and mpi4py")
    own_training_example(workdir, per_class=20)
    (workdir / "m.toml").write_text(
        'name = "own"\nrepetitions = 1\nprogram = { script = "jobs/own-training/train.py" }\n'
        'program_args = ["--data", "data/own-images", "--epochs", "1", "--size", "16"]\n'
        '[[config]]\nname = "mpi-2n"\nstrategy = "mpi"\nnodes = 2\nlauncher = "srun"\n'
    )
    results = bench_on_slurm(workdir, "m.toml", timeout=600)
    (run,) = json.loads((results / "runs.json").read_text())["runs"]
    assert (run["status"], run["scheduler"]) == ("completed", "slurm"), run
    metrics = json.loads((results / run["run_dir"] / "metrics.json").read_text())
    assert metrics["provenance"]["launcher"] in ("slurm", "mpich")
    assert metrics["provenance"]["nodelist"] == "node[1-2]"
    assert (metrics["run"]["world_size"], metrics["run"]["strategy"]) == (2, "mpi")
    assert {r["host"] for r in metrics["ranks"]} and metrics["warnings"] == []
    assert metrics["provenance"]["job_id"] == run["job_id"]
