"""Sweeps without running a trainer: the plan of a sweep file (product, zip, random draws, run
names), its errors, the array job each scheduler's template renders (directives, shellcheck), the
array script run for real with bash (each task reads its own settings and run directory, hostile
paths inert), the trainer's --settings layer, and the array states read from recorded scheduler
outputs (PBS and LSF have no test cluster here; SLURM's and Grid Engine's are tested for real in
tests/cluster/)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.jobs.render import RenderError, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    JobStatus,
    array_status,
)
from hpcbench.jobs.schedulers.lsf.scheduler import parse_bjobs
from hpcbench.jobs.schedulers.pbs.scheduler import PbsScheduler, job_status, parse_qstat
from hpcbench.jobs.spec import Array
from hpcbench.jobs.spec_load import build_spec
from hpcbench.sweep.plan import SweepError, build_sweep, parse_axis, read_sweep, run_name
from hpcbench.train.command_line import parse_args
from hpcbench.train.config import ConfigError
from tests.conftest import require
from tests.unit.test_injection import CANARY, HOSTILE

REPO = Path(__file__).resolve().parents[2]


def sweep_of(**table):
    return build_sweep(table, "s.toml", "s")


# ------------------------------------------------------------------------------------ the plan


def test_a_product_zip_and_random_plan():
    axes = {"global-batch-size": [72, 96, 128], "lr": [0.01, 0.05]}
    product = sweep_of(axes=axes).settings()
    assert len(product) == 6 and product[0] == {"global-batch-size": 72, "lr": 0.01}
    assert product[-1] == {"global-batch-size": 128, "lr": 0.05}
    zipped = sweep_of(axes={"lr": [0.1, 0.2], "epochs": [3, 4]}, mode="zip").settings()
    assert zipped == [{"lr": 0.1, "epochs": 3}, {"lr": 0.2, "epochs": 4}]
    drawn = sweep_of(axes=axes, mode="random", draws=4, seed=7).settings()
    assert len(drawn) == 4 and all(d in product for d in drawn)
    assert len({tuple(d.items()) for d in drawn}) == 4  # drawn without repeats
    assert drawn == sweep_of(axes=axes, mode="random", draws=4, seed=7).settings()  # seeded
    assert drawn != sweep_of(axes=axes, mode="random", draws=4, seed=8).settings()
    # more draws than settings: every setting once
    assert len(sweep_of(axes=axes, mode="random", draws=50).settings()) == 6


def test_tasks_repeat_each_setting_and_name_their_run_directories():
    tasks = sweep_of(axes={"lr": [0.01, 0.1]}, repetitions=2).tasks()
    assert [t.index for t in tasks] == [1, 2, 3, 4]
    assert [t.run for t in tasks] == ["lr=0.01,rep=1", "lr=0.1,rep=1", "lr=0.01,rep=2",
                                      "lr=0.1,rep=2"]  # fmt: skip
    assert [t.rep for t in tasks] == [1, 1, 2, 2]
    assert sweep_of(axes={}).tasks()[0].run == "default"


@pytest.mark.parametrize("value", ["../../etc", ".hidden", "a b/c;d", "x\ny", "", "/", "$(id)"])
def test_a_run_name_is_safe_whatever_the_value(value):
    name = run_name({"data": value, "model": value})
    assert name and not name.startswith(".") and "/" not in name and ".." not in name.split(",")
    assert set(name) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._=,+-")


def test_names_alike_once_made_safe_stay_apart_and_long_ones_are_shortened():
    tasks = sweep_of(axes={"data": ["a/shapes", "b/shapes"]}).tasks()
    assert len({t.run for t in tasks}) == 2
    long = run_name({"model": "x" * 500})
    assert len(long) <= 120 and long != run_name({"model": "x" * 499})


@pytest.mark.parametrize(
    "table, says",
    [
        ({"axes": {"lrr": [0.1]}}, "unknown option 'lrr'; did you mean 'lr'"),
        ({"axes": {"lr": ["fast"]}}, "lr must be a number"),
        ({"axes": {"lr": []}}, "axes.lr: expected a list of values"),
        ({"axes": {"output-dir": ["x"]}}, "axes.output-dir: each task's run directory"),
        ({"axes": {"lr": [1], "epochs": [1, 2]}, "mode": "zip"}, "mode zip needs axes of one"),
        ({"axes": {"lr": [1]}, "mode": "random"}, "draws: mode random: say how many"),
        ({"axes": {"lr": [1]}, "draws": 3}, "draws: only mode random draws"),
        ({"axes": {"lr": list(range(101)), "epochs": list(range(1, 101))}}, "more than 10000"),
        ({"metric": "speed"}, "metric: expected one of val_accuracy"),
        ({"mode": "grid"}, "mode: expected one of product, zip, random"),
        ({"colour": 1}, "colour: unknown key"),
        ({"max_parallel": 0}, "max_parallel: expected a whole number from 1"),
        ({"job": "a.toml", "matrix": "b.toml"}, "job: give job or matrix, not both"),
        # a sweep of any program
        (
            {"program": {"script": "t.py"}, "program_args": ["--lr={lrr}"], "axes": {"lr": [1]}},
            "program_args: '--lr={lrr}': {lrr} names no axis (axes: lr)",
        ),
        (
            {"program": {"script": "t.py"}, "trainer_args": ["--epochs", "1"]},
            "trainer_args: a program is named (program = ...): give its arguments as program_args",
        ),
        ({"program_args": ["--x"]}, "program_args: the arguments of a program named with"),
        ({"program": {"script": "t.py"}, "axes": {"a b": [1]}}, "axes.a b: an axis name is"),
        ({"program": {"script": "t.py"}, "axes": {"x": [[1]]}}, "axes.x: expected text, a number"),
        ({"program": {"script": "t.py", "module": "m"}}, "program: give exactly one of module"),
    ],
)
def test_a_bad_sweep_is_one_line_naming_the_file_and_key(table, says):
    with pytest.raises(SweepError) as err:
        sweep_of(**table)
    assert says in str(err.value) and "s.toml" in str(err.value)
    assert "\n" not in str(err.value)


def test_axis_flags_replace_the_files_axes(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[axes]\nlr = [0.1]\nepochs = [1, 2]\n[smoke]\naxes = { epochs = [1] }\n")
    sweep = read_sweep(path, axes=["lr=0.01,0.05", "model=small_cnn,mlp"], max_parallel=3)
    assert sweep.axes == {"lr": [0.01, 0.05], "epochs": [1, 2], "model": ["small_cnn", "mlp"]}
    assert sweep.max_parallel == 3 and sweep.name == "s"
    assert read_sweep(path, smoke=True).axes == {"epochs": [1]}
    assert parse_axis("deterministic=true,false") == ("deterministic", [True, False])
    with pytest.raises(SweepError, match="--axis"):
        parse_axis("lr")


def test_the_reference_studys_sweeps_plan_the_studys_search():
    sweep = read_sweep(REPO / "jobs/reference-study/sweep.toml")
    settings = sweep.settings()
    assert len(settings) == 12 and sweep.metric == "val_accuracy"
    assert {s["data"] for s in settings} == {"data/shapes-295x222", "data/shapes-148x112"}
    assert sorted({s["global-batch-size"] for s in settings}) == [72, 96, 128, 160, 192, 256]
    assert len(read_sweep(REPO / "jobs/reference-study/sweep.toml", smoke=True).tasks()) == 4
    validation = read_sweep(REPO / "jobs/reference-study/sweep-validation.toml")
    assert len(validation.tasks()) == 9 and validation.metric == "total_s"


# ------------------------------------------------------------------------- the trainer's layer


def test_settings_override_the_config_file_and_the_flags(tmp_path, monkeypatch):
    config = tmp_path / "train.toml"
    config.write_text("global-batch-size = 128\nlr = 0.05\nepochs = 9\n")
    settings = tmp_path / "1.toml"
    settings.write_text("batch-size-per-rank = 8\nlr = 0.2\n")
    c = parse_args(["--config", str(config), "--lr", "0.1", "--settings", str(settings)])
    assert (c.batch.lr, c.batch.epochs, c.batch.batch_size_per_rank, c.batch.global_batch_size) == (
        0.2,
        9,
        8,
        None,
    )
    monkeypatch.setenv("HPCBENCH_SETTINGS", str(settings))  # what a task's script sets
    assert parse_args(["--lr", "0.1"]).batch.lr == 0.2
    settings.write_text('lr = "fast"\n')
    with pytest.raises(ConfigError, match=f"{settings}: lr must be a number"):
        parse_args([])


# ------------------------------------------------------------------------ the array job script


def array_spec(tmp: Path, size: int = 3, parallel: int | None = 2, **extra):
    tasks, runs = tmp / "tasks", tmp / "runs"
    tasks.mkdir(parents=True, exist_ok=True)
    for k in range(1, size + 1):
        (tasks / f"{k}.toml").write_text(f"lr = 0.{k}\n")
        (tasks / f"{k}.run").write_text(f"lr=0.{k}\n")
    spec = build_spec({"resources": {"job_name": "sweep-t"}, **extra})
    spec.array = Array(size, str(tasks), str(runs), parallel)
    return spec


ARRAY_LINES = {
    "slurm": ["#SBATCH --array=1-3%2\n", "#SBATCH --output=runs/sweep-t-%A_%a.out\n"],
    "sge": ["#$ -t 1-3\n", "#$ -tc 2\n"],
    "pbs": ["#PBS -J 1-3\n", "#PBS -W max_run_subjobs=2\n"],
    "lsf": ['#BSUB -J "sweep-t[1-3]%2"\n', '#BSUB -o "runs/sweep-t-%J[%I].out"\n'],
    "local": [],
}


@pytest.mark.parametrize("scheduler", list(SCHEDULER_CLASSES))
def test_every_scheduler_renders_an_array_that_shellcheck_passes(scheduler, tmp_path):
    text = render_script(array_spec(tmp_path), scheduler)
    for line in ARRAY_LINES[scheduler]:
        assert line in text, text
    assert 'export HPCBENCH_SETTINGS="$tasks_dir/$task_index.toml"' in text
    torque = render_script(array_spec(tmp_path, scheduler={"pbs_resources": "nodes"}), "pbs")
    assert "#PBS -t 1-3%2\n" in torque
    script = tmp_path / "job.sh"
    script.write_text(text)
    require(shutil.which("shellcheck") is not None, "shellcheck (Debian package)")
    lint = subprocess.run(["shellcheck", "--shell=bash", "--severity=style", str(script)],
                          capture_output=True, text=True)  # fmt: skip
    assert lint.returncode == 0, lint.stdout


def test_a_slurm_array_task_requeues_itself_alone(tmp_path):
    text = render_script(array_spec(tmp_path), "slurm")
    assert 'job_id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' in text
    assert 'scontrol requeue "$job_id"' in text and 'scontrol requeue "$SLURM_JOB_ID"' not in text
    assert '--array="$task_index"' in text  # a resubmission runs the same task index


# What a task's launcher sees: every launcher (and blaunch) records the variables of the task.
LAUNCH_RECORDER = f"""#!{sys.executable}
import json, os
with open(os.environ["HPCB_RECORD"], "a") as fh:
    names = ("HPCBENCH_SETTINGS", "HPCBENCH_RUN_DIR", "HPCBENCH_JOB_ID")
    fh.write(json.dumps({{k: os.environ.get(k) for k in names}}) + "\\n")
