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
from tests.cluster.conftest import TEST_SAMPLES, TRAIN_ARGS
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
