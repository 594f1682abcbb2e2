"""Every kind of plug-in added by another package, touching nothing of hpcbench: a toy batch
system (its own template, its own directive-free header, its accounting reader), a toy launcher, a
toy run-side environment, a toy container runtime and a toy training strategy (with an option of
its own), each declared under its entry-point group (``hpcbench.schedulers``, ``.launchers``,
``.environments``, ``.accounting``, ``.containers``, ``.strategies``) of a package on PYTHONPATH.
They are listed by ``--help``, rendered, and used through the public commands: a job submitted
through the local path and run, its accounting read back, ranks run in the toy container, the
trainer run with the toy strategy. Each kind is one file of the package (counted below, the
table in docs/architecture.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO, hpcbench

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

TOY_ACCOUNTING = '''
"""The toy's accounting reader: a record of every finished job, from its own "command"."""
from hpcbench.jobs.accounting.records import AccountingReader, empty_record


class ToyAccounting(AccountingReader):
    scheduler = "toy"
    source = "toyacct"

    @classmethod
    def read(cls, job_id):
        record = empty_record(cls.scheduler, job_id, cls.source)
        record["available"] = True
        record["job"].update(state="COMPLETED", exit_code=0, elapsed_s=3.0, queue_wait_s=1.0)
        return record
'''

TOY_CONTAINER = '''
"""A toy container runtime: each rank runs under ``env`` with the image named in its environment."""
from hpcbench.jobs.containers.base import ContainerRuntime, image_word, joined


class ToyBox(ContainerRuntime):
    name = "toybox"
    order = 90
    image_is = "a toy image file"

    @classmethod
    def rank_words(cls, spec):
        return ["env", "TOY_BOXED=yes", joined("TOY_IMAGE=", image_word(spec))]
'''

TOY_STRATEGY_KIND = '''
"""A toy strategy's kind (no torch here): its name, implementation and its own option."""
from dataclasses import dataclass

from hpcbench.train.option_fields import option
from hpcbench.train.strategy_kinds import StrategyKind


@dataclass
class ToyOptions:
    toy_greeting: str = option("hello", help="toy: what the toy strategy says when it starts")


class ToyKind(StrategyKind):
    name = "toystrategy"
    implementation = "toy_hpc.toy_strategy:ToyStrategy"
    one_device = True
    options = (ToyOptions,)
'''

TOY_STRATEGY = '''
"""The toy strategy itself (imports torch through the base): one process, the model as it is."""
from hpcbench.train.strategies.base import Strategy


class ToyStrategy(Strategy):
    name = "toystrategy"

    def describe(self):
        return f"toy strategy says {self.config.parallelism.toy_greeting}"
