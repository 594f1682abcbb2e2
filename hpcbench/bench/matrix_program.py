"""The program a benchmark matrix measures: hpcbench's trainer (the default, with the matrix's
``trainer_args``), or any program (``program = { module = … | script = … | command = [...] }``,
with ``program_args``), as a job's program is. Any program learns each run's configuration from
its environment (:data:`RUN_VARIABLES`), which :mod:`hpcbench.measure` reads: the strategy and
the device it is to use, and whether this run samples energy.

Its table is typed :class:`ProgramTable` (as ``bench.json`` and a sweep's plan record it)."""

from __future__ import annotations

import shlex
from typing import TypedDict

from hpcbench.bench.matrix_values import MatrixError, matrix_error, read_args
from hpcbench.jsonfile import JSONObject

PROGRAM_KINDS = ("module", "script", "command")


class ProgramTable(TypedDict, total=False):
    """A program table, checked: exactly one of its keys."""

    module: str
    script: str
    command: list[str]


#: what each run of a matrix tells any program through its environment
STRATEGY_VAR, DEVICE_VAR = "HPCBENCH_STRATEGY", "HPCBENCH_DEVICE"
ENERGY_VAR, ENERGY_INTERVAL_VAR = "HPCBENCH_ENERGY", "HPCBENCH_ENERGY_INTERVAL"
RUN_VARIABLES = (STRATEGY_VAR, DEVICE_VAR, ENERGY_VAR, ENERGY_INTERVAL_VAR)


def read_program(table: JSONObject, where: str) -> ProgramTable | None:
    """The matrix's ``program`` table (one of module, script or command), checked; None for
    hpcbench's trainer. Its values are checked again as a job spec's program when each run's
    spec is made."""
    program = table.get("program")
    if program is None:
        return None
    if not isinstance(program, dict):
        raise matrix_error(
            where, "program", f"expected a table (module, script or command), got {program!r}"
        )
    unknown = [k for k in program if k not in PROGRAM_KINDS]
    if unknown or len(program) != 1:
        raise matrix_error(
            where, "program", "give exactly one of module, script or command, e.g. "
            '{ script = "train.py" }' + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )  # fmt: skip
    kind, value = next(iter(program.items()))
    if kind == "command":
        words = read_args(program, "command", f"{where}: program", trainer=False)
        if not words:
            raise matrix_error(where, "program.command", "must not be empty")
        return {"command": words}
    if not isinstance(value, str) or not value.strip() or any(c in value for c in "\n\r\x00"):
        raise matrix_error(where, f"program.{kind}", f"expected one line of text, got {value!r}")
    return {kind: value}


def check_arguments(table: JSONObject, where: str, program: ProgramTable | None) -> None:
    """``trainer_args`` are hpcbench's trainer's flags, ``program_args`` any program's: each
    only with its program."""
    if program is not None and table.get("trainer_args"):
        raise matrix_error(
            where, "trainer_args", "a program is named (program = ...): give its arguments as "
            "program_args"
        )  # fmt: skip
    if program is None and table.get("program_args"):
        raise matrix_error(
            where, "program_args", "the arguments of a program named with program = "
            "{ script = ... }; hpcbench's trainer takes trainer_args"
        )  # fmt: skip


def program_line(program: ProgramTable | None, args: list[str]) -> str:
    """The program and its arguments as a person reads them (``python train.py --lr {lr}``);
    hpcbench's trainer for None. A word with a space or a quote in it is quoted."""
    if program is None:
        words = ["python", "-m", "hpcbench.train"]
    elif "command" in program:
        words = [str(w) for w in program["command"]]
    elif "module" in program:
        words = ["python", "-m", str(program["module"])]
    else:
        words = ["python", str(program.get("script"))]
    return " ".join(_shown_word(w) for w in [*words, *args])


def _shown_word(word: str) -> str:
    needs_quotes = not word or any(c.isspace() or c in "'\"\\" for c in word)
    return shlex.quote(word) if needs_quotes else word


def run_variables(strategy: str, device: str, energy_interval: float | None) -> dict[str, str]:
    """The variables a run of any program gets: its configuration's strategy and device, and,
    for an energy run, the sampler's period."""
    found = {STRATEGY_VAR: strategy, DEVICE_VAR: device}
    if energy_interval is not None:
        found.update({ENERGY_VAR: "on", ENERGY_INTERVAL_VAR: f"{energy_interval:g}"})
    return found


__all__ = ["MatrixError", "check_arguments", "program_line", "read_program", "run_variables"]
