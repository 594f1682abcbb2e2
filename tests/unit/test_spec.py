"""The job spec: TOML loading, CLI precedence, strict one-line validation errors."""

from __future__ import annotations

import pytest

from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import build_spec, load_spec
from hpcbench.jobs.units import parse_memory, parse_time
from tests.conftest import hpcbench


def write(tmp_path, text: str):
    p = tmp_path / "job.toml"
    p.write_text(text)
    return p


def test_defaults_run_the_trainer_on_one_cpu_rank():
    spec = build_spec({})
    assert spec.resources.world_size == 1
    assert spec.program.argv() == ["python", "-m", "hpcbench.train"]
    assert spec.launcher.kind == "torchrun"
    assert spec.resources.time_s == 3600


def test_toml_file_loads_every_table(tmp_path):
    path = write(
        tmp_path,
        """
[resources]
nodes = 2
gpus-per-node = 4
cpus_per_task = 8
memory = "64G"
time = "1-12:00:00"
partition = "gpu"
exclusive = true
[environment]
modules = ["CUDA/12.1", "OpenMPI/4.1"]
venv = "~/venvs/torch"
variables = { NCCL_DEBUG = "INFO", SEED = 3 }
[environment.container]
image = "torch.sif"
binds = ["/scratch"]
[launcher]
kind = "srun"
[program]
script = "train.py"
args = ["--epochs", "3"]
[scheduler]
name = "slurm"
directives = ["--reservation=big"]
""",
    )
    spec = load_spec(path)
    r = spec.resources
    assert (r.nodes, r.gpus_per_node, r.ranks_per_node, r.world_size) == (2, 4, 4, 8)
    assert r.memory_mb == 64 * 1024 and r.time_s == 36 * 3600 and r.exclusive
    assert spec.environment.variables == {"NCCL_DEBUG": "INFO", "SEED": "3"}
    assert spec.environment.container.image == "torch.sif"
    assert spec.program.argv() == ["python", "train.py", "--epochs", "3"]
    assert spec.source == str(path)


def test_cli_overrides_win_and_lists_extend(tmp_path):
    path = write(
        tmp_path,
        '[resources]\nnodes = 4\n[environment]\nmodules = ["a"]\n[program]\nmodule = "x.y"\n',
    )
    spec = load_spec(
        path,
        {
            "resources.nodes": ("--nodes", "2"),
            "environment.modules": ("--load", ["b"]),
            "program.script": ("--script", "run.py"),
        },
    )
    assert spec.resources.nodes == 2
    assert spec.environment.modules == ["a", "b"]
    assert spec.program.argv() == ["python", "run.py"]  # the CLI's program replaces the file's


@pytest.mark.parametrize(
    "text, message",
    [
        ("[resources]\nnodez = 2\n", "resources.nodez: unknown key (did you mean 'nodes'?)"),
        ("[resorces]\nnodes = 2\n", "resorces: unknown key (did you mean 'resources'?)"),
        (
            "[resources]\nnodes = 0\n",
            "resources.nodes: must be a positive count (1 or more), got 0",
        ),
        ('[resources]\nnodes = "two"\n', "resources.nodes: expected a whole number, got 'two'"),
        ("[resources]\ngpus_per_node = -1\n", "resources.gpus_per_node: must be 0 or more, got -1"),
        (
            "[resources]\ncpus_per_task = true\n",
            "resources.cpus_per_task: expected a whole number, got True",
        ),
        ('[resources]\ntime = "1:99:00"\n', "resources.time: minutes and seconds must be below 60"),
        ('[resources]\ntime = "soon"\n', "resources.time: expected MM, MM:SS, HH:MM:SS"),
        ('[resources]\nmemory = "lots"\n', "resources.memory: expected a memory size"),
        (
            '[resources]\nexclusive = "yes"\n',
            "resources.exclusive: expected true or false, got 'yes'",
        ),
        ('[resources]\njob_name = "a\\nb"\n', "resources.job_name: must be a single line"),
        ('[environment]\nmodules = "CUDA"\n', "environment.modules: expected a list of strings"),
        (
            '[environment]\nvariables = { "A B" = "1" }\n',
            "'A B' is not a valid environment variable",
        ),
        ("[environment.container]\nbinds = []\n", "environment.container.image: required"),
        ('[launcher]\nkind = "mpirun"\n', "launcher.kind: expected one of torchrun, mpiexec, srun"),
        ("[launcher]\nport = 80\n", "launcher.port: a port must be between 1024 and 65535"),
        ('[program]\nmodule = "os; rm"\n', "program.module: expected a dotted Python module name"),
        ('[program]\nmodule = "a"\nscript = "b.py"\n', "set only one of module, script or command"),
        (
            '[scheduler]\nname = "flux"\n',
            "scheduler.name: expected one of auto, slurm, lsf, sge, pbs, local",
        ),
        ("resources = 3\n", "resources: expected a table, got 3"),
    ],
)
def test_bad_values_give_one_line_errors_naming_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    assert message in msg


