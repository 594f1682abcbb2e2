"""The five studies' jobs (jobs/<study>/) in their ``--smoke`` form, run to completion on the
test SLURM cluster (two 2-CPU nodes with fake GPUs) — the VUB one through the PBS/Torque
wrappers, its evaluation held by the scheduler until training succeeded — and the reference
study's full matrix checked by preflight against the test partition (2 GPUs per node).

Each job is submitted as a user would, from a directory holding a copy of jobs/, with the
test cluster's small dataset given after ``--``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import TEST_SAMPLES, bench_on_slurm, submitted_id
from tests.conftest import hpcbench, need_module

pytestmark = pytest.mark.slurm
need_module("torch")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def studies(workdir: Path) -> Path:
    shutil.copytree(REPO / "jobs", workdir / "jobs")
    return workdir


def finished(job: str, timeout: float = 600) -> str:
    """Wait until SLURM no longer lists the job; its final state from scontrol."""
    deadline = time.monotonic() + timeout
    while subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True
    ).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} still queued or running"
        time.sleep(1)
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    state = shown.stdout.split("JobState=", 1)[1].split()[0] if "JobState=" in shown.stdout else ""
    return state


def job_time(job: str, field: str) -> str:
    """A finished job's StartTime or EndTime from scontrol (ISO text: compares as time)."""
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    found = re.search(rf"\b{field}=(\S+)", shown.stdout)
    assert found and found.group(1)[:1].isdigit(), shown.stdout + shown.stderr
    return found.group(1)


