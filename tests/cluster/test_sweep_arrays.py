"""Sweeps as ONE array job on the real SLURM test cluster, and profiles written from what it says.

The reference study's sweep, in its smoke form, runs its settings as tasks of one
``sbatch --array=1-N%P`` job: the cap is what
``squeue`` shows (at most P running, the rest pending with JobArrayTaskLimit); ``hpcbench status``
takes the array and single tasks; a pending task is cancelled alone; a running task requeued by
hand (``scontrol requeue ARRAY_TASK``) resumes from its own checkpoint in its own run directory;
the same command then continues the sweep and ``--retry-failed`` runs the cancelled task again.
On Grid Engine the same sweep is one ``qsub -t 1-N -tc P`` job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import release_requeued
from tests.cluster.test_requeue_slurm import wait_for
from tests.conftest import REPO, hpcbench, need_module

need_module("torch")

TRAINER = ["--epochs", "2", "--max-steps", "6", "--global-batch-size", "16", "--eval-batch-size",
           "64", "--checkpoint-every", "2", "--progress", "lines", "--model", "small_cnn"]  # fmt: skip


def sweep_file(workdir: Path, data: Path, job: str | None = None) -> Path:
    path = workdir / "s.toml"
    lines = [f"trainer_args = {json.dumps([*TRAINER, '--data', str(data)])}", "max_parallel = 1"]
    if job:
        lines.append(f"job = {json.dumps(job)}")
    lines.append("[axes]\nlr = [0.01, 0.05, 0.1]")
    path.write_text("\n".join(lines) + "\n")
    return path


def squeue(*args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", "--array", *args, "-o", "%i %T %r"],
                         capture_output=True, text=True).stdout  # fmt: skip
    return [line.split(None, 2) for line in out.splitlines()]


# The reference sweep's smoke form, each task made long enough to be requeued mid-run: a tiny
# model slowed by the slow-step drill (the job's HPCBENCH_STEP_DELAY, 0.3 s a step), 2 epochs of
# 15 steps, a checkpoint every 3 steps (single-valued axes add options without adding settings).
LONGER = ["--axis", "model=small_cnn", "--axis", "max-steps=15", "--axis", "checkpoint-every=3"]
EXTRA = ",model=small_cnn,max-steps=15,checkpoint-every=3"


@pytest.mark.slurm
def test_the_reference_sweep_is_one_slurm_array_capped_cancelled_requeued_and_continued(
    slurm_cluster, workdir, cluster_data
):
    shutil.copytree(REPO / "jobs", workdir / "jobs")
    for name in ("shapes", "shapes-74x56"):  # the two datasets its smoke form sweeps over
        shutil.copytree(cluster_data, workdir / "data" / name)
    results = workdir / "runs" / "sweep-reference-hparams-smoke"
    cmd = ["sweep", "jobs/reference-study/sweep.toml", "--smoke", "--scheduler", "slurm", *LONGER]
    # sbatch passes the submitter's environment on (--export=ALL, its default): the drill too
    r = hpcbench(*cmd, "--no-wait", cwd=workdir, env={"HPCBENCH_STEP_DELAY": "0.3"})
    assert r.returncode == 0 and "submitted 4 task(s) as array job" in r.stdout, r.stdout + r.stderr
    (sub,) = json.loads((results / "submissions.json").read_text())["submissions"]
    array, tasks = sub["job_id"], sub["task_ids"]
    assert tasks == [f"{array}_{k}" for k in (1, 2, 3, 4)]
    assert "#SBATCH --array=1-4%2\n" in Path(sub["script"]).read_text()

    # the cap, as squeue shows it: two tasks run, the others wait for the array's limit
    rows = wait_for(
        lambda: (rows := squeue("-j", array)) and sum(r[1] == "RUNNING" for r in rows) == 2 and rows
    )
    assert all(r[2] == "JobArrayTaskLimit" for r in rows if r[1] == "PENDING"), rows
    status = hpcbench("status", array, cwd=workdir).stdout
    assert f"{array}_4\tPENDING" in status and f"{array}\tRUNNING\t2 of 4 tasks running" in status
    one = hpcbench("status", f"{array}_4", cwd=workdir).stdout
    assert one.strip().startswith(f"{array}_4\tPENDING"), one

    # a pending task cancelled alone
    assert hpcbench("cancel", f"{array}_4", cwd=workdir).returncode == 0
    wait_for(
        lambda: not squeue("-j", f"{array}_4") or squeue("-j", f"{array}_4")[0][1] != "PENDING"
    )

    # task 1, once running and checkpointed, requeued by hand: it resumes in its own directory
    run1 = results / "runs" / ("data=shapes,global-batch-size=16" + EXTRA)
    wait_for(
        lambda: (run1 / "checkpoints").is_dir() and any((run1 / "checkpoints").glob("ckpt-*.pt"))
    )
    subprocess.run(["scontrol", "requeue", f"{array}_1"], check=True)
    release_requeued(f"{array}_1")

    follow = hpcbench(*cmd, cwd=workdir, timeout=600)
    assert follow.returncode == 1, follow.stdout + follow.stderr  # the cancelled task failed
    assert "3 completed, 1 failed" in follow.stdout, follow.stdout
    # squeue drops a pending task cancelled before it was split from its array at once, and
    # this cluster keeps no accounting: the task is failed, saying it is gone
    last = "data=shapes-74x56,global-batch-size=32" + EXTRA
    assert f"failed: {last} (task {array}_4): " in follow.stdout, follow.stdout
    # the sweep counts a task done once its metrics.json is written; its log is whole once the
    # task's job has ended (torchrun passes the trainer's lines on as it ends)
    wait_for(lambda: not squeue("-j", f"{array}_1"), every=1)
    out1 = (results / "logs" / f"sweep-reference-hparams-{array}_1.out").read_text()
    assert "resuming from" in out1 and "ckpt-" in out1, out1
    metrics = json.loads((run1 / "metrics.json").read_text())
    assert metrics["run"]["global_batch"] == 16 and metrics["run"]["model"] == "small_cnn"
    assert not (results / "runs" / last).exists()  # the cancelled task never started

    retried = hpcbench(*cmd, "--retry-failed", cwd=workdir, timeout=600)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "submitted 1 task(s)" in retried.stdout and "4 completed" in retried.stdout
    report = hpcbench("report", str(results), cwd=workdir, timeout=300)
    assert report.returncode == 0, report.stderr
    ranking = (results / "report" / "tables" / "ranking.csv").read_text().splitlines()
    assert len(ranking) == 5


@pytest.mark.slurm
def test_profile_init_writes_what_the_cluster_says(slurm_cluster, workdir, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(workdir / "config"))
    r = hpcbench("profile", "init", "testcl", "--scheduler", "slurm", cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    written = workdir / "config" / "hpcbench" / "profiles.toml"
    from hpcbench.jobs.profiles import read_profiles

    profile = read_profiles(written)["testcl"]
    shown = subprocess.run(["scontrol", "show", "node", "-o", "node1"], capture_output=True,
                           text=True).stdout  # fmt: skip
    cpus = int(shown.split("CPUTot=", 1)[1].split()[0])
    assert profile["scheduler"] == "slurm" and profile["partition"] == "debug"
    assert profile["gpus_per_node"] == 2 and profile["cores_per_node"] == cpus
    assert isinstance(profile["sacct"], bool)
    assert "# partition debug: 2 node(s)" in written.read_text()
    again = hpcbench("profile", "init", "testcl", "--scheduler", "slurm", cwd=workdir)
    assert again.returncode == 2 and "exists already" in again.stderr
    rendered = hpcbench("render", "--profile", "testcl", cwd=workdir).stdout
    assert "#SBATCH --partition=debug\n" in rendered and "#SBATCH --gres=gpu:2\n" in rendered
    bad = hpcbench("profile", "init", "x", "--scheduler", "slurm", "--partition", "nope",
                   cwd=workdir)  # fmt: skip
    assert bad.returncode == 1 and "partition 'nope' does not exist" in bad.stderr


@pytest.mark.sge
def test_a_sweep_is_one_grid_engine_array(sge_cluster, workdir, cluster_data):
    job = workdir / "job.toml"  # Grid Engine's execd resets PATH: the job names its python
    job.write_text(f"[program]\npython = {json.dumps(sys.executable)}\n")
    sweep = sweep_file(workdir, cluster_data, str(job))
    sweep.write_text(sweep.read_text().replace("[0.01, 0.05, 0.1]", "[0.01, 0.05]"))
    results = workdir / "r"
    r = hpcbench("sweep", str(sweep), "--results", str(results), "--scheduler", "sge",
                 cwd=workdir, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (sub,) = json.loads((results / "submissions.json").read_text())["submissions"]
    script = Path(sub["script"]).read_text()
    assert "#$ -t 1-2\n" in script and "#$ -tc 1\n" in script
    assert sub["task_ids"] == [f"{sub['job_id']}.1", f"{sub['job_id']}.2"]

    # the sweep counts a task done once its metrics.json is written; Grid Engine says so a moment
    # later, when the task's script has ended
    def task_2_completed() -> bool:
        shown = hpcbench("status", sub["job_id"], "--scheduler", "sge", cwd=workdir).stdout
        return f"{sub['job_id']}.2\tCOMPLETED" in shown

    wait_for(task_2_completed, every=1)
    for run in ("lr=0.01", "lr=0.05"):
        metrics = json.loads((results / "runs" / run / "metrics.json").read_text())
        assert metrics["config"]["lr"] == float(run.split("=")[1])


@pytest.mark.slurm
def test_an_array_larger_than_the_cluster_allows_is_refused_before_anything_is_queued(
    slurm_cluster, workdir
):
    from hpcbench.jobs.schedulers.slurm.cluster import PreflightError
    from hpcbench.jobs.spec import Array
    from hpcbench.jobs.spec_load import build_spec
    from hpcbench.jobs.submission import submit

    spec = build_spec({"program": {"command": ["true"]}})
    spec.array = Array(1001, str(workdir / "tasks"), str(workdir / "runs"))
    with pytest.raises(PreflightError, match=r"1001 tasks: this cluster allows at most 1000"):
        submit(spec, "slurm", cwd=workdir)
    assert not (workdir / "runs").exists()  # no script copy, nothing queued
    # a sweep of as many tasks writes nothing either: no sweep.json, no task files
    sweep = workdir / "big.toml"
    sweep.write_text('trainer_args = ["--epochs", "1"]\n')
    seeds = ",".join(str(k) for k in range(1001))
    r = hpcbench("sweep", str(sweep), "--scheduler", "slurm", "--axis", f"seed={seeds}",
                 cwd=workdir)  # fmt: skip
    assert r.returncode == 1 and "1001 tasks: this cluster allows at most 1000" in r.stderr
    assert not (workdir / "runs").exists(), list((workdir / "runs").rglob("*"))[:5]
