"""Hostile and careless job specs: each gets one line naming the field, a leading ~ is a home
directory, templates cannot run Python while they render, and written files honour the umask."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.jobs.render import RenderError, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import build_spec, load_spec
from tests.conftest import REPO, hpcbench, require
from tests.unit.test_injection import RECORDER, read_record

# ------------------------------------------------------------------------------ refused values


@pytest.mark.parametrize(
    "data, message",
    [
        ({"resources": {"job_name": "x" * 300}}, "resources.job_name: is 300 characters long"),
        ({"resources": {"nodes": 100_000_000}}, "resources.nodes: must be at most 100000"),
        ({"resources": {"cpus_per_task": 10**9}}, "resources.cpus_per_task: must be at most"),
        (
            {"resources": {"output_dir": "runs\\x"}},
            "resources.output_dir: must not hold a backslash",
        ),
        ({"resources": {"output_dir": "$HOME/runs"}}, "resources.output_dir: must not hold '\\$'"),
        ({"resources": {"output_dir": "login1:runs"}}, "resources.output_dir: must not hold ':'"),
        ({"program": {"args": ["a\udcffb"]}}, "program.args: entry 1 is not UTF-8 text"),
        ({"resources": {"job_name": "\udcff"}}, "resources.job_name: is not UTF-8 text"),
        ({"resources": {"output_dir": "~nosuchuser42/runs"}}, "no such user for '~nosuchuser42'"),
        ({"environment": {"modules": ["--force"]}}, "environment.modules: entry 1 must not start"),
        ({"environment": {"conda_env": "-n"}}, "environment.conda_env: must not start with '-'"),
        ({"environment": {"venv": "~~/x"}}, "environment.venv: a leading ~ must be followed"),
        ({"environment": {"container": {"image": "--x"}}}, "container.image: must not start"),
        ({"program": {"script": "-c"}}, "program.script: must not start with '-'"),
        ({"program": {"args": ["a" * 200_000]}}, "program.args: entry 1 is 200000 characters"),
        ({"launcher": {"args": ["a\nb"]}}, "launcher.args: entry 1 must be a single line"),
        ({"resources": {"memory": "9" * 400 + "G"}}, "resources.memory: expected a memory size"),
        ({"resources": {"memory": "9" * 30 + "G"}}, "resources.memory: at most 2147483647M"),
        ({"resources": {"memory": 10**400}}, "resources.memory: at most 2147483647M"),
        ({"resources": {"time": "9" * 20}}, "resources.time: at most 24855-03:14:07"),
        ({"resources": {"time": 10**30}}, "resources.time: at most 24855-03:14:07"),
        ({"resources": {"time": "99999999999-00:00:00"}}, "resources.time: at most"),
    ],
)
def test_values_are_refused_with_one_line_naming_the_field(data, message):
    with pytest.raises(SpecError, match=message) as err:
        build_spec(data)
    assert "\n" not in str(err.value)


def test_the_local_scheduler_refuses_more_ranks_than_a_machine_can_start():
    with pytest.raises(RenderError, match="local scheduler .* 100000 ranks"):
        render_script(build_spec({"resources": {"nodes": 50_000, "tasks_per_node": 2}}), "local")
    render_script(build_spec({"resources": {"nodes": 50_000, "tasks_per_node": 2}}), "slurm")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[resources]\njob_name = '\xff\xfe'\n", "not UTF-8"),
        (b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "not valid TOML"),
        (b"[resources\n", "not valid TOML"),
    ],
    # short ids: a test's id goes into PYTEST_CURRENT_TEST, and a 200 kB one makes the
    # environment of every process the test starts too large to exec (E2BIG)
    ids=["not-utf8", "nested-100000-deep", "unclosed-table"],
)
def test_unreadable_spec_files_are_one_line_and_exit_2(tmp_path, content, message):
    spec = tmp_path / "job.toml"
    spec.write_bytes(content)
    result = hpcbench("render", str(spec), "--scheduler", "slurm", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"hpcbench: error: {spec}")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--program", "true", "--", "\udcff"], "program.args): entry 1 is not UTF-8 text"),
        (["spec\udcff.toml"], "the spec file's name is not UTF-8"),
    ],
)
def test_command_line_bytes_that_are_not_utf8_are_one_line(tmp_path, args, message):
    """Bytes that are not UTF-8 on the command line arrive as lone surrogates: refused by name
    before a script (written as UTF-8) is started."""
    result = hpcbench("submit", "--scheduler", "local", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_300_character_job_name_from_the_cli_is_refused_before_anything_is_written(tmp_path):
    result = hpcbench(
        "submit", "--scheduler", "local", "--job-name", "n" * 300, "--", "--epochs", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--job-name (resources.job_name): is 300 characters long" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------ ~ in path fields


def test_output_dir_tilde_is_the_home_directory():
    spec = build_spec({"resources": {"output_dir": "~/runs"}})
    assert spec.resources.output_dir == os.path.expanduser("~/runs")


def sandbox_bin(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("srun", "mpiexec", "scontrol", "module", "python", "apptainer"):
        (bindir / name).write_text(RECORDER)
        (bindir / name).chmod(0o755)
    return bindir


def run_rendered(tmp_path: Path, text: str, home: Path) -> list[dict]:
    record = tmp_path / "record"
    record.mkdir()
    env = {
        "PATH": f"{sandbox_bin(tmp_path)}{os.pathsep}/usr/bin:/bin",
        "HOME": str(home),
        "HPCB_RECORD": str(record),
    }
    (tmp_path / "work").mkdir(exist_ok=True)
    for cls in SCHEDULER_CLASSES.values():  # what each scheduler sets in its jobs
        env.update(cls.job_environment("7", ["node1"], tmp_path))
    script = tmp_path / "job.sh"
    script.write_text(text)
    result = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr + text
    return read_record(record)


def make_venv(path: Path) -> None:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "activate").write_text("export HPCB_ACTIVATED=yes\n")


@pytest.mark.parametrize("scheduler", list(SCHEDULER_CLASSES))
def test_a_tilde_venv_and_script_are_found_in_home(tmp_path, scheduler):
    home = tmp_path / "home dir"
    make_venv(home / "venvs" / "my env")
    data = {
        "resources": {"nodes": 1, "tasks_per_node": 1},
        "environment": {"venv": "~/venvs/my env"},
        "launcher": {"kind": "mpiexec"},
        "program": {"script": "~/train it.py"},
    }
    calls = run_rendered(tmp_path, render_script(build_spec(data), scheduler), home)
    launch = [c for c in calls if c["name"] == "mpiexec" and c["argv"] != ["--version"]]
    assert launch and launch[0]["env"]["HPCB_ACTIVATED"] == "yes"
    assert str(home / "train it.py") in launch[0]["argv"]


@pytest.mark.parametrize("spec_file", sorted((REPO / "jobs").glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_job_spec_sets_up_its_environment(tmp_path, spec_file):
    # The set-up a shipped spec asks for (its venv, e.g. ~/venvs/hpcbench) is created in a
    # throwaway HOME; the rendered script must activate it before the launch.
    spec = load_spec(spec_file)
    home = tmp_path / "home"
    venv = spec.environment.venv
    if venv:
        make_venv(Path(venv.replace("~", str(home), 1)) if venv.startswith("~/") else Path(venv))
    scheduler = "slurm" if spec.resources.partition else "local"
    text = render_script(spec, scheduler)
    if spec.environment.modules:  # `module` is found as the recorder, not through Lmod's init
        text = text.replace("if ! type module >/dev/null 2>&1; then", "if false; then", 2)
    calls = run_rendered(tmp_path, text, home)
    launches = [
        c
        for c in calls
        if c["name"] in ("srun", "mpiexec", "python") and c["argv"] != ["--version"]
    ]
    assert launches, calls
    if venv:
        assert all(c["env"]["HPCB_ACTIVATED"] == "yes" for c in launches), launches
    loaded = [c["argv"] for c in calls if c["name"] == "module"]
    assert loaded == [["load", m] for m in spec.environment.modules]


def test_tilde_paths_pass_shellcheck(tmp_path):
    require(shutil.which("shellcheck") is not None, "shellcheck")
    data = {
        "environment": {"venv": "~/v", "container": {"image": "~alice/img.sif", "binds": ["~/d"]}},
        "program": {"python": "~/py/bin/python"},
    }
    for scheduler in SCHEDULER_CLASSES:
        script = tmp_path / f"{scheduler}.sh"
        script.write_text(render_script(build_spec(data), scheduler))
        result = subprocess.run(
            ["shellcheck", "--severity=style", str(script)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout


# ------------------------------------------------------------------------------ templates


def test_a_template_cannot_run_python_while_rendering(tmp_path):
    canary = tmp_path / "PWNED"
    (tmp_path / "slurm.sbatch.j2").write_text(
        '{% extends "hpcbench/slurm.sbatch.j2" %}{% block setup %}'
        "{{ cycler.__init__.__globals__.os.popen('touch " + str(canary) + "').read() }}"
        "{{ ''.__class__.__mro__[1].__subclasses__() }}{% endblock %}"
    )
    spec = build_spec({"environment": {"setup": ["true"]}})
    with pytest.raises(RenderError, match="slurm.sbatch.j2"):
        render_script(spec, "slurm", [tmp_path])
    assert not canary.exists()


@pytest.mark.parametrize(
    "name", ["base.sh.j2", "hpcbench/base.sh.j2", "hpcbench/slurm.sbatch.j2", "hpcbench/sge.sh.j2"]
)
def test_a_user_template_directory_cannot_replace_a_built_in(tmp_path, name):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("#!/bin/bash\n{{ spec.program.args[0] }}\n")
    spec = build_spec({"program": {"command": ["echo"], "args": ["$(touch PWNED)"]}})
    assert render_script(spec, "slurm", [tmp_path]) == render_script(spec, "slurm")


def test_the_cli_names_the_user_template_it_used(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "slurm.sbatch.j2").write_text(
        '{% extends "hpcbench/slurm.sbatch.j2" %}{% block setup %}# mine\n{% endblock %}'
    )
    result = hpcbench(
        "render", "--scheduler", "slurm", "--setup", "true", cwd=tmp_path,
        env={"HPCBENCH_TEMPLATE_DIR": str(tmp_path / "tpl")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"using the user template {tmp_path / 'tpl' / 'slurm.sbatch.j2'}" in result.stderr
    assert "# mine" in result.stdout


# ------------------------------------------------------------------------------ file modes


def test_written_files_honour_the_umask(tmp_path):
    code = (
        "import os, sys; from pathlib import Path; os.umask(0o077);"
        "from hpcbench.atomic import write_atomically;"
        "write_atomically(Path(sys.argv[1]) / 'script.sh', 'secret', 0o755);"
        "write_atomically(Path(sys.argv[1]) / 'record.json', '{}')"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=REPO)
    assert stat.S_IMODE((tmp_path / "script.sh").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "record.json").stat().st_mode) == 0o600


# ------------------------------------------------------------------------------ submitit set-up


def test_submitit_setup_lines_keep_values_on_one_line_and_refuse_directives():
    from hpcbench.jobs.submitit_jobs import setup_lines

    spec = build_spec(
        {"environment": {"variables": {"NOTE": "a\n#SBATCH --time=999:00:00"}, "venv": "~/v"}}
    )
    lines = setup_lines(spec)
    assert all("\n" not in line for line in lines)
    assert "export NOTE=$'a\\x0a#SBATCH --time=999:00:00'" in lines
    assert "source ~/v/bin/activate" in lines
    bad = build_spec({"environment": {"setup": ["true", "#SBATCH --time=999:00:00"]}})
    with pytest.raises(SpecError, match="environment.setup: .* would be read by slurm"):
        setup_lines(bad)