"""


@pytest.fixture
def task_sandbox(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("srun", "torchrun", "mpiexec", "blaunch", "python"):
        (bindir / name).write_text(LAUNCH_RECORDER)
        (bindir / name).chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HPCB_RECORD": str(tmp_path / "record.jsonl"),
           "HOME": str(tmp_path)}  # fmt: skip
    for cls in SCHEDULER_CLASSES.values():
        env.update(cls.job_environment("123", ["node1"], tmp_path))
    (tmp_path / "work").mkdir()
    return tmp_path, env


TASK_ENV = {
    "SLURM_ARRAY_JOB_ID": "123",
    "SLURM_ARRAY_TASK_ID": "2",
    "SGE_TASK_ID": "2",
    "PBS_ARRAY_INDEX": "2",
    "LSB_JOBINDEX": "2",
    "HPCBENCH_ARRAY_INDEX": "2",
}


@pytest.mark.parametrize("scheduler", list(SCHEDULER_CLASSES))
def test_a_task_reads_its_own_settings_and_run_directory_and_hostile_paths_stay_inert(
    task_sandbox, scheduler
):
    tmp, env = task_sandbox
    env = {**env, **TASK_ENV, "HPCBENCH_JOB_ID": "local-5_2"}
    expected_id = {"slurm": "123_2", "sge": "123.2", "pbs": "123[2]", "lsf": "123[2]",
                   "local": "local-5_2"}  # fmt: skip
    env["PBS_JOBID"] = "123[2].server"
    for value in HOSTILE:
        where = tmp / "results" / value.replace("/", "_")
        script = tmp / "job.sh"
        script.write_text(render_script(array_spec(where), scheduler))
        record = Path(env["HPCB_RECORD"])
        record.unlink(missing_ok=True)
        run = subprocess.run(["bash", str(script)], cwd=tmp / "work", env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert not list(tmp.rglob(CANARY)), f"{value!r} executed something"
        assert (where / "runs" / "lr=0.2").is_dir()  # task 2's run directory, by its .run file
        (seen,) = {line for line in record.read_text().splitlines()}
        assert json.loads(seen) == {
            "HPCBENCH_SETTINGS": str(where / "tasks" / "2.toml"),
            "HPCBENCH_RUN_DIR": str(where / "runs" / "lr=0.2"),
            "HPCBENCH_JOB_ID": expected_id[scheduler],
        }


ARGV_RECORDER = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["HPCB_RECORD"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
"""