def test_cli_value_errors_name_the_flag():
    with pytest.raises(SpecError, match=r"^--nodes \(resources.nodes\): must be a positive count"):
        load_spec(None, {"resources.nodes": ("--nodes", "0")})


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "nope.toml")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write(tmp_path, "[resources\n"))


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 5400),
        ("10:30", 630),
        ("01:30:00", 5400),
        ("2-12", 216000),
        ("2-12:30", 217800),
        ("0-00:00:30", 30),
        (45, 2700),
        ("48:00:00", 172800),
    ],
)
def test_time_limits_in_every_sbatch_form(text, seconds):
    assert parse_time(text) == seconds


@pytest.mark.parametrize("bad", ["", "0", "1:2:3:4", "x-1", "2-24", "00:60", "-5", True, 1.5])
def test_malformed_time_limits(bad):
    with pytest.raises(ValueError):
        parse_time(bad)


@pytest.mark.parametrize(
    "text, mb",
    [
        ("32G", 32768),
        ("500M", 500),
        ("1.5T", 1572864),
        ("64GB", 65536),
        ("2gib", 2048),
        (1024, 1024),
    ],
)
def test_memory_sizes(text, mb):
    assert parse_memory(text) == mb


def test_cli_error_is_one_line_exit_2_and_writes_nothing(workdir):
    spec = workdir / "job.toml"
    spec.write_text("[resources]\ngpus_per_nod = 2\n")
    result = hpcbench("submit", str(spec), "--scheduler", "local", cwd=workdir)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("hpcbench: error")]
    assert errors == [
        f"hpcbench: error: {spec}: resources.gpus_per_nod: unknown key "
        "(did you mean 'gpus_per_node'?)"
    ]
    assert sorted(p.name for p in workdir.iterdir()) == ["job.toml"]  # no runs/, no script
    bad_flag = hpcbench("submit", "--time", "1:2:3:4", "--scheduler", "local", cwd=workdir)
    assert bad_flag.returncode == 2
    assert "--time (resources.time): expected MM, MM:SS" in bad_flag.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["job.toml"]


# ---- [program] config: the trainer's options as a file -------------------------------------------


def test_a_program_config_is_passed_first_and_args_still_override(tmp_path, monkeypatch):
    from hpcbench.jobs.launchers.srun import srun_words
    from hpcbench.jobs.launchers.torchrun import torchrun_words
    from hpcbench.jobs.shell import shell_join
    from hpcbench.train.command_line import parse_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train run.toml").write_text('lr = 0.05\nepochs = 7\nmodel = "mlp"\n')
    spec = build_spec({"program": {"config": "train run.toml", "args": ["--epochs", "2"]}})
    assert spec.program.argv() == [
        *("python", "-m", "hpcbench.train", "--config", "train run.toml", "--epochs", "2")
    ]
    for words in (torchrun_words(spec, standalone=True), srun_words(spec)):
        assert shell_join(words).endswith("--config 'train run.toml' --epochs 2")
    config = parse_args(spec.program.argv()[3:])
    assert (config.batch.lr, config.batch.epochs, config.data.model) == (0.05, 2, "mlp")


def test_a_missing_program_config_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"^job.toml: program.config: no such file 'nope.toml'"):
        build_spec({"program": {"config": "nope.toml"}}, source="job.toml")


def test_a_trainer_config_with_an_unknown_option_is_refused_at_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.toml").write_text("lrr = 0.05\n")
    with pytest.raises(
        SpecError, match=r"program.config: t.toml: unknown option 'lrr'; did you mean 'lr'"
    ):
        build_spec({"program": {"config": "t.toml"}})
    # another program's file is its own business: only its presence is checked
    spec = build_spec({"program": {"script": "mine.py", "config": "t.toml"}})
    assert spec.program.argv() == ["python", "mine.py", "--config", "t.toml"]


def test_the_reference_job_reads_the_reference_training_options(monkeypatch):
    from hpcbench.train.command_line import parse_args
    from tests.conftest import REPO

    monkeypatch.chdir(REPO)
    spec = load_spec(REPO / "jobs" / "reference-study" / "resnet34.toml")
    config = parse_args(spec.program.argv()[3:])
    assert (
        config.data.model,
        config.batch.global_batch_size,
        config.batch.lr,
        config.batch.epochs,
    ) == (
        "resnet34",
        128,
        0.05,
        100,
    )
    assert (config.batch.momentum, config.batch.schedule, config.batch.optimizer) == (
        0.0,
        "none",
        "sgd",
    )
