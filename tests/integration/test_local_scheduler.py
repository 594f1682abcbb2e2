"""The local scheduler end to end: render -> submit -> wait, with real torchrun and real mpiexec."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcbench import api
from tests.conftest import (
    QUICK_FAIL,
    QUICK_OK,
    have_module,
    hpcbench,
    mpiexec_available,
    require,
)

FAIL_ON_RANK_2 = """
import os, sys, time
from hpcbench.this_rank import detect_launch, line_buffered_output
line_buffered_output()
info = detect_launch()
if info.rank == 2:
    raise RuntimeError(f"rank {info.rank} broke on purpose")
time.sleep(60)  # the others wait: the launcher must stop them rather than wait for them
open(f"finished-{info.rank}", "w").close()
"""


# The acceptance command: 2 nodes x 2 GPUs' worth of ranks on the local scheduler.
TWO_BY_TWO = ["submit", "--nodes", "2", "--gpus-per-node", "2", "--scheduler", "local", "--wait"]
PROBE = ["--module", "hpcbench.probe"]


def assert_others_were_stopped(workdir):
    """No rank outlived its 60 s sleep: the launcher stopped them when rank 2 failed."""
    assert not list(workdir.glob("finished-*"))


def probe_summary(workdir, job_id):
    return json.loads((workdir / "runs" / f"hpcbench-{job_id}" / "probe.json").read_text())


@pytest.mark.torch
def test_two_nodes_two_gpus_runs_four_ranks_locally(workdir):
    require(have_module("torch"), "torch (for torchrun)")
    result = hpcbench(*TWO_BY_TWO, *PROBE, cwd=workdir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "job local-1 completed" in result.stdout
    summary = probe_summary(workdir, "local-1")
    assert summary["problems"] == [] and summary["world_size"] == 4
    ranks = sorted((r["rank"], r["node_rank"], r["local_rank"]) for r in summary["ranks"])
    assert ranks == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    assert {r["launcher"] for r in summary["ranks"]} == {"torchrun"}
    assert {r["emulated_node"] for r in summary["ranks"]} == {"0", "1"}
    out = (workdir / "runs" / "hpcbench-local-1.out").read_text()
    assert out.count("[rank ") == 4 and "launch consistent" in out
    scripts = list((workdir / "runs" / "scripts").glob("hpcbench-*.sh"))
    assert len(scripts) == 1 and scripts[0].read_text().startswith("#!/bin/bash\n")


@pytest.mark.torch
def test_a_failing_rank_fails_the_job_fast_with_its_traceback(workdir):
    require(have_module("torch"), "torch (for torchrun)")
    (workdir / "fail.py").write_text(FAIL_ON_RANK_2)
    result = hpcbench(*TWO_BY_TWO, "--script", "fail.py", cwd=workdir)
    assert result.returncode != 0
    assert_others_were_stopped(workdir)
    assert "job local-1 failed with exit code" in result.stderr
    assert "first failing rank 2:" in result.stderr
    assert "RuntimeError: rank 2 broke on purpose" in result.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", ["mpiexec", "srun"])
def test_mpi_launchers_run_every_rank_locally(workdir, launcher):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    result = hpcbench(
        "submit",
        "--nodes",
        "2",
        "--tasks-per-node",
        "2",
        "--launcher",
        launcher,
        "--scheduler",
        "local",
        "--wait",
        *PROBE,
        cwd=workdir,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = probe_summary(workdir, "local-1")
    assert summary["problems"] == []
    assert sorted(r["rank"] for r in summary["ranks"]) == [0, 1, 2, 3]
    assert {r["launcher"] for r in summary["ranks"]} <= {"mpich", "openmpi"}
    out = (workdir / "runs" / "hpcbench-local-1.out").read_text().splitlines()
    # The MPI labels each line with the rank that wrote it, and every line arrives whole.
    labelled = re.compile(
        r"^(?:\[(\d+)\] |\[\d+,(\d+)\]<stdout>:)\[rank (\d+)/4\] .*; GPUs -; cores \S+ \(\w+\)$"
    )
    lines = [labelled.match(line) for line in out if "[rank " in line]
    assert len(lines) == 4 and all(lines), out
    assert sorted(int(m.group(3)) for m in lines) == [0, 1, 2, 3]
    assert all((m.group(1) or m.group(2)) == m.group(3) for m in lines)


@pytest.mark.mpi
def test_mpiexec_failing_rank_is_named(workdir):
    require(mpiexec_available() and have_module("mpi4py"), "mpiexec and mpi4py")
    (workdir / "fail.py").write_text("from mpi4py import MPI  # noqa: F401\n" + FAIL_ON_RANK_2)
    # Under mpiexec a Python rank must run through `python -m mpi4py`, which calls MPI_Abort on an
    # uncaught exception; otherwise Hydra waits for the other ranks to end on their own.
    result = hpcbench(
        *("submit", "--tasks-per-node", "4", "--launcher", "mpiexec", "--scheduler", "local"),
        *("--wait", "--program", "python -m mpi4py fail.py"),
        cwd=workdir,
    )
    assert result.returncode != 0
    assert_others_were_stopped(workdir)
    assert "first failing rank 2:" in result.stderr
    assert "RuntimeError: rank 2 broke on purpose" in result.stderr


def test_status_cancel_and_dry_run(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    spec = api.load_spec(None, command=["sleep", "60"], launcher="mpiexec", job_name="sleepy")
    dry = hpcbench(
        "submit", "--program", "sleep 60", "--scheduler", "local", "--dry-run", cwd=workdir
    )
    assert dry.returncode == 0 and dry.stdout.startswith("#!/bin/bash\n")
    assert not (workdir / "runs").exists()  # a dry run queues and writes nothing
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    job = api.submit(spec, scheduler="local", cwd=workdir)
    assert job.job_id == "local-1"
    for _ in range(100):
        if job.state == "RUNNING":
            break
        time.sleep(0.05)
    status = hpcbench("status", job.job_id, cwd=workdir)
    assert status.stdout.startswith("local-1\tRUNNING")
    cancel = hpcbench("cancel", job.job_id, cwd=workdir)
    assert cancel.returncode == 0
    final = job.wait(timeout=30)
    assert final.state == "CANCELLED"
    assert job.record.stdout_path.name == "sleepy-local-1.out"


@pytest.mark.mpi
def test_result_is_rank_0_metrics_or_the_failing_ranks_traceback(workdir):
    """The one job handle: ``result()`` waits, then reads the trainer's metrics.json from the
    job's run directory; a failed job raises JobFailed carrying the failing rank's traceback."""
    require(mpiexec_available() and have_module("torch"), "mpiexec and torch")
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    data = workdir / "tiny"
    convert(synthetic(180, 3), data, ConvertOptions(size=(12, 12), progress=False, workers=1))
    args = ["--data", str(data), "--epochs", "1", "--max-steps", "2", "--progress", "none"]
    spec = api.load_spec(None, launcher="mpiexec", tasks_per_node=2, args=args)
    job = api.submit(spec, scheduler="local", cwd=workdir)
    metrics = job.result(timeout=300)
    assert metrics["run"]["world_size"] == 2 and metrics["run"]["strategy"] == "mpi"
    assert job.results() == [metrics] and job.done()

    failing = api.load_spec(
        None, launcher="mpiexec", tasks_per_node=2, args=args, variables={"HPCBENCH_FAIL_AT": "1:1"}
    )
    bad = api.submit(failing, scheduler="local", cwd=workdir)
    with pytest.raises(api.JobFailed) as err:
        bad.result(timeout=300)
    assert err.value.status is not None and err.value.status.state == "FAILED"
    assert "first failing rank 1:" in str(err.value)
    assert "failure drill: rank 1 fails at step 1" in str(err.value)


WAITS_FOR_GO = """\
import pathlib, sys, time
print("epoch 1 of 2", flush=True)
deadline = time.monotonic() + 120
while not pathlib.Path("go").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
print("epoch 2 of 2" if pathlib.Path("go").exists() else "nobody saw epoch 1", flush=True)
"""


def test_submit_wait_shows_the_jobs_lines_as_they_arrive(workdir):
    """The job prints a line and then waits for the test to have *seen* it through
    ``submit --wait``: only output shown while the job runs lets it finish."""
    (workdir / "epochs.py").write_text(WAITS_FOR_GO)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcbench", "submit", "--scheduler", "local", "--wait"]
        + ["--script", "epochs.py"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if "epoch 1 of 2" in line:
                (workdir / "go").write_text("")
    finally:
        proc.wait(timeout=180)
    assert proc.returncode == 0, proc.stderr.read()
    assert "nobody saw epoch 1" not in "\n".join(seen)
    lines = [s for s in seen if " of 2" in s]  # torchrun labels each line with its rank
    assert lines == ["[default0]:epoch 1 of 2", "[default0]:epoch 2 of 2"], seen
    assert seen[-1].startswith("job local-") and seen[-1].endswith(" completed")


def test_a_job_after_another_starts_when_it_succeeded_and_never_when_it_failed(workdir):
    """``--after JOB`` on the local scheduler: the job waits for JOB's end, runs when it ended
    with status 0, and is not started (failed, its log says why) when it did not. Started by
    mpiexec: the programs import no torch, and torchrun's agent would."""
    require(mpiexec_available(), "mpiexec")
    local = ("submit", "--scheduler", "local", "--launcher", "mpiexec")
    first = hpcbench(*local, "--program", "sleep 2", "-J", "first", cwd=workdir)
    assert first.returncode == 0, first.stderr
    ok_id = re.search(r"submitted job (\S+)", first.stdout).group(1)
    marker = workdir / "second-ran"
    second = hpcbench(
        *local, "--after", ok_id, "--program",
        f"python3 -c \"import pathlib; pathlib.Path('{marker}').write_text('x')\"",
        "--wait", cwd=workdir, timeout=120,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    assert marker.exists()
    assert api.job(ok_id, scheduler="local").state == "COMPLETED"  # it ended before
    bad = hpcbench(*local, "--program", shlex.join(QUICK_FAIL), "--wait", cwd=workdir)
    bad_id = re.search(r"submitted job (\S+)", bad.stdout).group(1)
    third = hpcbench(
        *local, "--after", bad_id, "--program", QUICK_OK, "-J", "third",
        "--wait", cwd=workdir, timeout=120,
    )  # fmt: skip
    assert third.returncode != 0
    third_id = re.search(r"submitted job (\S+)", third.stdout).group(1)
    log = (workdir / "runs" / f"third-{third_id}.err").read_text()
    assert f"not started: job {bad_id}, which it runs after, ended with status 1" in log, log
    unknown = hpcbench(*local, "--after", "local-999", "--program", QUICK_OK, cwd=workdir)
    assert unknown.returncode != 0 and "scheduler.after: local-999" in unknown.stderr
    assert unknown.stderr.count("error:") == 1 and "Traceback" not in unknown.stderr


def test_a_job_after_a_cancelled_one_is_not_started_and_fails(workdir):
    """A cancelled job never writes an exit status: the job waiting for it must still end
    (FAILED, its log naming the cancelled job), not wait for ever."""
    first_id = local_job(workdir, "--launcher", "direct", "--program", "sleep 60", "-J", "first")
    marker = workdir / "second-ran"
    second_id = local_job(
        workdir,
        "--after",
        first_id,
        "-J",
        "second",
        "--launcher",
        "direct",
        "--program",
        f"touch {marker}",
    )
    cancelled = hpcbench("cancel", first_id, cwd=workdir)
    assert cancelled.returncode == 0, cancelled.stderr
    status = api.job(second_id, scheduler="local").wait(timeout=60)  # not RUNNING for ever
    assert status.state == "FAILED", status
    assert not marker.exists()
    log = (workdir / "runs" / f"second-{second_id}.err").read_text()
    assert f"not started: job {first_id}, which it runs after, was cancelled" in log, log


def local_job(workdir, *flags: str) -> str:
    """Submit to the local scheduler without waiting; the id it printed."""
    r = hpcbench("submit", "--scheduler", "local", *flags, cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    return re.search(r"submitted job (\S+)", r.stdout).group(1)


# --------------------------------------------- one emulated node fails: the others are stopped
# srun's --kill-on-bad-exit, emulated: when one node's launcher (or, under mpiexec, one rank)
# exits non-zero, every emulated node is stopped (TERM, KILL after a short grace) and the job
# ends failed, naming the rank. The submit's timeout is only a guard: a job that waits for its
# stuck node runs past it and the test fails rather than hangs.
NODE_FAILURE_GUARD_S = 150

# Under MPI, rank 1 (on emulated node 1) exits 1 at once; rank 0 ignores SIGTERM and sleeps
# longer than the guard: only the scheduler's stop ends it.
SILENT_FAILURE = """\
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-x}}
if [ "$rank" = 1 ]; then sleep 0.5; exit 1; fi
trap '' TERM
sleep 300
touch "finished-$rank"
"""


def processes_in(workdir: Path) -> list[str]:
    """The processes still running in ``workdir`` (their working directory): none once a job
    has ended, whichever session they moved to."""
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == workdir:
                left.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()!r}")
        except OSError:
            continue
    return left


@pytest.mark.torch
def test_a_torchrun_node_whose_rank_fails_stops_the_other_node_and_names_the_rank(
    workdir, shapes_data
):
    """Two emulated nodes x 1 rank, ddp: rank 1 fails at step 6 while rank 0 is stuck there (the
    hang drill), so node 0's torchrun agent never ends by itself. The job must end at once,
    FAILED, its report naming rank 1, with no process left."""
    require(have_module("torch"), "torch (for torchrun)")
    data = shapes_data(180, 3, (12, 12))
    result = hpcbench(
        *("submit", "--scheduler", "local", "--nodes", "2", "--wait"),
        *("--env", "HPCBENCH_FAIL_AT=1:6,0:6:hang"),
        *("--", "--data", str(data), "--strategy", "ddp", "--epochs", "3", "--progress", "none"),
        cwd=workdir,
        timeout=NODE_FAILURE_GUARD_S,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    assert "job local-1 failed with exit code" in result.stderr
    assert "first failing rank 1:" in result.stderr
    assert "failure drill: rank 1 fails at step 6" in result.stderr
    err = (workdir / "runs" / "hpcbench-local-1.err").read_text()
    assert "the other emulated nodes are stopped" in err, err
    logs = hpcbench("logs", "local-1", cwd=workdir)
    assert "FAILED" in logs.stdout + logs.stderr and "first failing rank 1:" in logs.stdout
    status = hpcbench("status", "local-1", cwd=workdir)
    assert "FAILED" in status.stdout
    assert processes_in(workdir) == []


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", ["mpiexec", "srun"])
def test_an_mpi_rank_that_exits_1_stops_the_other_node(workdir, launcher):
    """Two emulated nodes x 1 rank started by mpiexec (srun's stand-in here), a program that
    imports nothing: rank 1 exits 1 and says nothing, rank 0 ignores SIGTERM and sleeps. MPICH's
    mpiexec waits for rank 0; the local scheduler stops it, and the report names rank 1."""
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    (workdir / "fail.sh").write_text(SILENT_FAILURE)
    result = hpcbench(
        *("submit", "--scheduler", "local", "--nodes", "2", "--launcher", launcher, "--wait"),
        *("--program", "bash fail.sh"),
        cwd=workdir,
        timeout=NODE_FAILURE_GUARD_S,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    assert_others_were_stopped(workdir)
    assert "job local-1 failed with exit code" in result.stderr
    assert "first failing rank 1:" in result.stderr, result.stderr
    assert "exited with status 1" in result.stderr
    assert "FAILED" in hpcbench("status", "local-1", cwd=workdir).stdout
    assert processes_in(workdir) == []


def test_direct_over_two_nodes_is_refused_in_one_line(workdir):
    """direct starts one process: two emulated nodes are refused before anything runs."""
    result = hpcbench(
        *("submit", "--scheduler", "local", "--nodes", "2", "--launcher", "direct"),
        *("--program", "sleep 60"),
        cwd=workdir,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "direct starts one process" in result.stderr
    assert "submitted job" not in result.stdout