'''

#: the toy package's modules, one per kind of plug-in, and the entry-point group declaring each
TOY_FILES = {
    "scheduler (batch system)": ("__init__.py", TOY_MODULE, "hpcbench.schedulers", "toy = toy_hpc"),
    "launcher": ("launcher.py", TOY_LAUNCHER, "hpcbench.launchers", "toyrun = toy_hpc.launcher"),
    "run-side environment": (
        "environment.py", TOY_ENVIRONMENT, "hpcbench.environments", "toy = toy_hpc.environment",
    ),
    "accounting reader": (
        "accounting.py", TOY_ACCOUNTING, "hpcbench.accounting", "toy = toy_hpc.accounting",
    ),
    "container runtime": (
        "container.py", TOY_CONTAINER, "hpcbench.containers", "toybox = toy_hpc.container",
    ),
    "strategy (kind)": (
        "strategy.py", TOY_STRATEGY_KIND, "hpcbench.strategies", "toystrategy = toy_hpc.strategy",
    ),
    "strategy (implementation)": ("toy_strategy.py", TOY_STRATEGY, "", ""),
}  # fmt: skip

TOY_TEMPLATE = """{% extends "hpcbench/local.sh.j2" %}
{% block directives %}
# toy batch system: {{ r.nodes }} node(s), queue {{ options.toy_queue }}
{% endblock %}
"""


def toy_package(root: Path) -> dict[str, str]:
    """The toy plug-ins as an installed package would be found: one module per kind and the
    scheduler's template, and a ``.dist-info`` declaring their entry points; the environment that
    puts it on the path."""
    package = root / "toy_hpc"
    (package / "templates").mkdir(parents=True)
    groups: dict[str, list[str]] = {}
    for name, text, group, entry_point in TOY_FILES.values():
        (package / name).write_text(textwrap.dedent(text))
        if group:
            groups.setdefault(group, []).append(entry_point)
    (package / "templates" / "toy.sh.j2").write_text(TOY_TEMPLATE)
    info = root / "toy_hpc-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-hpc\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "\n".join(f"[{group}]\n" + "\n".join(lines) + "\n" for group, lines in groups.items())
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


def test_a_plugged_in_batch_system_s_accounting_is_read_for_its_finished_jobs(workdir, tmp_path):
    env = toy_package(tmp_path / "site")
    flags = ["--scheduler", "toy", "--launcher", "direct", "--program", "true"]
    job = hpcbench("submit", *flags, "--wait", "--timeout", "60", cwd=workdir, env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "accounting (from toyacct): COMPLETED exit 0; queued 1 s, ran 3 s" in job.stdout
    job_id = re.search(r"submitted job (\S+) to toy", job.stdout)[1]
    status = hpcbench("status", "--verbose", job_id, cwd=workdir, env=env)
    assert status.returncode == 0, status.stderr
    assert "accounting (from toyacct): COMPLETED exit 0; queued 1" in status.stdout, status.stdout


def test_a_plugged_in_container_runtime_runs_the_ranks_in_its_image(workdir, tmp_path):
    env = toy_package(tmp_path / "site")
    assert "toybox" in hpcbench("submit", "--help", cwd=workdir, env=env).stdout
    (workdir / "toy.img").write_text("an image\n")
    program = f'{sys.executable} -c \'import os; print("boxed:", os.environ["TOY_BOXED"])\''
    flags = ["--container", "toy.img", "--container-runtime", "toybox", "--program", program]
    script = hpcbench("render", "--scheduler", "local", "--launcher", "direct", *flags,
                      cwd=workdir, env=env)  # fmt: skip
    assert script.returncode == 0, script.stderr
    assert "env TOY_BOXED=yes TOY_IMAGE=toy.img " in script.stdout, script.stdout
    job = hpcbench("submit", "--scheduler", "local", "--launcher", "direct", *flags, "--wait",
                   "--timeout", "60", cwd=workdir, env=env)  # fmt: skip
    assert job.returncode == 0, job.stdout + job.stderr
    (output,) = (workdir / "runs").glob("*.out")
    assert "boxed: yes" in output.read_text()
    bare = hpcbench("render", *flags, cwd=workdir)
    assert bare.returncode == 2 and "toybox" in bare.stderr


def test_a_plugged_in_strategy_trains_with_its_own_option(workdir, tmp_path, shapes_data):
    """The toy strategy's kind declares an option: a flag in the trainer's parallelism section,
    a configuration key, a branch of the configuration's tree (``config.parallelism``), recorded
    in metrics.json; the strategy reads it there."""
    env = {**os.environ, **toy_package(tmp_path / "site")}
    train = [sys.executable, "-m", "hpcbench.train"]
    shown = subprocess.run([*train, "--help"], env=env, capture_output=True, text=True, check=True)
    section = shown.stdout.split("\nparallelism:\n")[1].split("\n\n")[0]
    assert "--strategy {auto,single,ddp,mpi,dp,toystrategy}" in section
    assert "--toy-greeting TOY_GREETING" in section and "(default: hello)" in section

    data = shapes_data(900, 9, (16, 12))
    (workdir / "run.toml").write_text('toy_greeting = "from the file"\n')
    args = ["--strategy", "toystrategy", "--config", "run.toml", "--data", str(data), "--model",
            "small_cnn", "--epochs", "1", "--max-steps", "2", "--no-checkpoint", "--progress",
            "none", "--output-dir", "out"]  # fmt: skip
    ran = subprocess.run([*train, *args, "--toy-greeting", "hi there"], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "toy strategy says hi there" in ran.stdout + ran.stderr
    metrics = json.loads((workdir / "out" / "metrics.json").read_text())
    assert metrics["config"]["toy_greeting"] == "hi there"
    assert metrics["run"]["strategy"] == "toystrategy"

    bare = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    refused = subprocess.run([*train, *args], cwd=workdir, env=bare, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 2 and "toystrategy" in refused.stderr


def test_each_kind_of_plug_in_is_the_files_the_architecture_page_says():
    """The toy package holds one module per kind (two for a strategy: its torch-free kind and
    its implementation), as docs/architecture.md's table says."""
    page = (REPO / "docs" / "architecture.md").read_text()
    said = {g: n for n, g in re.findall(r"\| (\d) modules?[^|]*, `(hpcbench\.[a-z]+)` \|", page)}
    modules: dict[str, int] = {}
    for name, _text, group, _entry in TOY_FILES.values():
        modules[group or "hpcbench.strategies"] = modules.get(group or "hpcbench.strategies", 0) + 1
        assert name.endswith(".py")
    assert {group: int(n) for group, n in said.items()} == modules
    assert len(modules) == 6
