"""Stop signals reach every rank, for real (docs/resilience.md): the "time limits and preemption"
section of the rendered job scripts (hpcbench/templates/base.sh.j2) on the test clusters.

On the real two-node SLURM (tests/cluster/slurm-up.sh), for each launcher: a small probe program
(written into the test's directory, run with ``--script`` and ``--requeue``) installs a SIGUSR2
handler on every rank, and rank 0 writes ``$HPCBENCH_CONTROL_DIR/ready`` once every rank has. The
test then signals the job as SLURM does ahead of the time limit, ``scancel --batch --signal=USR2``
(the batch shell only, the path of ``#SBATCH --signal=B:USR2@lead``): the shell must forward it to
the launcher's process group, and srun / torchrun on to every rank, each of which leaves
``got-<rank>``. One variant signals the steps directly (``scancel --signal=USR2``, no ``--batch``).

On the real Grid Engine (tests/cluster/sge-up.sh): the trainer under torchrun is deleted with
``qdel`` while it trains; the job script carries ``#$ -notify``, so Grid Engine sends SIGUSR2 to the
job (then SIGKILL after the queue's ``notify`` time): the trainer must stop at a step boundary,
write a whole checkpoint and leave ``control/stopped``, and no process of the job may outlive it
(Grid Engine's SIGKILL reaches only the job shell's process group, not the launcher's own).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcbench import api
from tests.cluster.conftest import submitted_id
from tests.conftest import hpcbench

# Each rank: install a SIGUSR2 handler, say so (armed-<rank>); rank 0 writes the job's "ready"
# mark once every rank is armed (no barrier: files on the shared filesystem). The handler leaves
# got-<rank>; a rank exits 0 once every rank got the signal, 3 after 60 s without it.
PROBE = r"""
import json, os, signal, sys, time
from pathlib import Path

from hpcbench.this_rank import detect_launch

out = Path(sys.argv[1])
me = detect_launch()
rank, world = me.rank, me.world_size


def on_usr2(signum, frame):
    (out / f"got-{rank}").write_text(f"{os.getpid()} {me.hostname}\n")


signal.signal(signal.SIGUSR2, on_usr2)
(out / f".armed-{rank}").write_text(json.dumps({**me.as_dict(), "pid": os.getpid()}))
os.replace(out / f".armed-{rank}", out / f"armed-{rank}")
deadline = time.monotonic() + 60
if rank == 0:
    while not all((out / f"armed-{r}").exists() for r in range(world)):
        if time.monotonic() > deadline:
            print("probe: not every rank armed within 60 s", file=sys.stderr, flush=True)
            sys.exit(4)
        time.sleep(0.05)
    control = Path(os.environ["HPCBENCH_CONTROL_DIR"])
    (control / "ready").write_text("{}\n")
    print(f"probe: {world} ranks armed, ready", flush=True)
while not all((out / f"got-{r}").exists() for r in range(world)):
    if time.monotonic() > deadline:
        print(f"probe: rank {rank}: no SIGUSR2 for every rank within 60 s", file=sys.stderr)
        sys.exit(3)
    time.sleep(0.05)
print(f"probe: rank {rank}: every rank got SIGUSR2", flush=True)
"""

SIGNAL_DEADLINE_S = 10  # a deadline for the signal to reach every rank, not a measurement


@dataclass
class Submitted:
    job: str
    scheduler: str
    script: Path
    logs: tuple[Path, Path]
    run_dir: Path

    def log_text(self) -> str:
        parts = []
        for path in dict.fromkeys(self.logs):
            try:
                parts.append(f"--- {path}\n{path.read_text(errors='replace')}")
            except OSError as err:
                parts.append(f"--- {path}: {err}")
        return "\n".join(parts)

    def report(self) -> str:
        """What to look at when a signal went astray: the job's state, script and logs."""
        try:
            state = api.job(self.job, self.scheduler).status()
        except Exception as err:  # the report must not hide the failure it explains
            state = f"(status: {err})"
        return f"job {self.job} ({self.scheduler}) {state}; script {self.script}\n{self.log_text()}"


