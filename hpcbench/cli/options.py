"""The job spec's flags, shared by ``render``, ``submit`` and ``profile show``, and what they
override in the spec (:func:`overrides_from`)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from hpcbench.argparsing import Parser
from hpcbench.jobs.containers import runtime_names
from hpcbench.jobs.launchers import launcher_names
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES, SCHEDULER_CLASSES, this_machine
from hpcbench.jobs.spec import Container
from hpcbench.jobs.spec_options import field_keywords, own_options


def env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def line_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a number of lines, 0 or more, got {text!r}")
    return count


def job_options(spec_positional: bool = True) -> argparse.ArgumentParser:
    """The job spec and the flags over it; ``spec_positional``: the spec file as the first
    argument (``render``, ``submit``), else as ``--spec FILE`` (``profile show NAME``)."""
    p = Parser(add_help=False)
    if spec_positional:
        p.add_argument("spec", nargs="?", help="job spec file (TOML), e.g. jobs/demo.toml")
    else:
        p.add_argument("--spec", metavar="FILE", help="job spec file (TOML), e.g. jobs/demo.toml")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the spec's [smoke] form: the same job in minutes (tiny model, built-in data)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="the cluster profile under the spec (default: $HPCBENCH_PROFILE); hpcbench profile "
        "show NAME prints what it sets",
    )
    _resource_options(p)
    _environment_options(p)
    _launch_options(p)
    _scheduler_options(p)
    _requeue_options(p)
    return p


def _resource_options(p: argparse.ArgumentParser) -> None:
    """Resources, overriding the spec file's."""
    g = p.add_argument_group("resources (override the spec file)")
    g.add_argument("-N", "--nodes", metavar="N")
    g.add_argument("--gpus-per-node", metavar="G")
    g.add_argument(
        "--tasks-per-node", metavar="T", help="ranks per node (default: one per GPU, else 1)"
    )
    g.add_argument("-c", "--cpus-per-task", metavar="C", help="CPUs (and OpenMP threads) per rank")
    g.add_argument("--mem", dest="memory", metavar="SIZE", help="memory per node, e.g. 32G")
    g.add_argument("-t", "--time", metavar="LIMIT", help="time limit: MM, HH:MM:SS or D-HH:MM:SS")
    g.add_argument("-p", "--partition")
    g.add_argument("-A", "--account")
    g.add_argument("--qos")
    g.add_argument("-C", "--constraint")
    g.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("-J", "--job-name")
    g.add_argument("-o", "--output-dir", metavar="DIR", help="where logs and run directories go")


def _environment_options(p: argparse.ArgumentParser) -> None:
    """How the job's shell is prepared."""
    g = p.add_argument_group("environment")
    g.add_argument(
        "--load",
        dest="modules",
        action="append",
        metavar="MODULE",
        help="module to load (repeatable)",
    )
    g.add_argument("--venv", metavar="DIR", help="virtual environment to activate")
    g.add_argument("--conda-env", metavar="NAME")
    g.add_argument("--container", metavar="IMAGE", help="container image to run ranks in")
    g.add_argument(
        "--container-runtime",
        metavar="NAME",
        help="what runs the image: "
        + ", ".join(f"{n} (default)" if n == Container.runtime else n for n in runtime_names()),
    )
    g.add_argument(
        "--bind",
        dest="binds",
        action="append",
        metavar="SRC[:DST]",
        help="container bind (repeatable)",
    )
    g.add_argument("--env", dest="variables", action="append", type=env_pair, metavar="NAME=VALUE")
    g.add_argument("--setup", action="append", metavar="LINE", help="shell line run before launch")


