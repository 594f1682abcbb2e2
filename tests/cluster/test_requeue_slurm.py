"""Time limits, preemption and requeue on the real SLURM test cluster (two slurmd nodes).

Each interrupted job runs the trainer with periodic checkpoints; it is stopped the way SLURM stops
jobs (the batch shell's warning signal, ``scontrol requeue``, a real time limit), requeued by the
rendered script, resumed by ``--resume auto``, and must end with the weights and per-step losses
of an uninterrupted run of the same configuration. SLURM holds a requeued job for the job
credential's lifetime before it may start again (120 s by default; the test cluster sets 10 s).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import release_requeued, submitted_id
from tests.conftest import hpcbench, need_module

torch = need_module("torch")

# A tiny model made slow by the slow-step drill (0.3 s before every step): signalled mid-run
# every time, with checkpoints of a few kilobytes.
SLOW_STEP = ("--env", "HPCBENCH_STEP_DELAY=0.3")
TRAINER = [
    "--model",
    "small_cnn",
    "--epochs",
    "3",
    "--max-steps",
    "9",
    "--global-batch-size",
    "16",
    "--eval-batch-size",
    "128",
    "--checkpoint-every",
    "3",
    "--progress",
    "lines",
]
STEPS = 27


def submit(
    workdir: Path, data: Path, *flags: str, trainer: tuple[str, ...] = (), path: str = ""
) -> str:
    r = hpcbench(
        "submit",
        "--scheduler",
        "slurm",
        "--nodes",
        "2",
        *SLOW_STEP,
        *flags,
        "--",
        "--data",
        str(data),
        *TRAINER,
        *trainer,
        cwd=workdir,
        env={"PATH": f"{path}{os.pathsep}{os.environ['PATH']}"} if path else None,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return submitted_id(r.stdout, "slurm")


def slow_controller(workdir: Path) -> str:
    """A directory whose ``scontrol`` answers a requeue late, as a busy controller does: the job
    is requeued at once, and SLURM stops the job's processes (this command among them) before
    the answer comes. The job's batch script then sees its ``scontrol requeue`` fail."""
    real = shutil.which("scontrol")
    bindir = workdir / "slow-controller"
    bindir.mkdir()
    (bindir / "scontrol").write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = requeue ]; then {real} "$@" || exit; sleep 30; exit 0; fi\n'
        f'exec {real} "$@"\n'
    )
    (bindir / "scontrol").chmod(0o755)
    return str(bindir)


