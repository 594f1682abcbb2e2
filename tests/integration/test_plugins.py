"""A batch system and a launcher added by another package, touching nothing of hpcbench: a toy
scheduler (its own template, its own directive-free header) and a toy launcher, declared under the
entry-point groups ``hpcbench.schedulers`` and ``hpcbench.launchers`` of a package on PYTHONPATH.
They are listed by ``--help``, rendered, and a job is submitted through the local path and run."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from tests.conftest import hpcbench

TOY_MODULE = '''
"""A toy batch system: the local scheduler's machinery under another name and template."""
from pathlib import Path

from hpcbench.jobs.schedulers.local.scheduler import LocalScheduler


class ToyScheduler(LocalScheduler):
    name = "toy"
    label = "Toy"
    template = "toy.sh.j2"
    template_dir = Path(__file__).parent / "templates"
    stop_warning = "the toy sends SIGTERM"


'''

TOY_LAUNCHER = '''
"""A toy launcher, declared on its own under hpcbench.launchers."""
from hpcbench.jobs.launchers.base import Launcher, program_words


class ToyLauncher(Launcher):
    name = "toyrun"
    order = 90

    @classmethod
    def words(cls, spec, scheduler):
        return ["env", "TOY_LAUNCHED=yes", *program_words(spec)]
'''

TOY_TEMPLATE = """{% extends "hpcbench/local.sh.j2" %}
{% block directives %}
# toy batch system: {{ r.nodes }} node(s)
{% endblock %}
"""


def toy_package(root: Path) -> dict[str, str]:
    """The toy plug-in as an installed package would be found: its module and templates, and a
    ``.dist-info`` declaring its entry points; the environment that puts it on the path."""
    package = root / "toy_hpc"
    (package / "templates").mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(TOY_MODULE))
    (package / "launcher.py").write_text(textwrap.dedent(TOY_LAUNCHER))
    (package / "templates" / "toy.sh.j2").write_text(TOY_TEMPLATE)
    info = root / "toy_hpc-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-hpc\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[hpcbench.schedulers]\ntoy = toy_hpc\n\n[hpcbench.launchers]\ntoyrun = toy_hpc.launcher\n"
    )
    return {"PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_a_plugged_in_scheduler_and_launcher_are_listed_rendered_and_run(workdir, tmp_path):
    env = toy_package(tmp_path / "site")
    shown = hpcbench("submit", "--help", cwd=workdir, env=env)
    assert shown.stderr == "", shown.stderr  # every plug-in loaded, none refused
    helptext = shown.stdout
    assert "slurm,lsf,sge,pbs,local,toy}" in "".join(helptext.split())
    assert "{torchrun,mpiexec,srun,toyrun}" in "".join(helptext.split())

    program = f'{sys.executable} -c \'import os; print("launched:", os.environ["TOY_LAUNCHED"])\''
    flags = ["--scheduler", "toy", "--launcher", "toyrun", "--program", program]
    script = hpcbench("render", *flags, cwd=workdir, env=env)
    assert script.returncode == 0, script.stderr
    assert "not loaded" not in script.stderr, script.stderr
    assert "# toy batch system: 1 node(s)" in script.stdout
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
