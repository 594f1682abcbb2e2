"""A batch system and a launcher added by another package, touching nothing of hpcbench: a toy
scheduler (its own template, its own directive-free header) and a toy launcher, declared under the
entry-point groups ``hpcbench.schedulers`` and ``hpcbench.launchers`` of a package on PYTHONPATH.
They are listed by ``--help``, rendered, and a job is submitted through the local path and run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import hpcbench

TOY_MODULE = '''
"""A toy batch system: the local scheduler's machinery under another name and template."""
from pathlib import Path

from hpcbench.jobs.schedulers.local.scheduler import LocalScheduler
from hpcbench.jobs.spec import OwnOption


class ToyScheduler(LocalScheduler):
    name = "toy"
    label = "Toy"
    template = "toy.sh.j2"
    template_dir = Path(__file__).parent / "templates"
    stop_warning = "the toy sends SIGTERM"
    options = (
        OwnOption(
            "scheduler", "toy_queue", "choice", default="fast", choices=("fast", "slow"),
            profile_key="toy_queue", flag_help="the toy's queue (default fast)",
        ),
    )
    requeue_methods = ("toyrequeue",)
    profile_notes = {"toy_site": ("the toy's site", str)}


'''

TOY_LAUNCHER = '''
"""A toy launcher, declared on its own under hpcbench.launchers."""
from hpcbench.jobs.launchers.base import Launcher, program_words
from hpcbench.jobs.spec import OwnOption


class ToyLauncher(Launcher):
    name = "toyrun"
    order = 90
    options = (OwnOption("launcher", "toy_flag", "line", default="plain"),)

    @classmethod
    def words(cls, spec, scheduler):
        flag = cls.option(spec, "toy_flag")
        return ["env", "TOY_LAUNCHED=yes", f"TOY_FLAG={flag}", *program_words(spec)]
'''

TOY_ENVIRONMENT = '''
"""The toy's run side: where its jobs find their id."""
from hpcbench.environments import Environment


class ToyEnvironment(Environment):
    name = "toy"
    order = 90
    job_id_variable = "TOY_JOB_ID"
