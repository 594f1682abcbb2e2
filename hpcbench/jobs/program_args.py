"""The arguments a job gives hpcbench's own programs, checked with their own parsers before
anything is queued.

A mistyped trainer option (``-- --epcohs 3``) would otherwise pass ``submit`` and ``--dry-run``,
wait in the queue, and fail on the compute node. When the job runs ``python -m hpcbench.train``
or ``python -m hpcbench.predict`` (or the doctor, itself or as ``submit --preflight`` with
``launcher.doctor_args``), the program's own parser reads its arguments at render time:
an unknown option, a value of the wrong type or an invalid choice is one line naming
``program.args``, with the option it was probably meant to be. Options the program requires are
not demanded here (a spec may leave ``--checkpoint`` to the command line of each submission), and
values are not checked against files: those exist where the job runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import NoReturn

from hpcbench.argparsing import suggestion
from hpcbench.jobs.spec import JobSpec, SpecError

#: the module a job runs -> the module whose ``build_parser()`` reads its arguments
PARSERS = {
    "hpcbench.train": "hpcbench.train.command_line",
    "hpcbench.predict": "hpcbench.predict.config",
    "hpcbench.doctor": "hpcbench.doctor.entry",
}


def check_program_args(spec: JobSpec) -> None:
    """Raise :class:`SpecError` when hpcbench's program (or the preflight's doctor) would refuse
    ``spec``'s arguments."""
    if spec.launcher.doctor_args:
        _parse("hpcbench.doctor", spec.launcher.doctor_args, "launcher.doctor_args", spec)
    program = spec.program
    if program.command or program.script or program.module not in PARSERS:
        return
    args = ["--config", program.config, *program.args] if program.config else list(program.args)
    _parse(program.module, args, f"program.args (python -m {program.module})", spec)


def _parse(module: str, args: list[str], where: str, spec: JobSpec) -> None:
    if any(a in ("-h", "--help") for a in args):
        raise SpecError(f"{where}: --help prints the usage and stops the job; remove it")
    parser = importlib.import_module(PARSERS[module]).build_parser()
    for action in parser._actions:  # given per submission, e.g. after "--" (--checkpoint)
        action.required = False

    def refuse(message: str) -> NoReturn:
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)  # one line
        raise SpecError(f"{where}: {shown}{suggestion(parser, message)}")

    parser.error = refuse  # type: ignore[method-assign]
    try:
        given = parser.parse_args(args)
    except argparse.ArgumentError as err:  # raised directly where exit_on_error is off
        refuse(str(err))
    rules = getattr(importlib.import_module(PARSERS[module]), "given_problem", None)
    if rules is not None and _same_python(spec) and (problem := rules(given)) is not None:
        raise SpecError(f"{where}: {problem}")


def _same_python(spec: JobSpec) -> bool:
    """Whether the job's program runs with this Python's packages (its rules then hold there:
    a model name is one this torchvision knows), not a container's, a module's or another
    environment's, nor a login node's over SSH."""
    env = spec.environment
    if spec.scheduler.host or env.container or env.modules or env.conda_env or env.setup:
        return False
    if env.venv and Path(env.venv).expanduser().resolve() != Path(sys.prefix).resolve():
        return False
    python = spec.program.python
    return (
        python in ("python", "python3")
        or Path(python).expanduser().resolve() == Path(sys.executable).resolve()
    )