def submit(scheduler: str, workdir: Path, *args: str) -> Submitted:
    r = hpcbench("submit", "--scheduler", scheduler, *args, cwd=workdir, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    script = re.search(rf"submitted job \S+ to {scheduler}: (.+)", r.stdout)
    logs = re.search(r"^logs: (\S+) and (\S+)", r.stdout, re.M)
    run_dir = re.search(r"run directory: (.+)", r.stdout)
    assert script and logs and run_dir, r.stdout

    def path(text: str) -> Path:
        p = Path(text.strip())
        return p if p.is_absolute() else workdir / p

    return Submitted(
        job=submitted_id(r.stdout, scheduler),
        scheduler=scheduler,
        script=path(script.group(1)),
        logs=(path(logs.group(1)), path(logs.group(2))),
        run_dir=path(run_dir.group(1)),
    )


def wait_until(condition, timeout: float, what: str, job: Submitted) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s\n{job.report()}", pytrace=False)
        time.sleep(0.1)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


# launcher -> (flags, ranks, what hpcbench.this_rank.detect_launch may call that launch: srun's
# tasks read as MPICH ranks when SLURM's PMI-2 plugin gives them PMI_RANK, as on the test cluster)
LAUNCHES = {
    "srun": (
        ["--launcher", "srun", "--nodes", "2", "--tasks-per-node", "2"],
        4,
        {"slurm", "mpich"},
    ),
    "torchrun": (
        ["--launcher", "torchrun", "--nodes", "2", "--tasks-per-node", "2"],
        4,
        {"torchrun"},
    ),
    "mpiexec": (
        ["--launcher", "mpiexec", "--nodes", "1", "--tasks-per-node", "2"],
        2,
        {"mpich"},
    ),
}


def job_processes(job: Submitted, workdir: Path) -> dict[int, str]:
    """pid -> command line of the processes still running from a job: those started in
    ``workdir`` with its ``HPCBENCH_JOB_ID`` and scheduler in their environment."""
    wanted = {f"HPCBENCH_JOB_ID={job.job}".encode(), f"HPCBENCH_SCHEDULER={job.scheduler}".encode()}
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).resolve() != workdir.resolve():
                continue
            if not wanted <= set((proc / "environ").read_bytes().split(b"\0")):
                continue
            if " Z " in (proc / "stat").read_text().rsplit(")", 1)[-1][:3]:
                continue  # a zombie holds nothing
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[int(proc.name)] = argv.strip()[:200]
    return found


