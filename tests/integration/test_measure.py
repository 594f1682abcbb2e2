"""The measurement API for any training (:mod:`hpcbench.measure`), in real processes: one plain
process, two ranks under torchrun (gathered through torch.distributed's gloo group, and, without
a process group, through files in the run directory), two MPI ranks under mpiexec (through
mpi4py). The documents they write are read by the results reader and recorded in the history
as the trainer's are."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import hpcbench, mpiexec_available, need_module, require
from tests.integration.test_trainer import launch, run

#: a user's loop without torch: rank 1 is the slow one, every rank steps 4 samples at a time
LOOP = """
import os, sys, time
from hpcbench import measure
from hpcbench.this_rank import detect_launch

{prologue}
slow = 0.03 if detect_launch().rank == 1 else 0.0
m = measure.start(sys.argv[1], model="loop", dataset="made-up", config={{"lr": 0.1}})
with m.phase("setup"):
    time.sleep(0.02)
for epoch in range(2):
    with m.phase("train"):
        for step in range(3):
            time.sleep(0.01 + slow)
            m.step(samples=4)
    with m.phase("validation"):
        time.sleep(0.01)
    m.epoch(train_loss=1.0 / (epoch + 1), val_accuracy=0.5 + 0.1 * epoch, tokens=epoch)
with m.phase("test"):
    m.final(test_accuracy=0.7, test_loss=0.4)
