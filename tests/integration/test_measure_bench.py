"""A user's own training measured by ``hpcbench bench`` and ``hpcbench sweep`` through the local
scheduler: jobs/own-training's script as one process, two torchrun ranks and two MPI ranks, then
its report, the history, compare and check; a script that ends without its documents, named in
one line in the report while the others are drawn; a sweep of a script's own arguments and
settings, ranked."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import hpcbench, mpiexec_available, own_training_example, require

USER_SCRIPT = """
import argparse, os, sys, time
from hpcbench import measure

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--how", default="well")  # well | stop-early | crash | unmeasured | wrongly
how = p.parse_args().how
if how == "unmeasured":  # never calls the API
    time.sleep(0.1)
    sys.exit(0)
with measure.run(model="users-own", dataset="made-up") as m:
    with m.phase("train"):
        for step in range(4):
            time.sleep(0.02)
            m.step(samples="four" if how == "wrongly" and step == 2 else 16)
            if how == "crash" and step == 2:
                raise RuntimeError("the user's loop broke mid-epoch")
    if how == "stop-early":
        os._exit(0)  # ends without its documents
    m.epoch(train_loss=0.5, val_accuracy=0.6)
    m.final(test_accuracy=0.8)
"""


def write_script(workdir: Path) -> Path:
    path = workdir / "my_train.py"
    path.write_text(textwrap.dedent(USER_SCRIPT))
    return path


def test_the_own_training_example_is_benchmarked_reported_and_recorded_like_the_trainer(
    workdir,
):
    """jobs/own-training: the user's script (own model, ImageFolder) as one process, DDP under
    torchrun and an mpi4py loop under mpiexec, through the local scheduler (the matrix's smoke
    form); then its report, the history and check, as for the trainer's results (compare reads
    the same analysis: tests/unit/test_bench_analysis.py)."""
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    own_training_example(workdir, per_class=30)
    results = workdir / "runs" / "bench-own"
    history = {"HPCBENCH_HISTORY": str(workdir / "history.sqlite")}
    done = hpcbench(
        "bench", "jobs/own-training/matrix.toml", "--smoke", "--scheduler", "local",
        "--results", str(results), cwd=workdir, env=history, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads((results / "runs.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["completed"] * 3, runs
    metrics = {
        r["config"]: json.loads((results / r["run_dir"] / "metrics.json").read_text()) for r in runs
    }
    assert metrics["ddp-2"]["provenance"]["launcher"] == "torchrun"
    assert metrics["mpi-2"]["provenance"]["launcher"] in ("mpich", "openmpi")
    assert {c: m["run"]["strategy"] for c, m in metrics.items()} == {
        "single": "single", "ddp-2": "ddp", "mpi-2": "mpi"
    }  # fmt: skip
    assert all(m["run"]["global_batch"] == 16 and m["run"]["model"] == "ShapesNet"
               for m in metrics.values())  # fmt: skip
    assert all(m["run"]["device"] == "cpu" for m in metrics.values())

    report = hpcbench("report", str(results), cwd=workdir)
    assert report.returncode == 0, report.stderr
    text = (results / "report" / "report.md").read_text()
    assert "ddp-2" in text and "mpi-2" in text and "speedup" in text.lower()
    listed = hpcbench("history", cwd=workdir, env=history)
    assert "single, ddp-2, mpi-2" in listed.stdout, listed.stdout + listed.stderr
    (workdir / "refs.toml").write_text('[reference]\n"ddp-2" = { samples_per_s = [1, -1, inf] }\n')
    checked = hpcbench("check", str(results), "--references", "refs.toml", cwd=workdir, env=history)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_scripts_that_crash_end_early_never_measure_or_measure_wrongly_are_each_one_line(
    workdir,
):
    """Each named in one line of the report, and nothing lost of the runs that went well."""
    write_script(workdir)
    matrix = 'name = "odd"\nrepetitions = 1\nprogram = { script = "my_train.py" }\n'
    for how in ("well", "stop-early", "crash", "unmeasured", "wrongly"):
        # mpiexec starts the one process (torchrun would import torch for a script without it)
        matrix += f'[[config]]\nname = "{how}"\nstrategy = "single"\nlauncher = "mpiexec"\n'
        matrix += f'program_args = ["--how", "{how}"]\n'
    (workdir / "odd.toml").write_text(matrix)
    results = workdir / "runs" / "bench-odd"
    done = hpcbench(
        "bench", "odd.toml", "--scheduler", "local", "--results", str(results), "--no-history",
        cwd=workdir, timeout=600,
    )  # fmt: skip
    assert done.returncode != 0  # runs failed
    runs = {r["config"]: r for r in json.loads((results / "runs.json").read_text())["runs"]}
    assert {c: r["status"] for c, r in runs.items()} == {
        "well": "completed", "stop-early": "failed", "crash": "failed",
        "unmeasured": "failed", "wrongly": "completed",
    }  # fmt: skip
    for how in ("stop-early", "unmeasured"):
        assert "the program ended without writing metrics.json" in runs[how]["error"]
    assert "RuntimeError: the user's loop broke mid-epoch" in runs["crash"]["error"]
    report = hpcbench("report", str(results), cwd=workdir)
    assert report.returncode == 0, report.stderr
    text = (results / "report" / "report.md").read_text()
    assert "3 run(s) failed" in text
    # each failed run's cause: in the summary, in the failed runs' table, in its kept report
    for how in ("stop-early", "unmeasured"):
        rows = [line for line in text.splitlines() if line.startswith(f"| {how} |")]
        assert any("without writing metrics.json" in row for row in rows), rows
        (said,) = [line for line in text.splitlines() if line.startswith(f"- {how} timing run 1: ")]
        assert "the program ended without writing metrics.json" in said, said
    assert text.count("without writing metrics.json") == 6
    assert "1 run(s) completed with measurement warnings" in text
    assert "samples must be a whole number, got 'four'" in text
    assert "| well |" in text or "well" in text.split("## Accuracy")[1]  # the others reported


SWEPT_SCRIPT = """
import argparse
from hpcbench import measure

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
lr = p.parse_args().lr
chosen = measure.settings(batch=8, label="none")  # the task's settings file over these
with measure.run(model="swept", config={"lr": lr, **chosen}) as m:
    with m.phase("train"):
        for _ in range(3):
            m.step(samples=chosen["batch"])
    m.epoch(val_accuracy=1.0 - abs(lr - 0.1), label_length=len(chosen["label"]))