def survivors(job: Submitted, workdir: Path, grace_s: float = 10) -> dict[int, str]:
    """The job's processes still running ``grace_s`` after the scheduler says it ended."""
    deadline = time.monotonic() + grace_s
    while (left := job_processes(job, workdir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.fixture
def jobs(workdir):
    """Jobs a test submitted: any still running at its end is cancelled (a failed test's
    probe would otherwise hold the test cluster for its last minute), and processes a Grid
    Engine job left behind after it ended (see the qdel test) are ended, by pid."""
    submitted: list[Submitted] = []
    yield submitted
    for job in submitted:
        try:
            if not api.job(job.job, job.scheduler).done():
                api.job(job.job, job.scheduler).cancel()
        except Exception:
            pass
        if job.scheduler != "sge":
            continue  # SLURM's proctrack ends every process of a job's steps
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = job_processes(job, workdir)
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            if left:
                time.sleep(5)


def submit_probe(
    workdir: Path, tmp_path: Path, launcher: str, jobs: list[Submitted]
) -> tuple[Submitted, Path, int]:
    flags, ranks, detected = LAUNCHES[launcher]
    probe = tmp_path / "signal_probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "signals"
    out.mkdir()
    job = submit("slurm", workdir, *flags, "--script", str(probe), "--requeue", "--", str(out))
    jobs.append(job)
    text = job.script.read_text()
    assert "trap 'on_stop timelimit USR2' USR2" in text and "#SBATCH --signal=B:USR2@" in text
    ready = job.run_dir / "control" / "ready"
    # the whole test cluster for the 2-node jobs: another test's jobs may hold it a while
    wait_until(ready.exists, 300, f"{ready} (every rank armed)", job)
    armed = [json.loads((out / f"armed-{r}").read_text()) for r in range(ranks)]
    assert {a["launcher"] for a in armed} <= detected, armed
    assert {a["world_size"] for a in armed} == {ranks}, armed
    return job, out, ranks


def assert_every_rank_got_usr2(job: Submitted, out: Path, ranks: int) -> None:
    def all_got() -> bool:
        return all((out / f"got-{r}").exists() for r in range(ranks))

    try:
        wait_until(all_got, SIGNAL_DEADLINE_S, "SIGUSR2 on every rank", job)
    except pytest.fail.Exception as err:
        got = sorted(p.name for p in out.glob("got-*"))
        pytest.fail(f"ranks that got SIGUSR2: {got or 'none'} of {ranks}\n{err}", pytrace=False)


def finish(job: Submitted, timeout: float = 120) -> str:
    status = api.job(job.job, "slurm").wait(timeout)
    return status.state


@pytest.mark.slurm
# Not mpiexec: MPICH's Hydra starts its proxies and ranks in sessions of their own and does not
# forward SIGUSR2; the trainer there learns of the stop from control/stop-request, which rank 0
# checks after every step.
@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_usr2_to_the_batch_shell_reaches_every_rank(
    slurm_cluster, workdir, tmp_path, jobs, launcher
):
    job, out, ranks = submit_probe(workdir, tmp_path, launcher, jobs)
    r = run("scancel", "--batch", "--signal=USR2", job.job)
    assert r.returncode == 0, r.stderr
    assert_every_rank_got_usr2(job, out, ranks)
    state = finish(job)
    stderr = job.logs[1].read_text(errors="replace")
    assert f"hpcbench: job {job.job} got SIGUSR2 (timelimit)" in stderr, job.report()
    assert (job.run_dir / "control" / "stop-request").read_text().strip() == "timelimit"
    # the probe is no trainer: it leaves no "stopped" mark, so its job is not requeued
    assert not (job.run_dir / "control" / "stopped").exists()
    if launcher == "torchrun":
        # torchrun forwards a signal it handles to its workers, then exits 1 (SignalException):
        # the job fails, which is why the script trusts the trainer's "stopped" mark, not the
        # status. Its agents must not die *of* SIGUSR2, as they do when it is not among the
        # signals they handle (srun then reports "task N: User defined signal 2" and ends the
        # step at once: a trainer would be killed in the middle of its checkpoint).
        assert not re.search(r"task \d+: User defined signal 2", stderr), job.report()
    else:
        assert state == "COMPLETED", job.report()


@pytest.mark.slurm
def test_usr2_sent_to_the_steps_reaches_every_srun_rank(slurm_cluster, workdir, tmp_path, jobs):
    job, out, ranks = submit_probe(workdir, tmp_path, "srun", jobs)
    r = run("scancel", "--signal=USR2", job.job)  # every step's tasks, not the batch shell
    assert r.returncode == 0, r.stderr
    assert_every_rank_got_usr2(job, out, ranks)
    assert finish(job) == "COMPLETED", job.report()
    assert not (job.run_dir / "control" / "stop-request").exists()  # the shell was not signalled


# Long enough to be deleted while it trains, and to outlive the notify time when the stop does not
# reach the ranks (a tiny model slowed by the slow-step drill to half a second a step, 8 epochs of
# 24 steps); a checkpoint every 4 steps. Stopped as it should, the job ends a few steps after qdel.
SGE_SLOW_STEP = ("--env", "HPCBENCH_STEP_DELAY=0.5")
SGE_TRAIN_ARGS = [
    "--model",
    "small_cnn",
    "--epochs",
    "8",
    "--checkpoint-every",
    "4",
    "--global-batch-size",
    "16",
    "--eval-batch-size",
    "64",
]
MIN_NOTIFY_S = 30  # the trainer's time between SIGUSR2 and SIGKILL: finish its step, checkpoint


def seconds(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return 3600 * h + 60 * m + s


@pytest.fixture
def sge_notify_time(sge_cluster):
    """The queue's notify time (qdel of a ``-notify`` job: SIGUSR2, then SIGKILL this much later),
    raised to 60 s for the test if it is shorter than the trainer needs, and put back after."""
    r = run("qconf", "-sq", "all.q")
    assert r.returncode == 0, r.stderr
    m = re.search(r"^notify\s+(\d+:\d+:\d+)\s*$", r.stdout, re.M)
    assert m, r.stdout
    before = m.group(1)
    if seconds(before) >= MIN_NOTIFY_S:
        yield seconds(before)
        return
    r = run("qconf", "-mattr", "queue", "notify", "00:01:00", "all.q")
    assert r.returncode == 0, r.stdout + r.stderr
    yield 60
    run("qconf", "-mattr", "queue", "notify", before, "all.q")


@pytest.mark.sge
def test_qdel_of_a_notify_job_stops_the_trainer_after_a_checkpoint(
    sge_cluster, sge_notify_time, workdir, cluster_data, jobs
):
    from hpcbench.train.checkpoint_file import decode

    job = submit(
        "sge",
        workdir,
        "--tasks-per-node",
        "2",
        "--python",
        sys.executable,
        *SGE_SLOW_STEP,
        "--",
        "--data",
        str(cluster_data),
        *SGE_TRAIN_ARGS,
    )
    jobs.append(job)
    text = job.script.read_text()
    assert "#$ -notify" in text and "trap 'on_stop timelimit USR2' USR2" in text
    control, checkpoints = job.run_dir / "control", job.run_dir / "checkpoints"
    wait_until((control / "ready").exists, 300, f"{control / 'ready'} (the trainer set up)", job)
    wait_until(lambda: any(checkpoints.glob("ckpt-*.pt")), 120, "a first checkpoint", job)
    first = {p.name for p in checkpoints.glob("ckpt-*.pt")}
    r = run("qdel", job.job)
    assert r.returncode == 0, r.stdout + r.stderr
    status = api.job(job.job, "sge").wait(sge_notify_time + 60)
    assert status.finished, job.report()
    left = survivors(job, workdir)
    report = job.report() + "".join(
        f"\nrunning after the job ended: {pid} {argv}" for pid, argv in left.items()
    )
    logs = job.log_text()
    assert f"hpcbench: job {job.job} got SIGUSR2 (timelimit)" in logs, report
    assert "stopped by SIGUSR2" in logs, report
    assert (control / "stopped").exists(), report
    stopped = json.loads((control / "stopped").read_text())
    assert stopped["signal"] == "SIGUSR2"
    ckpt = Path(stopped["checkpoint"])
    assert ckpt.parent == checkpoints.resolve() or ckpt.parent == checkpoints
    assert ckpt.name not in first  # written for the stop, after the ones seen before qdel
    payload = decode(ckpt)  # whole: magic, SHA-256 and content check out
    assert payload["position"]["steps_done"] == stopped["steps_done"]
    # nothing of the job outlives it (its launcher runs in a process group of its own)
    assert not left, report