def _launch_options(p: argparse.ArgumentParser) -> None:
    """How ranks start and what they run."""
    g = p.add_argument_group("launch and program")
    g.add_argument("--launcher", choices=launcher_names())
    g.add_argument("--port", metavar="PORT", help="rendezvous port (default: derived from job id)")
    g.add_argument(
        "--placement",
        metavar="auto|none|CPUS",
        help="bind each rank to cores of its own, near its GPU (auto, the default), leave the "
        "launcher's defaults (none), or one CPU list per rank of a node (0-3;4-7)",
    )
    g.add_argument(
        "--preflight",
        dest="doctor",
        action="store_true",
        default=None,
        help="run hpcbench doctor in the allocation before the program; a failed check stops "
        "the job with its reason (docs/doctor.md)",
    )
    g.add_argument(
        "--preflight-args",
        dest="doctor_args",
        metavar="ARGS",
        help="the doctor's options for --preflight, as one quoted line "
        '("--steps launch,communication --step-timeout 20")',
    )
    g.add_argument("--python", metavar="EXE", help="python interpreter on the nodes")
    g.add_argument("-m", "--module", help="python module each rank runs (python -m MODULE)")
    g.add_argument("--script", help="python script each rank runs")
    g.add_argument(
        "--program", dest="command", metavar="CMD", help="a whole command line each rank runs"
    )
    g.add_argument(
        "--directive",
        dest="directives",
        action="append",
        metavar="TEXT",
        help="extra scheduler directive",
    )


def _scheduler_options(p: argparse.ArgumentParser) -> None:
    """Which scheduler, and its options."""
    g = p.add_argument_group("scheduler")
    classes = SCHEDULER_CLASSES.values()
    commands = dict.fromkeys(c.submit_command for c in classes if c.submit_command)
    g.add_argument(
        "--scheduler",
        choices=SCHEDULER_CHOICES,
        help=f"default: detected ({', '.join(commands)}, else {this_machine()})",
    )
    g.add_argument(
        "--host",
        metavar="USER@HOST",
        help="submit to and follow the scheduler of this login node over SSH (your ssh config, "
        "agent and keys; docs/cluster-guide.md)",
    )
    g.add_argument(
        "--remote-dir",
        metavar="DIR",
        help="the working directory on --host (default: hpcbench/<this directory's name>)",
    )
    notes = "".join(f"; {c.after_note}" for c in classes if c.after_note)
    g.add_argument(
        "--after",
        action="append",
        metavar="JOB",
        help="start only after job JOB ended successfully (repeatable; a scheduler dependency"
        f"{notes})",
    )
    for option in own_options():  # the flags of the options one scheduler or launcher declares
        if option.flag_help:
            g.add_argument(
                f"--{option.key.replace('_', '-')}",
                choices=option.choices or None,
                metavar=option.metavar,
                help=option.flag_help,
            )
    g.add_argument(
        "--template-dir",
        action="append",
        metavar="DIR",
        help="directory of templates overriding the built-in ones (repeatable)",
    )


def _requeue_options(p: argparse.ArgumentParser) -> None:
    """Surviving time limits and preemption."""
    g = p.add_argument_group("time limits and preemption (docs/resilience.md)")
    g.add_argument(
        "--requeue",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="signal the ranks before the time limit, checkpoint, requeue and resume "
        "(default: on for hpcbench's trainer)",
    )
    g.add_argument("--max-requeues", metavar="N", help="requeue at most N times (default 3)")
    g.add_argument(
        "--signal-lead",
        metavar="LIMIT",
        help="signal this long before the time limit, e.g. 5 or 00:05:00 (default 5 minutes)",
    )


def overrides_from(args: argparse.Namespace, program_args: list[str]) -> dict[str, tuple[str, Any]]:
    """CLI flags as spec overrides: dotted field -> (flag as typed, value)."""
    from hpcbench.jobs.spec import SpecError

    flags = {
        a.dest: max(a.option_strings, key=len) for a in job_options()._actions if a.option_strings
    }
    out: dict[str, tuple[str, Any]] = {}
    for keyword, dotted in field_keywords().items():
        value = getattr(args, keyword, None)
        if value is None or keyword not in flags:
            continue
        if keyword == "variables":
            value = dict(value)
        elif keyword in ("command", "doctor_args"):
            try:
                value = shlex.split(value)
            except ValueError as err:
                raise SpecError(f"{flags[keyword]}: {err}") from None
        out[dotted] = (flags[keyword], value)
    if program_args:
        out["program.args"] = ("-- ARGS", program_args)
    return out