@pytest.mark.parametrize("scheduler", list(SCHEDULER_CLASSES))
def test_a_task_of_any_program_gets_its_own_arguments_as_words_never_read_by_a_shell(
    task_sandbox, scheduler
):
    """A sweep of any program: task K's arguments, from ``K.args`` (NUL-ended), follow the
    job's own, each one word whatever it holds; the script passes shellcheck."""
    tmp, env = task_sandbox
    for name in ("srun", "torchrun", "mpiexec", "blaunch", "python"):
        (tmp / "bin" / name).write_text(ARGV_RECORDER)
    where = tmp / "results"
    spec = array_spec(where, program={"script": "prog.py", "args": ["--fixed"]})
    spec.array.task_args = True
    hostile = "$(touch CANARY) it's; `id`"
    (where / "tasks" / "2.args").write_text("".join(f"{w}\x00" for w in ("--lr", "0.2", hostile)))
    text = render_script(spec, scheduler)
    script = tmp / "job.sh"
    script.write_text(text)
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", "--shell=bash", "--severity=style", str(script)],
                              capture_output=True, text=True)  # fmt: skip
        assert lint.returncode == 0, lint.stdout
    run = subprocess.run(["bash", str(script)], cwd=tmp / "work", env={**env, **TASK_ENV},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert not list(tmp.rglob("CANARY"))
    argv = json.loads(Path(env["HPCB_RECORD"]).read_text().splitlines()[-1])
    assert argv[-5:] == ["prog.py", "--fixed", "--lr", "0.2", hostile], argv
    # a task without arguments of its own (a sweep read through the settings file alone)
    (where / "tasks" / "2.args").write_text("")
    Path(env["HPCB_RECORD"]).unlink()
    run = subprocess.run(["bash", str(script)], cwd=tmp / "work", env={**env, **TASK_ENV},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    argv = json.loads(Path(env["HPCB_RECORD"]).read_text().splitlines()[-1])
    assert argv[-2:] == ["prog.py", "--fixed"], argv
    (where / "tasks" / "2.args").unlink()  # missing: one line naming it, nothing started
    run = subprocess.run(["bash", str(script)], cwd=tmp / "work", env={**env, **TASK_ENV},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2 and "2.args is missing" in run.stderr


def test_a_sweep_of_a_matrixs_own_program_takes_its_axes_and_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    sweep = sweep_of(
        matrix="jobs/own-training/matrix.toml",
        program_args=["--width", "{hidden}"],
        axes={"hidden": [8, 16]},
    )
    assert sweep.program == {"script": "jobs/own-training/train.py"}
    [first, _] = sweep.tasks()
    assert sweep.task_arguments(first.setting)[-2:] == ["--width", "8"]
    assert sweep.task_arguments(first.setting)[:2] == ["--data", "data/own-images"]


@pytest.mark.parametrize("name", ["../escape", ".hidden", "a b", "", "x/y"])
def test_a_task_whose_run_name_file_was_tampered_with_stops_before_anything(task_sandbox, name):
    tmp, env = task_sandbox
    spec = array_spec(tmp / "r", program={"command": ["env"]})
    (tmp / "r" / "tasks" / "2.run").write_text(name + "\n")
    script = tmp / "job.sh"
    script.write_text(render_script(spec, "local"))
    run = subprocess.run(["bash", str(script)], cwd=tmp / "work",
                         env={**env, **TASK_ENV, "HPCBENCH_JOB_ID": "local-5_2"},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2 and "does not name the run directory of task 2" in run.stderr
    assert not (tmp / "r" / "runs").exists() and not (tmp / "escape").exists()


def test_a_task_without_an_index_stops(task_sandbox):
    tmp, env = task_sandbox
    script = tmp / "job.sh"
    script.write_text(render_script(array_spec(tmp / "r"), "slurm"))
    run = subprocess.run(["bash", str(script)], cwd=tmp / "work", env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2 and "no task index in SLURM_ARRAY_TASK_ID" in run.stderr


def test_a_scheduler_without_arrays_is_refused(tmp_path, monkeypatch):
    cls = SCHEDULER_CLASSES["local"]
    monkeypatch.setattr(cls, "array_index_var", "")
    with pytest.raises(RenderError, match="runs no arrays"):
        render_script(array_spec(tmp_path), "local")


# --------------------------------------------------------------- array states (recorded outputs)


def test_task_ids_of_every_scheduler():
    ids = {name: cls.task_id("77", 3) for name, cls in SCHEDULER_CLASSES.items()}
    assert ids == {"slurm": "77_3", "sge": "77.3", "pbs": "77[3]", "lsf": "77[3]",
                   "local": "77_3"}  # fmt: skip
    assert PbsScheduler.task_id("77[].pbs01", 3) == "77[3].pbs01"
    for name, cls in SCHEDULER_CLASSES.items():
        cls().check_ids([cls.task_id("local-77" if name == "local" else "77", 3)])


def test_pbs_subjob_states_from_a_recorded_qstat():
    recorded = """Job Id: 77[1].pbs01
    Job_Name = sweep-t
    job_state = F
    Exit_status = 0

Job Id: 77[2].pbs01
    Job_Name = sweep-t
    job_state = R

Job Id: 77[3].pbs01
    Job_Name = sweep-t
    job_state = F
    Exit_status = 1
"""
    jobs = parse_qstat(recorded)
    states = [job_status(jobs[f"77[{k}].pbs01"]).state for k in (1, 2, 3)]
    assert states == [COMPLETED, RUNNING, FAILED]
    logs = PbsScheduler().task_log_paths(build_spec({"resources": {"job_name": "t"}}),
                                         "77[2].pbs01", 2, Path("/w"))  # fmt: skip
    assert logs == (Path("/w/runs/t.o77.2"), Path("/w/runs/t.e77.2"))


def test_lsf_element_states_from_a_recorded_bjobs():
    recorded = "77[1]|DONE|-|-\n77[2]|RUN|-|-\n77[3]|EXIT|1|TERM_OWNER: job killed by owner\n"
    found = parse_bjobs(recorded, ["77[1]", "77[2]", "77[3]"])
    assert [found[f"77[{k}]"].state for k in (1, 2, 3)] == [COMPLETED, RUNNING, CANCELLED]


def test_an_arrays_state_from_its_tasks():
    done, failed = JobStatus(COMPLETED, 0), JobStatus(FAILED, 1)
    assert array_status([done, JobStatus(RUNNING), JobStatus(PENDING)]).state == RUNNING
    assert array_status([done, JobStatus(PENDING)]).state == PENDING
    assert array_status([done, done]).state == COMPLETED
    whole = array_status([done, failed, JobStatus(CANCELLED)])
    assert whole.state == FAILED and whole.reason == "2 of 3 tasks did not complete"


def test_a_single_task_pbs_pro_array_is_a_range_qsub_takes(tmp_path):
    text = render_script(array_spec(tmp_path, size=1, parallel=None), "pbs")
    assert "#PBS -J 1-2:2\n" in text  # 1-1 is refused; 1-2:2 is the one subjob 1


def test_a_plain_jobs_script_never_inherits_a_settings_file(task_sandbox):
    tmp, env = task_sandbox
    (tmp / "stale.toml").write_text("lr = 9.0\n")
    script = tmp / "job.sh"
    script.write_text(render_script(build_spec({}), "slurm"))
    run = subprocess.run(["bash", str(script)], cwd=tmp / "work",
                         env={**env, "HPCBENCH_SETTINGS": str(tmp / "stale.toml")},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    seen = [json.loads(line) for line in Path(env["HPCB_RECORD"]).read_text().splitlines()]
    assert seen and all(s["HPCBENCH_SETTINGS"] is None for s in seen)


def test_a_task_stopped_after_a_checkpoint_is_to_do_and_a_continuation_is_followed(tmp_path):
    from hpcbench.sweep.runner import FAILED, TODO, SweepRunner, TaskState

    runner = SweepRunner(sweep_of(axes={"lr": [0.1]}), tmp_path / "r")
    st = TaskState(runner.tasks[0], job_id="77_1", scheduler="slurm")
    control = runner.run_dir(st.task) / "control"
    control.mkdir(parents=True)
    runner._apply(st, JobStatus(COMPLETED, 0))
    assert st.state == FAILED and st.reason == "ended (exit 0) without metrics.json"
    (control / "stopped").write_text("timelimit\n")  # the ranks stopped after a checkpoint
    runner._apply(st, JobStatus(FAILED, 0))
    assert st.state == TODO and "resumes" in st.reason
    assert runner._continued(st) is None
    (control / "continued-as").write_text("78_1\n")  # the script resubmitted itself
    assert runner._continued(st) == "78_1"
    (control / "continued-as").write_text("../../x\n")  # not an id of this scheduler
    assert runner._continued(st) is None


def test_the_sweep_command_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path):
    from tests.conftest import hpcbench

    sweep = tmp_path / "s.toml"
    sweep.write_text("[axes]\nlr = [0.1]\n")
    for args, says in (
        (["--max-parallel", "0"], "--max-parallel: expected a whole number from 1 to 10,000"),
        (["--repetitions", "x"], "--repetitions: expected a whole number from 1 to 10,000"),
        (["--axis", "lr"], "--axis 'lr': expected OPTION=VALUE,VALUE"),
    ):
        r = hpcbench("sweep", str(sweep), "--scheduler", "local", *args, cwd=tmp_path)
        assert r.returncode == 2 and says in r.stderr, r.stderr
    missing = hpcbench("sweep", str(tmp_path / "none.toml"), cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip().endswith("none.toml: no such file")
    assert not (tmp_path / "runs").exists()  # nothing written


# ------------------------------------------------------------------ a results directory as data


def _sweep_results(root: Path, runs: list[str]) -> Path:
    """A sweep's results directory as ``hpcbench sweep`` writes it, with the tasks' run names
    given (each with a metrics.json where it is a plain name)."""
    from hpcbench.sweep.runner import SWEEP_FORMAT

    sweep = sweep_of(axes={"lr": [0.1]})
    tasks = [{"index": i, "setting": {"lr": 0.1}, "rep": i, "run": r} for i, r in enumerate(runs)]
    root.mkdir(parents=True)
    doc = {"format": SWEEP_FORMAT, "sweep": sweep.to_dict(), "tasks": tasks}
    (root / "sweep.json").write_text(json.dumps(doc))
    for r in runs:
        if "/" not in r and r not in (".", ".."):
            (root / "runs" / r).mkdir(parents=True)
            (root / "runs" / r / "metrics.json").write_text('{"validation": 0.5}')
    return root


@pytest.mark.parametrize("run", ["../../elsewhere", "/tmp/elsewhere", "..", "a/../../b", 7])
def test_a_sweep_task_whose_run_leaves_the_results_directory_is_refused_unread(tmp_path, run):
    """sweep.json is data: a task's run that is absolute or climbs out never makes the report
    read a metrics.json from elsewhere (nor the runner write there)."""
    from hpcbench.sweep.analysis import analyse_sweep
    from tests.conftest import hpcbench

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "metrics.json").write_text('{"validation": 0.99}')
    root = _sweep_results(tmp_path / "r" / "s", ["lr=0.1,rep=0"])
    doc = json.loads((root / "sweep.json").read_text())
    doc["tasks"][0]["run"] = run
    (root / "sweep.json").write_text(json.dumps(doc))
    with pytest.raises(SweepError, match=r"sweep\.json: tasks\[0\]: run .* is not a run directory"):
        analyse_sweep(root)
    r = hpcbench("report", str(root), cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert "is not a run directory's name" in r.stderr and "0.99" not in r.stdout


@pytest.mark.parametrize("kind", ["link out", "fifo", "link to /dev/zero", "another layout"])
def test_a_sweep_tasks_metrics_that_lead_out_or_never_end_are_one_line(tmp_path, kind):
    import os

    from hpcbench.sweep.analysis import analyse_sweep

    root = _sweep_results(tmp_path / "s", ["lr=0.1,rep=0"])
    metrics = root / "runs" / "lr=0.1,rep=0" / "metrics.json"
    metrics.unlink()
    if kind == "link out":
        (tmp_path / "elsewhere.json").write_text('{"validation": 0.99}')
        metrics.symlink_to(tmp_path / "elsewhere.json")
        says = "leads out of the results directory"
    elif kind == "fifo":
        os.mkfifo(metrics)
        says = "not a regular file"
    elif kind == "another layout":
        metrics.write_text('{"format": "hpcbench-metrics/2", "validation": 0.99}')
        says = "format is 'hpcbench-metrics/2', not 'hpcbench-metrics/1'"
    else:
        metrics.symlink_to("/dev/zero")
        says = "leads out of the results directory"
    with pytest.raises(SweepError, match=says) as err:
        analyse_sweep(root)
    assert "\n" not in str(err.value)


def test_a_random_sweep_over_more_settings_than_a_machine_word_counts_draws_its_few():
    """Eight axes of 300 values: 6.6e19 settings, past 2^63, where random.sample overflows.
    The draws are distinct, reproducible with the seed, and each value one of its axis's."""
    names = ["epochs", "seed", "max-steps", "eval-batch-size", "checkpoint-every", "val-every",
             "checkpoint-keep", "lr-reference-batch"]  # fmt: skip
    axes = {name: list(range(1, 301)) for name in names}
    sweep = sweep_of(axes=axes, mode="random", draws=5, seed=3)
    first = sweep.settings()
    assert (
        len(first) == 5 and first == sweep_of(axes=axes, mode="random", draws=5, seed=3).settings()
    )
    assert len({tuple(s.values()) for s in first}) == 5
    assert all(1 <= v <= 300 for s in first for v in s.values())
    # below 2^63 the draws stay those every earlier version made (a continued sweep keeps them)
    small = sweep_of(axes={"lr": [0.1, 0.2, 0.3], "epochs": [1, 2]}, mode="random", draws=2, seed=1)
    assert small.settings() == [{"lr": 0.1, "epochs": 2}, {"lr": 0.3, "epochs": 1}]


def test_an_axis_value_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path):
    """A shell's $'\\xff' reaches Python as a lone surrogate: it would pass every check and
    fail writing a task's settings file after sweep.json exists, leaving the directory stuck."""
    from tests.conftest import hpcbench

    sweep = tmp_path / "s.toml"
    sweep.write_text('trainer_args = ["--epochs", "1"]\n[axes]\nlr = [0.1]\n')
    for axis in ("model=small_cnn,\udcff", "\udcffmodel=small_cnn"):
        r = hpcbench("sweep", str(sweep), "--scheduler", "local", "--axis", axis, cwd=tmp_path)
        assert r.returncode == 2, r.stdout + r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert "--axis" in line and "not UTF-8 text" in line, line
        assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flags,first", [((), 0), (("--seed", "42"), 42)])
def test_each_repetition_runs_with_its_own_recorded_seed(tmp_path, flags, first):
    """Repetitions of one setting are runs from other initial weights and data orders: the
    first keeps the job's seed, repetition R runs with that + R - 1 (in its settings file, so
    its metrics.json records it); a seed axis is left as the user set it."""
    from hpcbench.sweep.runner import SweepRunner

    sweep = sweep_of(axes={"lr": [0.1, 0.2]}, repetitions=3, trainer_args=list(flags))
    runner = SweepRunner(sweep, tmp_path / "r", cwd=tmp_path)
    folder = runner.write_task_files(runner.tasks)
    seeds = {}
    for k, task in enumerate(runner.tasks, 1):
        text = (folder / f"{k}.toml").read_text()
        seeds[task.run] = next((int(x.split("=")[1]) for x in text.splitlines()
                                if x.startswith("seed =")), None)  # fmt: skip
    assert seeds == {
        "lr=0.1,rep=1": None, "lr=0.1,rep=2": first + 1, "lr=0.1,rep=3": first + 2,
        "lr=0.2,rep=1": None, "lr=0.2,rep=2": first + 1, "lr=0.2,rep=3": first + 2,
    }  # fmt: skip
    axis = sweep_of(axes={"seed": [7]}, repetitions=2)
    runner = SweepRunner(axis, tmp_path / "s", cwd=tmp_path)
    folder = runner.write_task_files(runner.tasks)
    assert [(folder / f"{k}.toml").read_text().count("seed = 7") for k in (1, 2)] == [1, 1]


def _analysis(medians: dict[str, tuple[float, int, list[float]]], classes: int | None = 9):
    metric = {"name": "val_accuracy", "words": "final validation accuracy",
              "higher_is_better": True, "unit": ""}  # fmt: skip
    settings = [
        {"name": f"lr={k}", "setting": {"lr": k},
         "metric": {"median": med, "n": n, "ci95": ci}}
        for k, (med, n, ci) in medians.items()
    ]  # fmt: skip
    ranking = [s["name"] for s in sorted(settings, key=lambda s: -s["metric"]["median"])]
    return {"metric": metric, "settings": settings, "ranking": ranking, "classes": classes}


def test_the_best_setting_sentence_says_a_tie_an_indistinguishable_best_and_chance_level():
    from hpcbench.sweep.analysis import best_in_words

    tie = best_in_words(_analysis({0.1: (1.0, 2, [1.0, 1.0]), 0.2: (1.0, 2, [1.0, 1.0])}))
    assert tie.startswith("No single best setting by final validation accuracy: 2 settings tie "
                          "at 100.0 %"), tie  # fmt: skip
    chance = best_in_words(_analysis({0.1: (1 / 9, 3, [0.1, 0.12]), 0.2: (0.105, 3, [0.1, 0.11])}))
    assert chance.startswith("No setting learned anything: every final validation accuracy is "
                             "at chance level (11.1 %, one in 9 classes)"), chance  # fmt: skip
    close = best_in_words(_analysis({0.1: (0.8, 3, [0.7, 0.9]), 0.2: (0.75, 3, [0.6, 0.85])}))
    assert close.startswith("Best setting by final validation accuracy (highest median over 3 ")
    assert "not distinguishable from the best with 3 runs" in close, close
    clear = best_in_words(_analysis({0.1: (0.9, 3, [0.88, 0.92]), 0.2: (0.5, 3, [0.45, 0.55])}))
    assert "not distinguishable" not in clear and "lr = 0.1, with 90.0 %" in clear, clear
    one = best_in_words(_analysis({0.1: (0.9, 1, [0.9, 0.9]), 0.2: (0.5, 1, [0.5, 0.5])}, None))
    assert "(one run: no spread)" in one and "one run of one of them: not distinguishable" in one


@pytest.mark.parametrize("epochs", [[1], [1, 2, 3], list(range(1, 31))])
def test_the_epoch_axis_shows_whole_epochs_with_half_an_epoch_around(epochs):
    from tests.conftest import need_module

    need_module("matplotlib").use("Agg")
    from matplotlib.figure import Figure

    from hpcbench.sweep.report import epoch_axis

    ax = Figure().subplots()
    ax.plot(epochs, [50.0] * len(epochs))
    epoch_axis(ax, epochs)
    assert ax.get_xlim() == (epochs[0] - 0.5, epochs[-1] + 0.5)
    ticks = [t for t in ax.get_xticks() if epochs[0] - 0.5 <= t <= epochs[-1] + 0.5]
    assert all(float(t).is_integer() for t in ticks)
    if len(epochs) <= 12:
        assert list(ticks) == epochs


def test_an_odd_run_block_or_a_fifo_in_a_sweep_never_stops_its_report_or_runner(tmp_path):
    """A metrics.json whose run block is not a table leaves the number of classes unknown; a
    FIFO as a task's control/continued-as is not read (it would hang the sweep)."""
    import os

    from hpcbench.sweep.analysis import analyse_sweep
    from hpcbench.sweep.runner import SweepRunner, TaskState

    root = _sweep_results(tmp_path / "s", ["lr=0.1,rep=1", "lr=0.1,rep=2"])
    for run, block in (("lr=0.1,rep=1", '"x"'), ("lr=0.1,rep=2", '{"classes": [9]}')):
        (root / "runs" / run / "metrics.json").write_text(f'{{"validation": 0.5, "run": {block}}}')
    assert analyse_sweep(root)["classes"] is None
    runner = SweepRunner(sweep_of(axes={"lr": [0.1]}), tmp_path / "r", cwd=tmp_path)
    control = runner.run_dir(runner.tasks[0]) / "control"
    control.mkdir(parents=True)
    os.mkfifo(control / "continued-as")
    assert runner._continued(TaskState(runner.tasks[0], job_id="77_1", scheduler="slurm")) is None


# ------------------------------------------------------------------- the script, before submitting

PREVIEW_LINES = {  # the array line of each scheduler, for 4 tasks at most 2 at once
    "slurm": "#SBATCH --array=1-4%2\n",
    "pbs": "#PBS -J 1-4\n",
    "sge": "#$ -t 1-4\n",
    "lsf": "[1-4]%2",
    "local": "",
}


@pytest.mark.parametrize("scheduler", sorted(SCHEDULER_CLASSES))
def test_a_sweeps_array_script_is_rendered_without_submitting_or_writing(
    scheduler, tmp_path, monkeypatch
):
    from hpcbench.sweep.preview import render_sweep
    from tests.unit.test_render import lint_script

    shutil.copytree(REPO / "jobs", tmp_path / "jobs")
    monkeypatch.chdir(tmp_path)  # where the sweep file's job is named from
    sweep = read_sweep("jobs/reference-study/sweep.toml", smoke=True)
    name, why, text = render_sweep(sweep, tmp_path / "results", scheduler)
    assert name == scheduler and why == "chosen with --scheduler"
    assert PREVIEW_LINES[scheduler] in text and "4 tasks" in text
    assert f"tasks_dir={tmp_path / 'results' / 'submissions' / '1'}\n" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs"]  # no results, no settings
    script = tmp_path / f"{scheduler}.sh"
    script.write_text(text)
    lint_script(script)


def test_sweep_render_prints_the_script_and_refuses_a_bad_setting_in_one_line(tmp_path):
    from tests.conftest import hpcbench

    shutil.copytree(REPO / "jobs", tmp_path / "jobs")
    r = hpcbench("sweep", "jobs/reference-study/sweep.toml", "--smoke", "--render",
                 "--scheduler", "slurm", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash\n") and "#SBATCH --array=1-4%2" in r.stdout
    assert r.stderr == "hpcbench: scheduler slurm (chosen with --scheduler)\n"
    assert not (tmp_path / "runs").exists()
    bad = hpcbench("sweep", "jobs/reference-study/sweep.toml", "--smoke", "--render",
                   "--axis", "lr=-1", cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and bad.stdout == "", bad.stdout
    assert len(bad.stderr.strip().splitlines()) == 1 and "lr" in bad.stderr, bad.stderr
