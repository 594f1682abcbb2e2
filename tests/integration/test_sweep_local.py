"""Sweeps on the local scheduler, for real: an array's tasks run at most ``max_parallel`` at a
time (each holds a slot from its start to its exit status), a pending task is cancelled alone,
and the reference study's sweep in its smoke form trains every setting, continues after failed
tasks (kept failed without --retry-failed, run again with it) and is reported, the page checked
in a real browser."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from hpcbench.jobs.job import JobFailed
from hpcbench.jobs.schedulers import get
from hpcbench.jobs.spec import Array
from hpcbench.jobs.spec_load import build_spec
from hpcbench.jobs.submission import submit
from tests.conftest import QUICK_FAIL, REPO, hpcbench, mpiexec_available, need_module, require
from tests.integration.test_watching import Watching

need_module("torch")


def intervals(state: Path, tasks: list[str]) -> list[tuple[float, float]]:
    """Each task's [slot taken, exit status written] from the local scheduler's files."""
    local = state / "local"
    return [((local / f"{t}.started").stat().st_mtime, (local / f"{t}.exit").stat().st_mtime)
            for t in tasks]  # fmt: skip


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_a_local_array_runs_at_most_its_cap_and_cancels_one_pending_task(workdir, monkeypatch):
    tasks_dir = workdir / "tasks"
    tasks_dir.mkdir()
    for k in (1, 2, 3, 4):
        (tasks_dir / f"{k}.run").write_text(f"t{k}\n")
        (tasks_dir / f"{k}.toml").write_text("")
    spec = build_spec(
        {
            "program": {"command": ["sleep", "4"]},
            "launcher": {"kind": "direct"},  # imports nothing: no agent importing torch
            "resources": {"job_name": "arr"},
        }
    )
    spec.array = Array(4, str(tasks_dir), str(workdir / "runs"), max_parallel=2)
    job = submit(spec, "local", cwd=workdir)
    assert job.job_id.startswith("local-") and len(job.tasks) == 4
    assert job.tasks[3] == f"{job.job_id}_4"
    sched = get("local")
    deadline = time.monotonic() + 30  # the cap's two tasks start (on a loaded machine, slowly)
    while True:
        states = sched.statuses(list(job.tasks))
        if sum(x.state == "RUNNING" for x in states.values()) >= 2:
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.1)
    assert sum(s.state == "RUNNING" for s in states.values()) == 2, states
    assert states[job.tasks[3]].state == "PENDING"
    assert states[job.tasks[3]].reason == "waiting for a free slot of its array"
    sched.cancel([job.tasks[3]])
    final = job.wait(timeout=60)
    assert (final.state, final.reason) == ("CANCELLED", "1 of 4 tasks did not complete")
    ended = sched.statuses(list(job.tasks))
    assert [ended[t].state for t in job.tasks] == ["COMPLETED"] * 3 + ["CANCELLED"]
    state = Path(workdir.parent / "state")
    assert most_at_once(intervals(state, list(job.tasks[:3]))) == 2
    for k in (1, 2, 3):  # every task ran in the run directory its .run file names
        assert (workdir / "runs" / f"t{k}").is_dir()
    assert (workdir / "runs" / f"arr-{job.tasks[0]}.out").is_file()  # each task's own logs
    with pytest.raises(JobFailed, match="is an array of 4 tasks"):
        job.result()
    with pytest.raises(JobFailed, match="wrote no metrics.json"):  # sleep wrote no results
        job.results()
    logs = hpcbench("logs", job.job_id, cwd=workdir)
    assert (
        f"{job.tasks[3]}\tCANCELLED" in logs.stdout
        and f"hpcbench logs {job.tasks[0]}" in logs.stdout
    )
    one = hpcbench("logs", job.tasks[1], cwd=workdir)
    assert one.stdout.startswith(f"job {job.tasks[1]} (local): COMPLETED"), one.stdout
    status = hpcbench("status", job.job_id, cwd=workdir)
    assert (
        f"{job.tasks[0]}\tCOMPLETED" in status.stdout
        and f"{job.job_id}\tCANCELLED" in status.stdout
    )


def make_data(root: Path, size: tuple[int, int]) -> None:
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    convert(synthetic(270, 9), root, ConvertOptions(size=size, grayscale=True, progress=False))


def test_the_reference_sweeps_smoke_form_runs_continues_and_is_reported(workdir, tmp_path):
    shutil.copytree(REPO / "jobs", workdir / "jobs")
    make_data(workdir / "data" / "shapes", (16, 16))  # the second dataset is made later
    sweep = ["sweep", "jobs/reference-study/sweep.toml", "--smoke", "--scheduler", "local"]
    results = workdir / "runs" / "sweep-reference-hparams-smoke"
    watching = Watching(results, "submissions.json")  # hpcbench watch, while the sweep runs
    first = hpcbench(*sweep, cwd=workdir, timeout=900)
    assert first.returncode == 1, first.stdout + first.stderr  # two tasks had no dataset
    assert "2 completed, 2 failed" in first.stdout, first.stdout
    seen = watching.result()
    assert watching.status == 1 and seen.rstrip().endswith(": 2 completed, 2 failed"), seen
    assert ": running  job local-" in seen or ": queued" in seen, seen
    # the cap of the smoke form (2) held: from each task's slot to its exit status
    (sub,) = json.loads((results / "submissions.json").read_text())["submissions"]
    assert most_at_once(intervals(workdir.parent / "state", sub["task_ids"])) <= 2
    for run in ("data=shapes,global-batch-size=16", "data=shapes,global-batch-size=32"):
        metrics = json.loads((results / "runs" / run / "metrics.json").read_text())
        assert metrics["run"]["global_batch"] == int(run.rsplit("=", 1)[1])
        assert metrics["run"]["model"] == "small_cnn" and metrics["run"]["epochs"] == 2

    make_data(workdir / "data" / "shapes-74x56", (12, 12))
    again = hpcbench(*sweep, cwd=workdir, timeout=300)  # failed tasks stay failed
    assert again.returncode == 1 and "submitted" not in again.stdout, again.stdout
    retried = hpcbench(*sweep, "--retry-failed", cwd=workdir, timeout=900)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "submitted 2 task(s)" in retried.stdout and "4 completed" in retried.stdout
    metrics = json.loads(
        (results / "runs" / "data=shapes-74x56,global-batch-size=32" / "metrics.json").read_text()
    )
    assert metrics["run"]["dataset"].endswith("shapes-74x56")

    report = hpcbench("report", str(results), cwd=workdir, timeout=300)
    assert report.returncode == 0, report.stderr
    out = results / "report"
    ranking = (out / "tables" / "ranking.csv").read_text().splitlines()
    assert ranking[0].startswith("rank,setting,data,global-batch-size,val_accuracy_median")
    assert len(ranking) == 5
    md = (out / "report.md").read_text()
    verdicts = ("Best setting by final validation accuracy", "No single best setting by final "
                "validation accuracy", "No setting learned anything")  # fmt: skip
    assert sum(v in md for v in verdicts) == 1, md[:2000]
    for figure in ("accuracy_per_epoch", "metric_by_axis", "time_per_setting"):
        assert (out / "figures" / f"{figure}.png").stat().st_size > 1000
    check_in_browser(out / "report.html", tmp_path, images=3)


def check_in_browser(page: Path, tmp: Path, images: int) -> None:
    require(shutil.which("chromium") is not None, "chromium")
    import numpy as np
    from PIL import Image

    from tests.integration.test_bench_report import CHECK, _chromium, _html_problems

    text = page.read_text()
    assert _html_problems(text) == []
    probe = tmp / "probe.html"
    probe.write_text(text.replace("</body>", CHECK + "\n</body>"))
    done = _chromium(tmp, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    assert f"<title>loaded {images} of {images}</title>" in done.stdout, done.stdout[:300]
    shot = tmp / "shot.png"
    done = _chromium(tmp, f"--screenshot={shot}", "--window-size=1200,2400", "--hide-scrollbars",
                     page.as_uri())  # fmt: skip
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.std() > 10, "the screenshot is blank"


def test_a_sweep_with_hostile_values_and_results_path_stays_inert(workdir):
    hostile = "$(touch PWNED) a;b #$ -l h=x"
    make_data(workdir / "data" / hostile, (12, 12))  # a dataset at a hostile path
    sweep = workdir / "s.toml"
    sweep.write_text('trainer_args = ["--epochs", "1", "--max-steps", "1"]\n')
    refused = hpcbench("sweep", str(sweep), "--results", "r$x", "--scheduler", "local",
                       cwd=workdir)  # fmt: skip
    assert refused.returncode == 2 and "must not hold '$'" in refused.stderr
    assert not (workdir / "r$x").exists()  # refused before anything was written
    results = workdir / "r a;b #x"
    r = hpcbench("sweep", str(sweep), "--results", str(results), "--scheduler", "local",
                 "--axis", f"data=data/{hostile}", cwd=workdir, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list(workdir.rglob("PWNED"))
    (run,) = (results / "runs").iterdir()
    assert run.name == "data=touch_PWNED_a_b_-l_h_x"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["run"]["dataset"] == str(workdir / "data" / hostile)  # intact


def test_a_sweep_whose_job_sets_the_run_or_checkpoint_directory_is_refused(workdir):
    sweep = workdir / "s.toml"
    for option in ("--output-dir", "--checkpoint-dir"):
        sweep.write_text(f'trainer_args = ["{option}", "shared"]\n[axes]\nlr = [0.1, 0.2]\n')
        r = hpcbench("sweep", str(sweep), "--scheduler", "local", cwd=workdir)
        assert r.returncode == 2 and f"set {option}: each task writes its own" in r.stderr
        assert not (workdir / "runs").exists()


def test_cancelling_a_local_array_starts_none_of_its_pending_tasks(workdir):
    tasks_dir = workdir / "tasks"
    tasks_dir.mkdir()
    for k in (1, 2, 3):
        (tasks_dir / f"{k}.run").write_text(f"t{k}\n")
        (tasks_dir / f"{k}.toml").write_text("")
    # long tasks (the cancel ends the running one): none can finish before the cancel, however
    # slowly a loaded machine runs this test
    spec = build_spec(
        {
            "program": {"command": ["sleep", "60"]},
            "launcher": {"kind": "direct"},
            "resources": {"job_name": "c"},
        }
    )
    spec.array = Array(3, str(tasks_dir), str(workdir / "runs"), max_parallel=1)
    job = submit(spec, "local", cwd=workdir)
    sched = get("local")
    deadline = time.monotonic() + 30
    while sched.statuses([job.tasks[0]])[job.tasks[0]].state != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    job.cancel()
    ended = sched.statuses(list(job.tasks))
    assert [ended[t].state for t in job.tasks] == ["CANCELLED"] * 3, ended
    time.sleep(1.5)  # a freed slot would have been taken by now
    assert not (workdir / "runs" / "t2").exists() and not (workdir / "runs" / "t3").exists()


def local_array(
    workdir: Path,
    size: int,
    command: list[str],
    parallel: int,
    name: str = "a",
    launcher: str = "direct",
):
    """Submit ``command`` as a local array of ``size`` tasks, at most ``parallel`` at a time.
    Started directly unless told: the tasks' programs import no torch, and torchrun's agent
    would (a test of a task that starts while its array is cancelled keeps torchrun, whose agent
    shares the task's process group)."""
    if launcher == "mpiexec":
        require(mpiexec_available(), "mpiexec")
    tasks_dir = workdir / f"tasks-{name}"
    tasks_dir.mkdir()
    for k in range(1, size + 1):
        (tasks_dir / f"{k}.run").write_text(f"{name}{k}\n")
        (tasks_dir / f"{k}.toml").write_text("")
    spec = build_spec(
        {
            "program": {"command": command},
            "launcher": {"kind": launcher},
            "resources": {"job_name": name},
        }
    )
    spec.array = Array(size, str(tasks_dir), str(workdir / "runs"), max_parallel=parallel)
    return submit(spec, "local", cwd=workdir)


def tasks_with_processes(job_id: str) -> set[str]:
    """The tasks of ``job_id`` (of this test's state directory) that have processes now."""
    import os

    mine = f"HPCBENCH_STATE_DIR={os.environ['HPCBENCH_STATE_DIR']}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # not a process, or one that ended meanwhile
            continue
        if mine not in environ:
            continue
        for e in environ:
            if e.startswith(f"HPCBENCH_JOB_ID={job_id}_".encode()):
                found.add(e.split(b"=", 1)[1].decode())
    return found


def test_a_big_local_array_starts_its_tasks_as_slots_free_up(workdir):
    """Forty tasks, two at a time: at no moment more than the running tasks' processes exist
    (not one waiting supervisor per task), and a cancel of the whole array is quick."""
    job = local_array(workdir, 40, ["sleep", "30"], parallel=2)
    sched = get("local")
    deadline = time.monotonic() + 30
    while sum(s.state == "RUNNING" for s in sched.statuses(list(job.tasks)).values()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    running = tasks_with_processes(job.job_id)
    assert len(running) == 2, running
    states = sched.statuses(list(job.tasks))
    assert states[job.tasks[-1]].state == "PENDING", states[job.tasks[-1]]
    assert states[job.tasks[-1]].reason == "waiting for a free slot of its array"
    job.cancel()
    ended = sched.statuses(list(job.tasks))
    assert {s.state for s in ended.values()} == {"CANCELLED"}, ended
    assert len(list((workdir / "runs").glob("a*/"))) <= 2  # only the two started ever ran


def test_a_task_that_cannot_start_fails_alone_and_the_array_stays_recorded(workdir):
    """A task's log made between the submission and its start: that task fails, naming the
    file; the others run, and the array (recorded before anything started) says so."""
    job = local_array(workdir, 3, ["sleep", "2"], parallel=1)
    (workdir / "runs" / f"a-{job.tasks[1]}.err").parent.mkdir(exist_ok=True)
    (workdir / "runs" / f"a-{job.tasks[1]}.err").write_text("someone else's\n")
    final = job.wait(timeout=60)
    assert final.state == "FAILED", final
    states = get("local").statuses(list(job.tasks))
    assert [states[t].state for t in job.tasks] == ["COMPLETED", "FAILED", "COMPLETED"], states
    assert f"a-{job.tasks[1]}.err" in states[job.tasks[1]].reason, states[job.tasks[1]]
    assert "exists" in states[job.tasks[1]].reason
    assert (workdir / "runs" / f"a-{job.tasks[1]}.err").read_text() == "someone else's\n"


def test_a_job_after_an_array_waits_for_all_its_tasks(workdir):
    """``submit --after ARRAY`` as SLURM's afterok on an array: it starts once every task has
    completed (and does not start when one failed)."""
    job = local_array(workdir, 3, ["sleep", "1"], parallel=2)
    r = hpcbench(
        "submit", "--scheduler", "local", "--after", job.job_id, "--program", "true",
        "--wait", "--timeout", "60", cwd=workdir, timeout=90,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    ended = get("local").statuses(list(job.tasks))
    assert {s.state for s in ended.values()} == {"COMPLETED"}, ended
    failing = local_array(workdir, 2, list(QUICK_FAIL), parallel=2, name="f")
    r = hpcbench(
        "submit", "--scheduler", "local", "--after", failing.job_id, "--program", "true",
        "--wait", "--timeout", "60", cwd=workdir, timeout=90,
    )  # fmt: skip
    assert r.returncode != 0 and "ended with status 1" in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_task_started_while_its_array_is_being_cancelled_is_ended_too(workdir, monkeypatch):
    """cancel reads the tasks, marks them, then signals: a task its dispatcher started between
    the reading and the marking (its record had no process yet) is ended all the same."""
    from hpcbench.jobs.schedulers.local.scheduler import LocalScheduler

    job = local_array(
        workdir, 2, ["bash", "-c", "sleep 3; echo finished-$((6 * 7))"], parallel=1,
        launcher="torchrun",
    )  # fmt: skip
    sched = get("local")
    deadline = time.monotonic() + 30
    while sched.statuses([job.tasks[0]])[job.tasks[0]].state != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    real = LocalScheduler._status

    def slow_status(self, job_id):  # widen the window: the second task starts meanwhile
        if job_id == job.tasks[1]:
            until = time.monotonic() + 30
            while self._load(job_id).get("pid") is None and time.monotonic() < until:
                time.sleep(0.05)
        return real(self, job_id)

    monkeypatch.setattr(LocalScheduler, "_status", slow_status)
    sched.cancel([job.job_id])
    monkeypatch.setattr(LocalScheduler, "_status", real)
    ended = job.wait(timeout=60)
    assert ended.state == "CANCELLED", ended
    out = workdir / "runs" / f"a-{job.tasks[1]}.out"
    assert "finished-42" not in (out.read_text() if out.exists() else ""), out.read_text()