written = m.finish()
{epilogue}
print("written:", written)
"""


def script(tmp_path: Path, prologue: str = "", epilogue: str = "") -> Path:
    path = tmp_path / "train_loop.py"
    path.write_text(textwrap.dedent(LOOP.format(prologue=prologue, epilogue=epilogue)))
    return path


def documents(run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (
        metrics["format"] == "hpcbench-metrics/1" and metrics["measured_by"] == "hpcbench.measure"
    )
    return metrics


def check_two_ranks(run_dir: Path, launcher: str, strategy: str) -> None:
    m = documents(run_dir)
    run_ = m["run"]
    assert (run_["world_size"], run_["strategy"], run_["global_batch"]) == (2, strategy, 8)
    assert run_["batch_sizes"] == [4, 4] and run_["epochs"] == 2 and run_["steps_per_epoch"] == 3
    assert m["provenance"]["launcher"] == launcher
    # the slowest rank's time: rank 1 slept 0.04 s a step, 6 steps
    assert m["phases"]["train_s"] >= 6 * 0.04
    assert m["throughput"]["train_samples_per_s"] == pytest.approx(48 / m["phases"]["train_s"])
    assert [e["epoch"] for e in m["epochs"]] == [1, 2] and m["epochs"][1]["tokens"] == 1.0
    assert m["epochs"][0]["samples_per_s"] == pytest.approx(24 / m["epochs"][0]["train_time_s"])
    assert m["warnings"] == [] and not (run_dir / ".measure").exists()
    # each rank's own times: the slow one is rank 1, and its time is the run's
    ranks = {r["rank"]: r for r in m["ranks"]}
    assert set(ranks) == {0, 1} and ranks[1]["phases"]["train_s"] > ranks[0]["phases"]["train_s"]
    assert ranks[1]["phases"]["train_s"] == m["phases"]["train_s"]


def test_one_process_without_a_launcher_writes_the_trainer_s_documents(tmp_path):
    out = tmp_path / "run"
    done = run([sys.executable, str(script(tmp_path)), str(out)], tmp_path)
    assert done.returncode == 0, done.stderr
    said = done.stderr.strip().splitlines()  # by hand: where it wrote, at the end
    assert said[-1] == f"hpcbench.measure: wrote {out.resolve() / 'metrics.json'}"
    m = documents(out)
    assert m["run"]["world_size"] == 1 and m["run"]["strategy"] == "single"
    assert set(m["phases"]) >= {"setup_s", "train_s", "val_s", "test_s"}  # validation -> val
    assert m["phases"]["data_s"] is None and m["phases"]["comm_s"] is None  # never a guessed 0
    assert m["test"] == {"accuracy": 0.7, "loss": 0.4} and m["validation"] == pytest.approx(0.6)
    assert [w["phase"] for w in m["phase_windows"]] == ["setup"] + ["train", "val"] * 2 + ["test"]
    header = (out / "epochs.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "epoch" and header[-1] == "tokens"  # the program's own value, last

    # read as the trainer's: the history records it
    recorded = hpcbench(
        "history",
        "--add",
        str(out),
        cwd=tmp_path,
        env={"HPCBENCH_HISTORY": str(tmp_path / "history.sqlite")},
    )
    assert recorded.returncode == 0, recorded.stderr


def test_two_torchrun_ranks_without_a_process_group_meet_through_files(tmp_path):
    out = tmp_path / "run"
    done = run(launch("ddp", 2, [str(script(tmp_path)), str(out)]), tmp_path)
    assert done.returncode == 0, done.stderr
    check_two_ranks(out, "torchrun", "ddp")


def test_two_torchrun_ranks_with_a_gloo_group_gather_through_it(tmp_path):
    need_module("torch")
    group = "import torch.distributed as dist\ndist.init_process_group('gloo')"
    path = script(tmp_path, prologue=group, epilogue="dist.destroy_process_group()")
    out = tmp_path / "run"
    done = run(launch("ddp", 2, [str(path), str(out)]), tmp_path)
    assert done.returncode == 0, done.stderr
    check_two_ranks(out, "torchrun", "ddp")


def test_two_mpi_ranks_gather_through_mpi4py(tmp_path):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    need_module("mpi4py")
    out = tmp_path / "run"
    path = script(tmp_path, prologue="from mpi4py import MPI")
    done = run(launch("mpi", 2, [str(path), str(out)]), tmp_path)
    assert done.returncode == 0, done.stderr
    check_two_ranks(out, "mpich", "mpi")


def test_a_crash_writes_nothing_and_wrong_calls_are_warnings_not_exceptions(tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text(
        "from hpcbench import measure\n"
        "with measure.run('out') as m:\n"
        "    with m.phase('train'):\n"
        "        m.step(samples=2)\n"
        "        raise RuntimeError('the user loop broke')\n"
    )
    done = run([sys.executable, str(crash)], tmp_path)
    assert done.returncode == 1 and "RuntimeError: the user loop broke" in done.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()  # a failed run is not a measured one

    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "from hpcbench import measure\n"
        "with measure.run('out2') as m:\n"
        "    m.end('train')\n"  # never opened
        "    m.begin('Train Loop')\n"  # not a phase name
        "    m.step(samples='four')\n"  # not a count
        "    m.epoch(val_accuracy='high')\n"  # not a number
        "    m.begin('train')\n"  # left open
        "    m.step(samples=3)\n"
        "print('the loop went on')\n"
    )
    done = run([sys.executable, str(wrong)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "the loop went on" in done.stdout and "MeasureWarning" in done.stderr
    warned = documents(tmp_path / "out2")["warnings"]
    assert any("no open phase 'train'" in w for w in warned)
    assert any("'Train Loop'" in w for w in warned)
    assert any("samples must be a whole number, got 'four'" in w for w in warned)
    assert any("'high' is not a number" in w for w in warned)
    assert any("phase 'train' still open at the end" in w for w in warned)


def test_settings_come_from_the_sweep_task_s_file_over_the_program_s_defaults(tmp_path):
    settings = tmp_path / "3.toml"
    settings.write_text('lr = 0.5\nbatch-size = 64\noptimizer = 7\nextra = "kept"\n')
    ask = (
        "import json; from hpcbench import measure; "
        "print(json.dumps(measure.settings(lr=0.1, batch_size=32, optimizer='sgd')))"
    )
    done = run(
        [sys.executable, "-c", ask], tmp_path, extra_env={"HPCBENCH_SETTINGS": str(settings)}
    )
    assert done.returncode == 0, done.stderr
    chosen = json.loads(done.stdout)
    assert chosen == {"lr": 0.5, "batch_size": 64, "optimizer": "sgd", "extra": "kept"}
    assert "optimizer = 7 is not a str" in done.stderr
    alone = run([sys.executable, "-c", ask], tmp_path)  # outside a sweep: the defaults
    assert json.loads(alone.stdout) == {"lr": 0.1, "batch_size": 32, "optimizer": "sgd"}