def submit(cwd: Path, *args: str, env: dict | None = None) -> str:
    r = hpcbench("submit", *args, cwd=cwd, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def run_dir(cwd: Path, job: str) -> Path:
    (found,) = [p for p in (cwd / "runs").glob(f"*-{job}") if p.is_dir()]
    return found


def smoke_run(cwd: Path, spec: str, data: Path) -> tuple[str, dict]:
    """Submit ``spec --smoke`` to SLURM, wait for it; (job id, the trainer's metrics)."""
    out = submit(cwd, spec, "--smoke", "--scheduler", "slurm", "--wait", "--timeout", "500",
                 "--", "--data", str(data))  # fmt: skip
    job = submitted_id(out, "slurm")
    return job, json.loads((run_dir(cwd, job) / "metrics.json").read_text())


def test_marenostrum5_smoke_stages_to_tmpdir_and_logs_tensorboard(
    slurm_cluster, studies, cluster_data
):
    job, metrics = smoke_run(studies, "jobs/marenostrum5/vit.toml", cluster_data)
    assert metrics["run"]["world_size"] == 2 and metrics["test"]["macro_f1"] is not None
    staged = list(Path(f"/run/hpcbench-slurm/tmp/{job}").rglob("*.h5"))
    assert staged, "no shard was staged to the job's TMPDIR"
    assert list((studies / "runs" / "tensorboard").rglob("events.out.tfevents.*"))


def test_vub_smoke_trains_under_qsub_then_the_evaluation_runs_after_it(
    slurm_cluster, torque_wrappers, studies, cluster_data
):
    env = torque_wrappers
    train = submitted_id(
        submit(
            studies,
            "jobs/vub-mpi/train.toml",
            "--smoke",
            "--scheduler",
            "pbs",
            "--",
            "--data",
            str(cluster_data),
            env=env,
        ),
        "pbs",
    )
    evaluate = submitted_id(
        submit(
            studies,
            "jobs/vub-mpi/evaluate.toml",
            "--smoke",
            "--scheduler",
            "pbs",
            "--after",
            train,
            "--",
            "--input",
            str(cluster_data),
            "--checkpoint",
            str(studies / "runs" / f"vub-train-smoke-{train}"),
            env=env,
        ),
        "pbs",
    )
    assert finished(train) == "COMPLETED"
    assert finished(evaluate) == "COMPLETED"
    # the scheduler held the evaluation until the training had ended
    assert job_time(evaluate, "StartTime") >= job_time(train, "EndTime")
    assert (run_dir(studies, train) / "metrics.json").exists()
    report = json.loads((run_dir(studies, evaluate) / "predict.json").read_text())
    assert report["measured"]["items"] == TEST_SAMPLES and report["metrics"]["accuracy"] is not None


def test_herbarium_smoke_trains_over_mpi_then_predicts_after_it(
    slurm_cluster, studies, cluster_data
):
    train_args = ["jobs/herbarium/train.toml", "--smoke", "--scheduler", "slurm", "--"]
    train = submitted_id(submit(studies, *train_args, "--data", str(cluster_data)), "slurm")
    predict_args = ["jobs/herbarium/predict.toml", "--smoke", "--scheduler", "slurm", "--"]
    predict_args += ["--input", str(cluster_data), "--checkpoint"]
    predict_args += [str(studies / "runs" / f"herbarium-train-smoke-{train}")]
    predict = submitted_id(submit(studies, "--after", train, *predict_args), "slurm")
    assert finished(train) == "COMPLETED"
    assert finished(predict) == "COMPLETED"
    metrics = json.loads((run_dir(studies, train) / "metrics.json").read_text())
    assert metrics["run"]["strategy"] == "mpi"
    report = json.loads((run_dir(studies, predict) / "predict.json").read_text())
    assert report["world_size"] == 4 and report["measured"]["items"] == TEST_SAMPLES


def test_a_job_after_a_failed_one_never_runs(slurm_cluster, studies):
    direct = ("--scheduler", "slurm", "--launcher", "direct")  # false and true: no agent
    failed = submitted_id(submit(studies, *direct, "--program", "false", "-J", "fails"), "slurm")
    after = submitted_id(submit(studies, *direct, "--program", "true", "--after", failed), "slurm")
    assert finished(failed) == "FAILED"
    assert finished(after, timeout=120) == "CANCELLED"  # --kill-on-invalid-dep: not left pending


@pytest.mark.parametrize("matrix", ["reference-study", "lab-ai-rnn"])
def test_the_benchmark_matrices_smoke_forms_run_and_report(
    slurm_cluster, studies, cluster_data, matrix
):
    results = bench_on_slurm(
        studies, f"jobs/{matrix}/matrix.toml", "--smoke", "--", "--data", str(cluster_data)
    )
    assert results.name.endswith("-smoke")
    runs = json.loads((results / "runs.json").read_text())
    runs = runs["runs"] if isinstance(runs, dict) else runs
    assert runs and all(run["status"] == "completed" for run in runs), runs
    if matrix == "reference-study":  # it has energy runs: the node's idle power was measured
        assert json.loads((results / "idle.json").read_text())["seconds"] > 0
    r = hpcbench("report", str(results), cwd=studies, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (results / "report" / "report.md").exists()


def test_the_reference_hybrid_smoke_splits_the_batch_by_rank_weights(
    slurm_cluster, studies, cluster_data
):
    _, metrics = smoke_run(studies, "jobs/reference-study/hybrid.toml", cluster_data)
    assert metrics["run"]["batch_sizes"] == [12, 4], metrics["run"]


def test_the_full_reference_matrix_passes_preflight_on_a_two_gpu_partition(
    slurm_cluster, studies, monkeypatch
):
    """Every run of the full matrix (CPU, 1 GPU, 1 GPU + DDP, 2 GPUs) fits the test partition
    (2 GPUs per node); only the CPUs per rank are lowered to the test nodes' 2 cores."""
    from hpcbench.bench.running.matrix import read_matrix
    from hpcbench.bench.running.runner import Bench, plan
    from hpcbench.jobs.schedulers.slurm.cluster import PreflightError, check_slurm

    monkeypatch.chdir(studies)
    matrix = read_matrix("jobs/reference-study/matrix.toml")
    bench = Bench(matrix, "unused")
    seen = set()
    for run in plan(matrix):
        if run.config in seen:
            continue
        seen.add(run.config)
        spec = bench.spec_for(run)
        spec.resources.cpus_per_task = 1
        check_slurm(spec)
    assert seen == {"cpu", "1gpu", "1gpu-ddp", "2gpu-ddp"}
    spec.resources.gpus_per_node = 3
    with pytest.raises(PreflightError, match="GPU"):
        check_slurm(spec)