def reference_run(data: Path, out: Path, strategy: str, *trainer: str) -> Path:
    """The uninterrupted run, on this machine with mpiexec or torchrun (the same library and
    the same two-rank sums as under srun; run here so as not to share the test cluster's two
    small nodes with the job under test)."""
    from tests.integration.test_trainer import env, launch

    r = subprocess.run(
        launch(strategy, 2, ["-m", "hpcbench.train"])
        + ["--data", str(data), *TRAINER, *trainer, "--output-dir", str(out)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def run_dir(workdir: Path, job: str) -> Path:
    (found,) = list((workdir / "runs").glob(f"*-{job}"))
    return found


def wait_for(what, timeout: float = 180, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while not (value := what()):
        assert time.monotonic() < deadline, f"timed out waiting for {what.__doc__ or what}"
        time.sleep(every)
    return value


def state(job: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True
    ).stdout.strip()
    return out


def finish(workdir: Path, job: str) -> None:
    wait_for(lambda: state(job) == "", timeout=300)  # squeue lists it until it has ended
    log = (workdir / "runs" / f"hpcbench-{job}.out").read_text()
    err = (workdir / "runs" / f"hpcbench-{job}.err").read_text()
    assert "results:" in log, log + err


def final(run: Path) -> tuple[dict, str]:
    from hpcbench.train.checkpoint_file import checkpoint_files, decode

    (steps, path), *_ = checkpoint_files(run / "checkpoints")
    assert steps == STEPS
    return decode(path)["model"], (run / "steps.csv").read_text()


def assert_equal_runs(a: Path, b: Path) -> None:
    (wa, la), (wb, lb) = final(a), final(b)
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert la == lb


def requeues(run: Path) -> list[str]:
    path = run / "control" / "requeues"
    return path.read_text().split() if path.exists() else []


LAUNCHES = {
    "ddp under torchrun under srun": (("--launcher", "torchrun"), ("--strategy", "ddp")),
    "mpi under srun": (("--launcher", "srun"), ("--strategy", "mpi")),
}
# The other tests here run ddp under torchrun under srun (the launch the requeue tests prove with
# both strategies above).


@pytest.mark.parametrize("how", LAUNCHES)
def test_the_time_limit_signal_and_a_requeue_by_hand_both_resume_bit_exactly(
    slurm_cluster, workdir, cluster_data, how
):
    """One job stopped twice: by the warning signal SLURM sends ahead of the time limit
    (requeued by the script), then by ``scontrol requeue`` by hand (SIGTERM first: the ranks
    checkpoint as on a preemption); it ends with the weights of an uninterrupted run. The
    script's own requeue meets a controller that answers late (SLURM stops the command with the
    job): it must not resubmit the job that SLURM requeued."""
    flags, trainer = LAUNCHES[how]
    job = submit(workdir, cluster_data, *flags, trainer=trainer, path=slow_controller(workdir))
    run = wait_for(lambda: list((workdir / "runs").glob(f"*-{job}")))[0]
    wait_for(lambda: (run / "checkpoints" / "ckpt-3.pt").exists())
    # what `#SBATCH --signal=B:USR2@lead` makes SLURM do ahead of the time limit
    subprocess.run(["scancel", "--batch", "--signal=USR2", job], check=True)
    release_requeued(job)
    wait_for(lambda: (run / "checkpoints" / "ckpt-9.pt").exists(), timeout=300)
    subprocess.run(["scontrol", "requeue", job], check=True)
    release_requeued(job)
    finish(workdir, job)
    reference = reference_run(cluster_data, workdir / "reference", trainer[1], *trainer)
    log = (workdir / "runs" / f"hpcbench-{job}.err").read_text()
    assert "stopped after a checkpoint (timelimit): requeue 1 of at most 3" in log, log
    assert "requeued (scontrol requeue" in log, log
    assert "was requeued by SLURM (by hand or on a preemption)" in log, log
    # requeued once, by SLURM: not requeued again nor resubmitted by the script (two copies of
    # the job would train into one run directory)
    assert "resubmitted" not in log and not (run / "control" / "continued-as").exists(), log
    assert requeues(run) == ["timelimit", "restart"], requeues(run)
    out = (workdir / "runs" / f"hpcbench-{job}.out").read_text()
    assert len(re.findall(r"resuming from .*ckpt-\d+\.pt", out)) >= 2, out
    assert_equal_runs(reference, run)


def test_a_job_that_raises_is_not_requeued(slurm_cluster, workdir, cluster_data):
    from hpcbench import api

    flags, trainer = LAUNCHES["ddp under torchrun under srun"]
    job = submit(workdir, cluster_data, *flags, "--env", "HPCBENCH_FAIL_AT=1:4", trainer=trainer)
    with pytest.raises(api.JobFailed, match="failure drill"):
        api.job(job, scheduler="slurm").result(timeout=300)
    run = run_dir(workdir, job)
    assert requeues(run) == ["failure"]
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    assert "Restarts=0" in shown.stdout, shown.stdout


def test_the_requeue_cap_holds(slurm_cluster, workdir, cluster_data):
    """With at most 0 requeues the warning signal still stops the job after a checkpoint, and
    the script says why it does not requeue."""
    flags, trainer = LAUNCHES["ddp under torchrun under srun"]
    job = submit(workdir, cluster_data, *flags, "--max-requeues", "0", trainer=trainer)
    run = wait_for(lambda: list((workdir / "runs").glob(f"*-{job}")))[0]
    wait_for(lambda: (run / "control" / "ready").exists())
    subprocess.run(["scancel", "--batch", "--signal=USR2", job], check=True)
    wait_for(lambda: state(job) == "", timeout=300)
    log = (workdir / "runs" / f"hpcbench-{job}.err").read_text()
    assert "not requeued: 0 of at most 0 requeues done (time limit 0" in log, log
    assert requeues(run) == []
    assert (run / "control" / "stopped").exists()
    from hpcbench.train.checkpoint_file import checkpoint_files, decode

    (_, newest), *_ = checkpoint_files(run / "checkpoints")
    decode(newest)
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    assert "Restarts=0" in shown.stdout, shown.stdout


def node_processes(job: str, node_id: str) -> list[int]:
    """The job's processes on one node (the two test nodes share this host's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in environ and (
            f"SLURM_NODEID={node_id}".encode() in environ
        ):
            found.append(int(entry.name))
    return found


def test_a_nodes_processes_killed_mid_run_end_the_job_naming_the_rank_and_resume_finishes(
    slurm_cluster, workdir, cluster_data
):
    import os
    import signal

    flags, trainer = LAUNCHES["ddp under torchrun under srun"]
    job = submit(workdir, cluster_data, *flags, "--no-requeue", trainer=trainer)
    run = wait_for(lambda: list((workdir / "runs").glob(f"*-{job}")))[0]
    wait_for(lambda: (run / "checkpoints" / "ckpt-6.pt").exists())
    for pid in node_processes(job, "1"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: state(job) == "", timeout=180)  # it ends (KillWait is 30 s), never hangs
    logs = hpcbench("logs", job, cwd=workdir)
    assert "first failing rank 1:" in logs.stdout, logs.stdout
    from hpcbench.train.checkpoint_file import checkpoint_files, decode

    for _, path in checkpoint_files(run / "checkpoints"):
        decode(path)  # the checkpoints written before the kill are intact
    again = submit(
        workdir,
        cluster_data,
        *flags,
        "--no-requeue",
        trainer=(*trainer, "--resume", "auto", "--checkpoint-dir", str(run / "checkpoints")),
    )
    finish(workdir, again)
    out = (workdir / "runs" / f"hpcbench-{again}.out").read_text()
    assert "resuming from" in out, out
    reference = reference_run(cluster_data, workdir / "reference", "ddp", *trainer)
    from hpcbench.train.checkpoint_file import checkpoint_files

    wa, la = final(reference)
    (steps, newest), *_ = checkpoint_files(run / "checkpoints")  # where the resumed job wrote
    assert steps == STEPS
    wb = decode(newest)["model"]
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert la == (run_dir(workdir, again) / "steps.csv").read_text()


def job_record(job: str) -> dict[str, str]:
    """What ``scontrol show job`` says of ``job`` (JobState, Restarts, ...), one key each."""
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
    return dict(w.split("=", 1) for w in shown.stdout.split() if "=" in w)


def ended_or_requeued(job: str) -> dict[str, str]:
    """Wait until ``job`` has ended for good or SLURM has counted a restart of it."""

    def settled():
        record = job_record(job)
        done = record.get("JobState") not in ("RUNNING", "PENDING", "COMPLETING", "REQUEUED")
        return record if done or record.get("Restarts", "0") != "0" else None

    return wait_for(settled, timeout=240)


def test_a_cancel_ends_a_requeueable_job_cancelled_and_a_preemption_still_requeues(
    slurm_cluster, workdir, cluster_data
):
    """The stop signal a requeueable job traps is the TERM that ``scancel`` sends too: the
    ranks checkpoint on it either way, but a job SLURM calls CANCELLED is not requeued (the
    user wants it gone, and it held its nodes again seconds later). ``hpcbench cancel`` of a
    job, then a plain ``scancel`` of an array task; the array's other task gets the TERM alone,
    as a preemption under GraceTime sends it (to the job's steps, the job still running):
    requeued."""
    flags, trainer = LAUNCHES["ddp under torchrun under srun"]
    job = submit(workdir, cluster_data, *flags, trainer=trainer)
    sweep = sweep_file_for_cancel(workdir, cluster_data)
    r = hpcbench("sweep", str(sweep), "--scheduler", "slurm", "--results", str(workdir / "s"),
                 "--no-wait", cwd=workdir, env={"HPCBENCH_STEP_DELAY": "0.3"})  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    array = re.search(r"as array job (\S+)", r.stdout).group(1)
    run = wait_for(lambda: list((workdir / "runs").glob(f"*-{job}")))[0]
    wait_for(lambda: (run / "control" / "ready").exists())
    cancelled = hpcbench("cancel", job, cwd=workdir)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr

    tasks = {k: workdir / "s" / "runs" / f"lr={lr}" for k, lr in ((1, 0.01), (2, 0.05))}
    # each task signalled as soon as it trains: a task that waited for the other's start could
    # finish its few steps first (under load), and a finished run has nothing left to stop
    wait_for(lambda: (tasks[1] / "control" / "ready").exists(), timeout=300)
    subprocess.run(["scancel", f"{array}_1"], check=True)
    wait_for(lambda: (tasks[2] / "control" / "ready").exists(), timeout=300)
    # a preemption under GraceTime: SLURM signals the job's steps, and the job goes on running
    subprocess.run(["scancel", "--signal=TERM", f"{array}_2"], check=True)

    for cancelled_job, where in ((job, run), (f"{array}_1", tasks[1])):
        record = ended_or_requeued(cancelled_job)
        seen = {k: record.get(k) for k in ("JobState", "Restarts", "Reason")}
        assert seen["Restarts"] == "0", f"{cancelled_job} was requeued after its cancel: {seen}"
        assert seen["JobState"] == "CANCELLED", seen
        assert requeues(where) == [], requeues(where)  # neither requeued nor counted
    err = (workdir / "runs" / f"hpcbench-{job}.err").read_text()
    assert "cancelled: the ranks checkpoint and stop; not requeued" in err, err
    assert "requeued (scontrol requeue)" not in err, err
    # the preempted task: requeued by its script (SLURM counts the restart), to resume from
    # its checkpoint (the resume itself is the time limit test's); cancelled while it waits
    wait_for(lambda: job_record(f"{array}_2").get("Restarts") == "1", timeout=240)
    assert requeues(tasks[2]) == ["signal"], requeues(tasks[2])
    err2 = next((workdir / "s" / "logs").glob(f"*{array}_2.err")).read_text()
    assert "requeued (scontrol requeue); it resumes from its checkpoint" in err2, err2
    subprocess.run(["scancel", f"{array}_2"], check=True)


def sweep_file_for_cancel(workdir: Path, data: Path) -> Path:
    """Two tasks at once, each a node's slow run of 9 steps with checkpoints."""
    path = workdir / "cancel-sweep.toml"
    args = [*TRAINER, "--epochs", "4", "--data", str(data)]
    path.write_text(f"trainer_args = {json.dumps(args)}\nmax_parallel = 2\n"
                    "[axes]\nlr = [0.01, 0.05]\n")  # fmt: skip
    return path
