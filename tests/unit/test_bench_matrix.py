"""The experiment matrix (:mod:`hpcbench.bench.running.matrix`) and the runs it plans
(:mod:`hpcbench.bench.running.runner`): reading, one-line errors, order, and each run's job."""

from __future__ import annotations

import os

import pytest

from hpcbench.bench.running.matrix import MatrixError, build_matrix, configs_from_words, read_matrix
from hpcbench.bench.running.runner import Bench, Run, plan
from hpcbench.jobs.render import render_script
from hpcbench.jobs.shell import shell_join
from tests.conftest import REPO

MATRIX = """\
name = "laptop"
repetitions = 2
energy_repetitions = 1
trainer_args = ["--model", "mlp", "--epochs", "2"]

[[config]]
name = "cpu"
strategy = "single"

[[config]]
name = "ddp-2"
strategy = "ddp"
ranks_per_node = 2

[[config]]
name = "mpi-4"
strategy = "mpi"
nodes = 2
ranks_per_node = 2
"""


def test_a_matrix_file_reads_into_configurations(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    m = read_matrix(path)
    assert [c.name for c in m.configs] == ["cpu", "ddp-2", "mpi-4"]
    assert [(c.devices, c.world_size, c.launcher_kind) for c in m.configs] == [
        (1, 1, "direct"),  # hpcbench's trainer as one process: no agent
        (2, 2, "torchrun"),
        (4, 4, "mpiexec"),
    ]
    assert (m.repetitions, m.energy_repetitions, m.energy_interval_s) == (2, 1, 0.5)
    assert (m.baseline_cpu, m.baseline_one_device) == ("cpu", "cpu")  # no GPU configuration


def test_runs_interleave_configurations_and_keep_energy_runs_apart():
    m = build_matrix(
        {"repetitions": 2, "energy_repetitions": 1, "config": configs_from_words("single,ddp:2")}
    )
    assert [(r.config, r.kind, r.rep) for r in plan(m)] == [
        ("single", "timing", 1),
        ("ddp-2", "timing", 1),
        ("single", "energy", 1),
        ("ddp-2", "energy", 1),
        ("single", "timing", 2),
        ("ddp-2", "timing", 2),
    ]


def test_the_short_form_names_each_configuration():
    tables = configs_from_words("single, ddp:2, mpi:4x2, ddp:2@cuda, dp:2")
    assert [(t["name"], t["nodes"], t["ranks_per_node"], t["device"]) for t in tables] == [
        ("single", 1, 1, "cpu"),
        ("ddp-2", 1, 2, "cpu"),
        ("mpi-8-2n", 2, 4, "cpu"),
        ("ddp-2-gpu", 1, 2, "cuda"),
        ("dp-2-gpu", 1, 2, "cuda"),
    ]
    m = build_matrix({"config": tables})
    # no one-GPU configuration: speedups "against one device" are against the one CPU rank
    assert (m.baseline_cpu, m.baseline_one_device) == ("single", "single")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "repetitions = 0\n[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: repetitions: expected a whole number from 1 to 1000, got 0",
        ),
        (
            "[[config]]\nname='a'\nstrategy='horovod'\n",
            "m.toml: config[0] (a): strategy: expected one of single, ddp, mpi, dp, got 'horovod'",
        ),
        (
            "[[config]]\nname='../x'\nstrategy='single'\n",
            "m.toml: config[0]: name: '../x' is not a name",
        ),
        (
            "[[config]]\nname='a'\nstrategy='single'\n[[config]]\nname='a'\nstrategy='ddp'\n",
            "m.toml: config: two configurations are named 'a'",
        ),
        ("name = 'x'\n", "m.toml: config: give at least one [[config]] table"),
        ("reps = 3\n[[config]]\nname='a'\nstrategy='single'\n", "m.toml: reps: unknown key"),
        (
            "trainer_args = ['--strategy', 'ddp']\n[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: trainer_args: --strategy is set by the matrix",
        ),
        (
            "[[config]]\nname='a'\nstrategy='single'\nranks_per_node=2\n",
            "m.toml: config[0] (a): ranks_per_node: single runs one process",
        ),
        (
            "[[config]]\nname='a'\nstrategy='mpi'\nlauncher='torchrun'\n",
            "m.toml: config[0] (a): launcher: mpi ranks are started by mpiexec or srun",
        ),
        (
            "baseline_cpu = 'gpu'\n[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: baseline_cpu: no configuration is named 'gpu'",
        ),
        (
            "cooldown = nan\n[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: cooldown: expected a number from 0 to 86400",
        ),
        ("[[config]\n", "m.toml: not valid TOML"),
        # any program
        (
            "program = { script = 't.py' }\ntrainer_args = ['--epochs', '1']\n"
            "[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: trainer_args: a program is named (program = ...): give its arguments as",
        ),
        (
            "[[config]]\nname='a'\nstrategy='single'\nprogram_args = ['--x']\n",
            "m.toml: config[0] (a): program_args: the arguments of a program named with",
        ),
        (
            "program = { script = 't.py', module = 'm' }\n[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: program: give exactly one of module, script or command",
        ),
        (
            "program = { command = [] }\n[[config]]\nname='a'\nstrategy='single'\n",
            "m.toml: program.command: must not be empty",
        ),
    ],
)
def test_a_bad_matrix_is_one_line_naming_file_and_key(tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.toml").write_text(text)
    with pytest.raises(MatrixError) as err:
        read_matrix("m.toml")
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_bad_short_forms_are_refused():
    for words in ("ddp:", "ddp:two", "horovod:2", "ddp:2@tpu", ""):
        with pytest.raises(MatrixError, match="--configs: .* is not STRATEGY"):
            configs_from_words(words)


def test_each_run_is_the_trainer_with_its_configurations_shape(tmp_path):
    (tmp_path / "m.toml").write_text(MATRIX)
    bench = Bench(read_matrix(tmp_path / "m.toml"), "results", scheduler="local", cwd=tmp_path)
    spec = bench.spec_for(Run("mpi-4", "energy", 1))
    assert (spec.resources.nodes, spec.resources.ranks_per_node, spec.launcher.kind) == (
        2,
        2,
        "mpiexec",
    )
    assert spec.resources.gpus_per_node == 0
    assert spec.resources.output_dir == "results/runs/mpi-4"
    assert spec.resources.job_name == "laptop-mpi-4-energy01"
    assert spec.program.argv()[3:] == [
        "--no-checkpoint",  # measurement runs are repeated, not resumed
        *("--model", "mlp", "--epochs", "2", "--strategy", "mpi", "--device", "cpu"),
        *("--energy", "on", "--energy-interval", "0.5"),
    ]
    script = render_script(spec, "local")
    assert shell_join(["--strategy", "mpi"]) in script
    timing = bench.spec_for(Run("ddp-2", "timing", 2))
    assert "--energy" not in timing.program.argv()
    assert (timing.launcher.kind, timing.resources.ranks_per_node) == ("torchrun", 2)


def test_a_run_of_any_program_gets_its_arguments_and_its_configuration_in_its_environment(
    tmp_path,
):
    (tmp_path / "m.toml").write_text(
        "program = { script = 'my_train.py' }\nprogram_args = ['--epochs', '2', '--device', 'x']\n"
        "[[config]]\nname='single'\nstrategy='single'\n"
        "[[config]]\nname='mpi-2'\nstrategy='mpi'\nranks_per_node=2\nprogram_args=['--mpi']\n"
    )
    bench = Bench(read_matrix(tmp_path / "m.toml"), "results", scheduler="local", cwd=tmp_path)
    spec = bench.spec_for(Run("mpi-2", "energy", 1))
    assert spec.program.argv() == [
        "python",
        "my_train.py",
        "--epochs",
        "2",
        "--device",
        "x",
        "--mpi",
    ]
    assert spec.environment.variables == {
        "HPCBENCH_STRATEGY": "mpi",
        "HPCBENCH_DEVICE": "cpu",
        "HPCBENCH_ENERGY": "on",
        "HPCBENCH_ENERGY_INTERVAL": "0.5",
    }
    assert spec.launcher.kind == "mpiexec" and spec.requeue.active(spec.program) is False
    timing = bench.spec_for(Run("single", "timing", 1))
    assert "HPCBENCH_ENERGY" not in timing.environment.variables
    assert "export HPCBENCH_STRATEGY=single" in render_script(timing, "local")
    # a user's program of one process runs under torchrun, a world of one (a script written
    # for torchrun calls init_process_group); hpcbench's trainer runs directly
    assert timing.launcher.kind == "torchrun"
    assert "python -m torch.distributed.run" in render_script(timing, "local")


def test_the_trainers_one_process_runs_and_the_idle_job_start_no_launcher(tmp_path):
    """A single (or dp) run of hpcbench's trainer and the idle-power job are the program itself,
    with no torchrun agent importing torch (and polling) beside it; a direct launcher for ranks
    that meet is one line naming the key."""
    from hpcbench.bench.running.run_specs import idle_spec

    (tmp_path / "m.toml").write_text(
        "idle_seconds = 2\n[[config]]\nname='cpu'\nstrategy='single'\n"
        "[[config]]\nname='gpu'\nstrategy='single'\ndevice='cuda'\n"
    )
    matrix = read_matrix(tmp_path / "m.toml")
    bench = Bench(matrix, "results", scheduler="local", cwd=tmp_path)
    for run in (Run("cpu", "timing", 1), Run("gpu", "energy", 1)):
        spec = bench.spec_for(run)
        assert spec.launcher.kind == "direct"
        text = render_script(spec, "slurm")
        assert "torch.distributed.run" not in text and "mpiexec -n" not in text
        assert (
            '\nexec ${rank_start[@]+"${rank_start[@]}"} python -m hpcbench.train --no-checkpoint '
            in text
        )  # the program itself, after the rank start
    idle = idle_spec(matrix, "results", tmp_path / "idle.json", "slurm")
    assert idle.launcher.kind == "direct"
    assert "torch.distributed.run" not in render_script(idle, "slurm")
    # the job's arguments for its own launcher reach the runs that use it, not the direct ones
    (tmp_path / "job.toml").write_text('[launcher]\nargs = ["--max-restarts", "2"]\n')
    (tmp_path / "j.toml").write_text(
        f"job = '{tmp_path / 'job.toml'}'\nidle_seconds = 2\n[[config]]\nname='cpu'\n"
        "strategy='single'\n[[config]]\nname='ddp-2'\nstrategy='ddp'\nranks_per_node=2\n"
    )
    matrix = read_matrix(tmp_path / "j.toml")
    bench = Bench(matrix, "results", scheduler="local", cwd=tmp_path)
    single, ddp = (bench.spec_for(Run(c, "timing", 1)) for c in ("cpu", "ddp-2"))
    assert (single.launcher.kind, single.launcher.args) == ("direct", [])
    assert "--max-restarts" not in render_script(single, "slurm")
    assert ddp.launcher.args == ["--max-restarts", "2"]
    assert "--max-restarts 2" in render_script(ddp, "slurm")
    idle = idle_spec(matrix, "results", tmp_path / "idle.json", "slurm")
    assert idle.launcher.args == [] and "--max-restarts" not in render_script(idle, "slurm")
    (tmp_path / "d.toml").write_text("[[config]]\nname='ddp'\nstrategy='ddp'\nlauncher='direct'\n")
    with pytest.raises(MatrixError) as err:
        read_matrix(tmp_path / "d.toml")
    assert str(err.value) == (
        f"{tmp_path / 'd.toml'}: config[0] (ddp): launcher: direct starts one process without a "
        "launcher's rendezvous; ddp ranks are started by torchrun"
    )


def test_gpu_configurations_ask_for_their_gpus(tmp_path):
    m = build_matrix({"config": configs_from_words("ddp:2@cuda,dp:4")})
    bench = Bench(m, "r", cwd=tmp_path)
    ddp, dp = (
        bench.spec_for(Run("ddp-2-gpu", "timing", 1)),
        bench.spec_for(Run("dp-4-gpu", "timing", 1)),
    )
    assert (ddp.resources.gpus_per_node, ddp.resources.ranks_per_node) == (2, 2)
    assert (dp.resources.gpus_per_node, dp.resources.ranks_per_node) == (4, 1)
    assert dp.program.argv()[-4:] == ["--strategy", "dp", "--device", "cuda"]


@pytest.mark.parametrize(
    "path", sorted((REPO / "jobs" / "bench").glob("*.toml")), ids=lambda p: p.name
)
def test_every_shipped_matrix_reads_and_each_run_renders_for_slurm(path, monkeypatch):
    monkeypatch.chdir(REPO)  # the matrices' paths are relative to the repository, as documented
    m = read_matrix(path)
    bench = Bench(m, "runs/x", scheduler="slurm", cwd=REPO)
    for run in plan(m)[: len(m.configs) * 2]:
        spec = bench.spec_for(run)
        text = render_script(spec, "slurm")
        assert "--strategy" in text and spec.resources.world_size >= 1


def test_a_results_directory_serves_one_bench_at_a_time_and_keeps_every_planned_run(tmp_path):
    import json

    from hpcbench.bench.running.runner import BenchError

    m = build_matrix({"repetitions": 2, "config": configs_from_words("single,ddp:2")})
    first = Bench(m, "res", scheduler="local", cwd=tmp_path)
    assert first.open() is False
    with pytest.raises(BenchError, match="another hpcbench bench is running this matrix"):
        Bench(m, "res", scheduler="local", cwd=tmp_path).open()
    os.close(first._lock_fd)  # the first one ends
    runs_file = tmp_path / "res" / "runs.json"
    data = json.loads(runs_file.read_text())
    data["runs"] = data["runs"][:1]  # a runs.json that lost planned runs
    runs_file.write_text(json.dumps(data))
    again = Bench(m, "res", scheduler="local", cwd=tmp_path)
    assert again.open() is True
    assert sorted((r.config, r.rep) for r in again.runs) == sorted(
        (c, rep) for c in ("single", "ddp-2") for rep in (1, 2)
    )


def test_results_that_are_a_file_are_one_line(tmp_path):
    from hpcbench.bench.running.runner import BenchError

    (tmp_path / "afile").write_text("x")
    m = build_matrix({"config": configs_from_words("single")})
    for where in ("afile", "afile/sub"):
        with pytest.raises(BenchError, match=r"^--results .*afile"):
            Bench(m, where, cwd=tmp_path).open()
    assert (tmp_path / "afile").read_text() == "x"


def test_the_jobs_own_args_come_once_and_may_not_set_what_the_matrix_sets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.toml").write_text('[program]\nargs = ["--data", "shapes"]\n')
    m = build_matrix(
        {
            "job": "job.toml",
            "trainer_args": ["--epochs", "1"],
            "config": configs_from_words("single"),
        }
    )
    argv = Bench(m, "r", cwd=tmp_path).spec_for(Run("single", "timing", 1)).program.argv()
    assert argv[3:] == [
        "--data",
        "shapes",
        "--no-checkpoint",
        "--epochs",
        "1",
        "--strategy",
        "single",
        "--device",
        "cpu",
    ]
    m.trainer_args = ["--epochs", "1", "--checkpoint-every", "5"]  # asked for: kept, no default
    argv = Bench(m, "r", cwd=tmp_path).spec_for(Run("single", "timing", 1)).program.argv()
    assert "--no-checkpoint" not in argv and "--checkpoint-every" in argv
    (tmp_path / "job.toml").write_text('[program]\nargs = ["--energy", "on"]\n')
    with pytest.raises(MatrixError, match=r"job.toml: program.args: --energy is set by the matrix"):
        Bench(m, "r", cwd=tmp_path).spec_for(Run("single", "timing", 1))