"""


def test_a_sweep_of_a_user_script_reaches_it_as_arguments_and_settings_and_is_ranked(workdir):
    (workdir / "swept.py").write_text(textwrap.dedent(SWEPT_SCRIPT))
    (workdir / "job.toml").write_text('[launcher]\nkind = "mpiexec"\n')  # no torch to import
    (workdir / "sweep.toml").write_text(
        'name = "own"\njob = "job.toml"\nprogram = { script = "swept.py" }\n'
        'program_args = ["--lr", "{lr}"]\nmax_parallel = 1\n'
        '[axes]\nlr = [0.01, 0.1, 0.5]\nlabel = ["it\'s quoted; $(id)"]\n'
    )
    results = workdir / "runs" / "sweep-own"
    done = hpcbench(
        "sweep", "sweep.toml", "--scheduler", "local", "--results", str(results),
        cwd=workdir, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    runs = sorted((results / "runs").iterdir())
    assert len(runs) == 3
    for run_dir in runs:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        config = metrics["config"]
        assert str(config["lr"]) in run_dir.name  # the argument reached the program
        assert config["label"] == "it's quoted; $(id)"  # the settings file, never a shell's
        assert metrics["run"]["global_batch"] == 8
    report = hpcbench("report", str(results), cwd=workdir)
    assert report.returncode == 0, report.stderr
    ranked = (results / "report" / "report.md").read_text()
    assert "Best setting by final validation accuracy" in ranked and "lr = 0.1," in ranked
    rows = [line.split("|")[1:3] for line in ranked.splitlines() if line.startswith("| ")]
    assert [(r.strip(), lr.strip()) for r, lr in rows[1:]] == [
        ("1", "0.1"),
        ("2", "0.01"),
        ("3", "0.5"),
    ]
