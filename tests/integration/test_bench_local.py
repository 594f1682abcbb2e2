"""``hpcbench bench`` end to end through the local scheduler: real trainer runs (single and
mpi ranks), a failed run recorded as failed, an interrupted matrix resumed where it stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import have_module, hpcbench, mpiexec_available, require
from tests.integration.test_watching import Watching

TRAIN = ["--epochs", "1", "--max-steps", "4", "--model", "mlp", "--eval-batch-size", "128"]


@pytest.fixture(scope="module")
def bench_data(shapes_data) -> Path:
    return shapes_data(450, 9, (16, 12))


def runs_of(results: Path) -> list[dict]:
    data = json.loads((results / "runs.json").read_text())
    assert data["format"] == "hpcbench-runs/1"
    return data["runs"]


@pytest.mark.mpi
def test_a_small_matrix_runs_every_configuration_twice(workdir, bench_data):
    """single and mpi:2 (ddp's matrix runs as SLURM jobs in tests/cluster/test_bench_slurm.py)."""
    require(have_module("torch") and mpiexec_available(), "torch and mpiexec")
    r = hpcbench(
        *("bench", "--configs", "single,mpi:2", "--repetitions", "2"),
        *("--energy-repetitions", "1"),
        *("--scheduler", "local", "--results", "res", "--"),
        *("--data", str(bench_data), *TRAIN),
        cwd=workdir,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    results = workdir / "res"
    runs = runs_of(results)
    configs = ("single", "mpi-2")
    assert [(x["config"], x["kind"], x["rep"]) for x in runs] == [
        *((c, "timing", 1) for c in configs),
        *((c, "energy", 1) for c in configs),
        *((c, "timing", 2) for c in configs),
    ]
    assert {x["status"] for x in runs} == {"completed"}
    assert len({x["job_id"] for x in runs}) == 6
    for run in runs:
        metrics = json.loads((results / run["run_dir"] / "metrics.json").read_text())
        strategy = run["config"].split("-")[0]
        assert metrics["run"]["strategy"] == strategy
        assert metrics["run"]["world_size"] == (1 if strategy == "single" else 2)
        assert metrics["run"]["global_batch"] == 32  # the same training in every configuration
        assert (results / run["run_dir"] / "epochs.csv").is_file()
    bench = json.loads((results / "bench.json").read_text())
    assert bench["matrix"]["configs"][1]["launcher"] == "mpiexec"
    assert bench["provenance"]["hpcbench"] and bench["provenance"]["hosts"]
    # progress as it happens: each run's epoch line, and the time left once a run has finished
    assert "[1/6] single timing 1: epoch 1/1:" in r.stdout
    assert "[2/6] mpi-2 timing 1: completed in" in r.stdout
    assert "4 run(s) left, about" in r.stdout
    assert "6 of 6 run(s) completed; hpcbench report" in r.stdout
    # the finished matrix is in the results history, and each run says why it has no
    # scheduler accounting (the local scheduler keeps none)
    assert re.search(r"^recorded in the history as #\d+ \(", r.stdout, re.M), r.stdout
    from hpcbench.history import History

    with History() as store:
        [entry] = [e for e in store.entries() if e.directory == str(results.resolve())]
    assert (
        set(entry.figures) == {"single", "mpi-2"} and entry.figures["single"]["total_s"]["n"] == 2
    )
    kept = json.loads((results / runs[0]["run_dir"] / "accounting.json").read_text())
    assert not kept["available"] and "the local scheduler keeps no accounting" in kept["reason"]
    # energy runs: one energy.json per run; nothing is readable here, and it says why (no 0 J)
    for run in (x for x in runs if x["kind"] == "energy"):
        energy = json.loads((results / run["run_dir"] / "energy.json").read_text())
        devices = [d for node in energy["nodes"] for d in node["devices"]]
        assert len(energy["nodes"]) == 1 and devices
        assert all(d["method"] == "unavailable" and d["reason"] for d in devices)
        assert all(d["total_j"] is None for d in devices)
    # idle power was measured once, by a job, before the energy runs: unavailable here, with why
    idle = json.loads((results / "idle.json").read_text())
    assert idle["devices"] and all(d["watts"] is None and d["reason"] for d in idle["devices"])
    assert "idle power: job local-1, 10 s" in r.stdout
    rep = hpcbench("report", "res", cwd=workdir, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    md = (results / "report" / "report.md").read_text()
    html = (results / "report" / "report.html").read_text()
    for config in configs:
        assert f"| {config} |" in md
    assert "unavailable" in md and "powercap" in md  # the energy source states its reason
    assert "Karp" in md and "efficien" in md
    assert "http://" not in html and "https://" not in html and "<img" in html


def write_matrix(workdir: Path, data: Path, extra: str = "") -> Path:
    path = workdir / "m.toml"
    path.write_text(
        f"""name = "resume"
repetitions = 1
trainer_args = {json.dumps(["--data", str(data), *TRAIN])}
{extra}
[[config]]
name = "good"
strategy = "single"

[[config]]
name = "broken"
strategy = "single"
trainer_args = ["--model", "no_such_model"]

[[config]]
name = "later"
strategy = "single"
"""
    )
    return path


def test_progress_reaches_a_pipe_as_it_happens(workdir, bench_data):
    """``hpcbench bench | tee log`` (or a job's log file): each progress line is written when it
    happens, not held back in a buffer until the matrix ends."""
    require(have_module("torch"), "torch")
    (workdir / "one.toml").write_text(
        f"""name = "piped"
repetitions = 1
energy_repetitions = 0
trainer_args = {json.dumps(["--data", str(bench_data), *TRAIN])}
[[config]]
name = "slow"
strategy = "single"
"""
    )
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        "HPCBENCH_STEP_DELAY": "1",
    }  # fmt: skip (4 steps: the run lasts 4 s and more)
    env.pop("PYTHONUNBUFFERED", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcbench", "bench", "one.toml", "--scheduler", "local"],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    watching = Watching(workdir / "runs" / "bench-piped", "runs.json")  # hpcbench watch, live
    arrived = None
    for line in proc.stdout:
        if arrived is None and line.startswith("[1/1] slow timing 1: job "):
            arrived = time.monotonic()
    proc.wait(timeout=300)
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr.read()
    assert arrived is not None and ended - arrived > 3, "the job's line came only at the end"
    seen = watching.result()
    assert watching.status == 0 and "  slow timing 1: running  job local-" in seen, seen
    assert seen.rstrip().endswith(": 1 completed"), seen
    assert 1 <= watching.queries <= seen.count("matrix "), seen  # one question per refresh


def _interactive_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_state(pid: int) -> str:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as err:
        return str(err)
    return " ".join(x for x in lines if x.startswith(("State", "SigBlk", "SigIgn", "SigCgt")))


def test_a_failed_run_is_recorded_and_a_stopped_matrix_resumes(workdir, bench_data):
    require(have_module("torch"), "torch")
    write_matrix(workdir, bench_data)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    # Stop the matrix (Ctrl-C) as soon as its first run has finished. The bench starts as from
    # an interactive shell, Ctrl-C's default action in place whatever this test process inherited:
    # tests started in the background of a script (`make test &`) ignore SIGINT and SIGQUIT, as
    # POSIX shells make background commands do, and so would the bench (it ran to the end).
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcbench", "bench", "m.toml", "--scheduler", "local"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interactive_ctrl_c,
    )
    seen, state = [], ""
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("[1/3] good timing 1: completed"):
            state = _signal_state(proc.pid)
            proc.send_signal(signal.SIGINT)
            break
    proc.wait(timeout=300)
    said = "".join(seen) + proc.stdout.read() + proc.stderr.read()
    assert proc.returncode == 130, f"{said}\nthe bench's signals when Ctrl-C was sent: {state}"
    results = workdir / "runs" / "bench-resume"
    first = runs_of(results)
    assert [x["status"] for x in first][0] == "completed"
    assert [x["status"] for x in first][2] == "pending"

    again = hpcbench("bench", "m.toml", "--scheduler", "local", cwd=workdir, timeout=600)
    assert again.returncode == 1, again.stdout + again.stderr  # a run failed
    assert "resumed with 1 done" in again.stdout
    runs = runs_of(results)
    assert runs[0]["job_id"] == first[0]["job_id"]  # the completed run was not run again
    assert [x["status"] for x in runs] == ["completed", "failed", "completed"]
    assert "no_such_model" in runs[1]["error"]
    assert "2 of 3 run(s) completed; 1 failed (--retry-failed runs them again)" in again.stdout

    # once more: nothing left to run, the failure stays recorded
    third = hpcbench("bench", "m.toml", "--scheduler", "local", cwd=workdir, timeout=120)
    assert third.returncode == 1 and "resumed with 2 done" in third.stdout
    assert [x["job_id"] for x in runs_of(results)] == [x["job_id"] for x in runs]

    # another matrix in the same directory is refused, in one line, touching nothing
    write_matrix(workdir, bench_data, extra="cooldown = 1")
    other = hpcbench("bench", "m.toml", "--scheduler", "local", cwd=workdir)
    assert other.returncode == 1
    assert other.stderr.strip() == (
        f"hpcbench: error: {results / 'bench.json'}: holds another matrix; resume it with the "
        "matrix it was started with, or give a new --results directory"
    )
    assert runs_of(results) == runs


def test_a_local_matrix_warns_when_other_work_shares_the_machine(workdir, bench_data):
    """A process spinning on a CPU while a local matrix runs: the run says so as it starts,
    runs.json keeps it, and the report warns that the times carry it."""
    require(have_module("torch"), "torch")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        r = hpcbench(
            *("bench", "--configs", "single", "--repetitions", "1", "--scheduler", "local"),
            *("--results", "res", "--", "--data", str(bench_data), *TRAIN),
            cwd=workdir,
            timeout=600,
        )
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[1/1] single timing 1: warning: other work shares this machine" in r.stdout, r.stdout
    (run,) = runs_of(workdir / "res")
    assert run["shared"].startswith("other work shares this machine")
    rep = hpcbench("report", "res", cwd=workdir, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    md = (workdir / "res" / "report" / "report.md").read_text()
    assert "1 of 1 runs started while other work shared this machine (single timing 1)" in md
    # no energy runs were asked for: no energy section and no figure notes about energy
    assert "## Energy" not in md and "No energy figure" not in md and "No power figure" not in md
    # 4 steps of training: too short to compare, and the summary says so
    assert "single: its training phase lasts" in md and "too short to compare" in md