'''

TOY_TEMPLATE = """{% extends "hpcbench/local.sh.j2" %}
{% block directives %}
# toy batch system: {{ r.nodes }} node(s), queue {{ options.toy_queue }}
{% endblock %}
"""


def toy_package(root: Path) -> dict[str, str]:
    """The toy plug-in as an installed package would be found: its module and templates, and a
    ``.dist-info`` declaring its entry points; the environment that puts it on the path."""
    package = root / "toy_hpc"
    (package / "templates").mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(TOY_MODULE))
    (package / "launcher.py").write_text(textwrap.dedent(TOY_LAUNCHER))
    (package / "environment.py").write_text(textwrap.dedent(TOY_ENVIRONMENT))
    (package / "templates" / "toy.sh.j2").write_text(TOY_TEMPLATE)
    info = root / "toy_hpc-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-hpc\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[hpcbench.schedulers]\ntoy = toy_hpc\n\n[hpcbench.launchers]\ntoyrun = toy_hpc.launcher\n"
        "\n[hpcbench.environments]\ntoy = toy_hpc.environment\n"
    )
    return {"PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_a_plugged_in_scheduler_and_launcher_are_listed_rendered_and_run(workdir, tmp_path):
    env = toy_package(tmp_path / "site")
    shown = hpcbench("submit", "--help", cwd=workdir, env=env)
    assert shown.stderr == "", shown.stderr  # every plug-in loaded, none refused
    helptext = shown.stdout
    assert "slurm,lsf,sge,pbs,local,toy}" in "".join(helptext.split())
    assert "{torchrun,mpiexec,srun,direct,toyrun}" in "".join(helptext.split())

    program = f'{sys.executable} -c \'import os; print("launched:", os.environ["TOY_LAUNCHED"])\''
    flags = ["--scheduler", "toy", "--launcher", "toyrun", "--program", program]
    script = hpcbench("render", *flags, cwd=workdir, env=env)
    assert script.returncode == 0, script.stderr
    assert "not loaded" not in script.stderr, script.stderr
    assert "# toy batch system: 1 node(s), queue fast" in script.stdout
    assert "env TOY_LAUNCHED=yes " in script.stdout
    assert "started by toyrun" in script.stdout

    job = hpcbench("submit", *flags, "--wait", "--timeout", "60", cwd=workdir, env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    outputs = list((workdir / "runs").glob("*.out"))
    assert len(outputs) == 1 and "launched: yes" in outputs[0].read_text()

    # the toy launcher only where it is plugged in: without the package it is unknown
    bare = hpcbench("render", "--launcher", "toyrun", cwd=workdir)
    assert bare.returncode == 2 and "toyrun" in bare.stderr


def test_a_plugin_that_fails_to_import_is_named_and_left_out(workdir, tmp_path):
    env = toy_package(tmp_path / "site")
    (tmp_path / "site" / "toy_hpc" / "__init__.py").write_text("raise RuntimeError('broken')\n")
    result = hpcbench("render", "--scheduler", "local", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr
    assert "hpcbench: plug-in toy (hpcbench.schedulers) not loaded: broken" in result.stderr


def test_a_plugin_s_own_spec_options_profile_keys_and_flags_are_read_and_checked(workdir, tmp_path):
    """What only the toy reads is declared by its classes: the spec's loader, the profiles and
    the CLI take it from there, with the checks and messages of the spec's own fields."""
    env = toy_package(tmp_path / "site")
    flags = ["--scheduler", "toy", "--launcher", "toyrun", "--program", "true"]
    assert "--toy-queue {fast,slow}" in hpcbench("render", "--help", cwd=workdir, env=env).stdout

    by_flag = hpcbench("render", *flags, "--toy-queue", "slow", cwd=workdir, env=env)
    assert "queue slow" in by_flag.stdout and "TOY_FLAG=plain" in by_flag.stdout, by_flag.stderr
    wrong = hpcbench("render", *flags, "--toy-queue", "medium", cwd=workdir, env=env)
    assert wrong.returncode == 2 and "invalid choice: 'medium'" in wrong.stderr

    spec = workdir / "toy.toml"
    spec.write_text(
        '[scheduler]\ntoy_queue = "slow"\n[launcher]\ntoy_flag = "loud"\n'
        '[requeue]\nenabled = true\nmethod = "toyrequeue"\n'
    )
    by_spec = hpcbench("render", str(spec), *flags, cwd=workdir, env=env)
    assert by_spec.returncode == 0, by_spec.stderr
    assert "queue slow" in by_spec.stdout and "TOY_FLAG=loud" in by_spec.stdout

    spec.write_text('[scheduler]\ntoy_queu = "slow"\n')
    typo = hpcbench("render", str(spec), *flags, cwd=workdir, env=env)
    assert typo.returncode == 2
    assert "scheduler.toy_queu: unknown key (did you mean 'toy_queue'?)" in typo.stderr
    spec.write_text('[scheduler]\ntoy_queue = "medium"\n')
    bad = hpcbench("render", str(spec), *flags, cwd=workdir, env=env)
    assert "scheduler.toy_queue: expected one of fast, slow, got 'medium'" in bad.stderr
    spec.write_text('[requeue]\nmethod = "toyrequeu"\n')
    method = hpcbench("render", str(spec), *flags, cwd=workdir, env=env)
    assert "expected one of auto, scontrol, toyrequeue, resubmit" in method.stderr

    site = tmp_path / "profiles.toml"
    site.write_text('[profiles.toyland]\ntoy_queue = "slow"\ntoy_site = "the lab"\n')
    site.chmod(0o644)
    shown = hpcbench(
        "profile", "show", "toyland", cwd=workdir, env={**env, "HPCBENCH_SITE_CONFIG": str(site)}
    )
    assert shown.returncode == 0, shown.stderr
    assert "scheduler.toy_queue" in shown.stdout and "toy_queue" in shown.stdout
    assert "the lab" in shown.stdout

    # without the plug-in its options are unknown keys, as any misspelt field
    spec.write_text('[scheduler]\ntoy_queue = "slow"\n')
    bare = hpcbench("render", str(spec), cwd=workdir)
    assert bare.returncode == 2 and "scheduler.toy_queue: unknown key" in bare.stderr


def test_a_plugin_s_run_side_gives_the_job_id_inside_its_jobs(workdir, tmp_path):
    """The toy's run-side environment is asked as the built-in batch systems' are."""
    env = {**os.environ, **toy_package(tmp_path / "site"), "TOY_JOB_ID": "77"}
    for name in ("HPCBENCH_JOB_ID", "SLURM_JOB_ID", "PBS_JOBID", "JOB_ID", "LSB_JOBID"):
        env.pop(name, None)  # the batch systems asked before the toy
    ask = "from hpcbench.this_rank import job_id; print(job_id())"
    found = subprocess.run(
        [sys.executable, "-c", ask], env=env, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "77" and found.stderr == ""
