"""submitit from the Python API against the real test cluster: the trainer as a function,
one task and two tasks (DDP across the tasks); ``result()`` is the metrics dict.

The test cluster has no accounting database, so submitit's ``sacct`` polls are answered by a
``sacct`` placed first on PATH that adds ``--completion`` — what docs/notebooks.md tells users
without accounting to do."""

from __future__ import annotations

import os
import time

import pytest

from hpcbench import api
from tests.cluster.conftest import TEST_SAMPLES, TRAIN_ARGS, release_requeued
from tests.conftest import have_module, require

pytestmark = [pytest.mark.slurm]


@pytest.fixture
def completion_sacct(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sacct").write_text('#!/bin/sh\nexec /usr/bin/sacct --completion "$@"\n')
    (bindir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def finished(job, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not job.done():
        assert time.monotonic() < deadline, f"submitit job {job.job_id} still {job.state}"
        time.sleep(0.5)


@pytest.mark.parametrize("tasks", [1, 2])
def test_submitit_runs_the_trainer_and_returns_its_metrics(
    slurm_cluster, completion_sacct, cluster_data, tmp_path, tasks
):
    require(have_module("submitit") and have_module("torch"), "submitit and torch")
    spec = api.load_spec(
        None,
        nodes=1,
        gpus_per_node=tasks,
        cpus_per_task=1,
        job_name=f"submitit{tasks}",
        time="00:10:00",
    )
    ex = api.submitit_executor(spec, folder=tmp_path / "submitit" / "%j")
    assert ex.cluster == "slurm"
    job = api.submit_training(
        spec,
        ["--data", str(cluster_data), *TRAIN_ARGS, "--output-dir", str(tmp_path / "run")],
        folder=tmp_path / "submitit" / "%j",
    )
    finished(job)
    metrics = job.result()
    assert metrics["run"]["world_size"] == tasks
    assert metrics["run"]["strategy"] == ("ddp" if tasks > 1 else "single")
    assert metrics["test"]["samples"] == TEST_SAMPLES
    assert (tmp_path / "run" / "metrics.json").exists()
    # submitit's own state comes from sacct: through the --completion shim it reaches COMPLETED
    for _ in range(60):
        if job.submitit_job.get_info(mode="force").get("State") == "COMPLETED":
            break
        time.sleep(0.5)
    assert job.submitit_job.get_info(mode="force").get("State") == "COMPLETED"


def test_submitits_signal_checkpoints_requeues_and_resumes_the_trainer(
    slurm_cluster, completion_sacct, cluster_data, tmp_path
):
    """submitit's checkpointing interface: the signal it asks SLURM for (SIGUSR2) stops the
    trainer after a checkpoint, submitit requeues the job through ``checkpoint()``, and the
    requeued job resumes (``--resume auto``) to the weights of an uninterrupted run."""
    require(have_module("submitit") and have_module("torch"), "submitit and torch")
    import subprocess

    import torch

    from hpcbench.train.checkpoint_file import checkpoint_files, decode
    from tests.integration.test_trainer import env

    spec = api.load_spec(
        None, nodes=1, cpus_per_task=1, job_name="submitit-requeue", time="00:10:00",
        variables={"HPCBENCH_STEP_DELAY": "0.3"},  # the slow-step drill: still running when signalled
    )  # fmt: skip
    trainer = ["--data", str(cluster_data), "--model", "small_cnn", "--epochs", "2"]
    trainer += ["--max-steps", "9", "--global-batch-size", "16", "--checkpoint-every", "3"]
    run = tmp_path / "run"
    job = api.submit_training(
        spec, [*trainer, "--output-dir", str(run)], folder=tmp_path / "submitit" / "%j"
    )
    deadline = time.monotonic() + 180
    while not (run / "checkpoints" / "ckpt-3.pt").exists():
        assert time.monotonic() < deadline and not job.done()
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True)
    release_requeued(job.job_id)
    finished(job)
    metrics = job.result()
    assert metrics["checkpoints"]["resumed_from"] is not None
    reference = tmp_path / "reference"
    r = subprocess.run(
        ["python", "-m", "hpcbench.train", *trainer, "--output-dir", str(reference)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    (_, a), (_, b) = (checkpoint_files(d / "checkpoints")[0] for d in (reference, run))
    wa, wb = decode(a)["model"], decode(b)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (reference / "steps.csv").read_text() == (run / "steps.csv").read_text()


def test_a_submitit_job_after_a_failed_job_never_runs(slurm_cluster, completion_sacct, tmp_path):
    """``scheduler.after`` (``--after``) reaches submitit's sbatch as an afterok dependency with
    --kill-on-invalid-dep: after a failed job the function is never run; submitit's local
    executor cannot wait for a job and says so."""
    require(have_module("submitit"), "submitit")
    import subprocess

    from hpcbench.jobs.spec import SpecError
    from tests.conftest import hpcbench

    r = hpcbench(  # srun: false imports no torch, and torchrun's agent would
        "submit", "--scheduler", "slurm", "--launcher", "srun", "--program", "false", cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout + r.stderr
    failed = r.stdout.split("submitted job ", 1)[1].split()[0]
    spec = api.load_spec(None, nodes=1, job_name="after-failed", time="00:05:00", after=[failed])
    ex = api.submitit_executor(spec, folder=tmp_path / "submitit" / "%j")
    marker = tmp_path / "ran"
    job = ex.submit(marker.touch)
    deadline = time.monotonic() + 120
    state = ""
    while time.monotonic() < deadline:
        shown = subprocess.run(
            ["scontrol", "show", "job", job.job_id], capture_output=True, text=True
        ).stdout
        state = shown.split("JobState=", 1)[1].split()[0] if "JobState=" in shown else ""
        if state in ("CANCELLED", "COMPLETED", "FAILED"):
            break
        time.sleep(1)
    assert state == "CANCELLED" and not marker.exists(), shown
    with pytest.raises(SpecError, match="scheduler.after"):
        api.submitit_executor(spec, folder=tmp_path / "local", cluster="debug")
