"""A sweep of any program (``program``, ``program_args``, as a benchmark matrix's): its axes are
the program's settings (a name, values of one line, numbers or booleans), each ``{axis}`` in its
arguments is the task's value, and every setting is in the task's settings file, which
:func:`hpcbench.measure.settings` reads."""

from __future__ import annotations

import math
import re
from typing import Any

from hpcbench.jsonfile import JSONObject
from hpcbench.sweep.documents import AxisValue, ProgramTable, Setting
from hpcbench.sweep.errors import SweepError, fail

#: an axis of any program's sweep, and where a program argument takes its value: {name}
AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]{0,63})\}")


def fill(arg: str, setting: Setting) -> str:
    """``arg`` with each ``{axis}`` replaced by the setting's value (a string as itself, a
    boolean as TOML writes it)."""
    return PLACEHOLDER.sub(lambda m: shown(setting[m.group(1)]), arg)


def value_text(value: AxisValue) -> str:
    """A value as a run directory's name shows it (a list's values joined by ``-``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "-".join(value_text(v) for v in value)
    return str(value)


def shown(value: AxisValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def check_program_value(key: str, value: Any, where: str) -> None:
    """An axis of any program's sweep: a name, and values that are one line of text, numbers
    or booleans (what a settings file and a program argument can hold)."""
    if not AXIS_NAME.fullmatch(key):
        raise fail(where, f"axes.{key}", "an axis name is letters, digits, '_' and '-'")
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(where, f"axes.{key}", f"{value!r} is not a finite number")
    if isinstance(value, str) and (not value or any(c in value for c in "\n\r\x00")):
        raise fail(where, f"axes.{key}", f"expected one line of text, got {value!r}")
    if not isinstance(value, (str, int, float, bool)):
        raise fail(where, f"axes.{key}", f"expected text, a number or a boolean, got {value!r}")


def read_program_table(table: JSONObject, where: str) -> tuple[ProgramTable | None, list[str]]:
    """The program the sweep names and its arguments (each ``{axis}`` naming an axis), or
    (None, []) for hpcbench's trainer."""
    from hpcbench.bench.matrix_program import MatrixError, check_arguments, read_program

    try:
        program = read_program(table, where)
        check_arguments(table, where, program)
    except MatrixError as err:
        raise SweepError(str(err)) from None
    args = table.get("program_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) and "\x00" not in a for a in args):
        raise fail(where, "program_args", f"expected a list of strings, got {args!r}")
    axes = table.get("axes") if isinstance(table.get("axes"), dict) else {}
    for arg in args:
        for name in PLACEHOLDER.findall(arg):
            if name not in axes:
                raise fail(
                    where, "program_args", f"{arg!r}: {{{name}}} names no axis (axes: "
                    f"{', '.join(axes) or 'none'})"
                )  # fmt: skip
    return program, list(args)


def with_matrix_program(table: JSONObject, path: str, where: str) -> JSONObject:
    """``table`` with the program of the matrix it names (and its arguments before the sweep's),
    so that its axes and arguments are checked as that program's."""
    from hpcbench.bench.running.matrix import MatrixError, read_matrix

    try:
        matrix = read_matrix(path)
    except MatrixError as err:
        raise fail(where, "matrix", str(err)) from None
    if matrix.program is None:
        return table
    args = table.get("program_args", [])
    joined = [*matrix.program_args, *(args if isinstance(args, list) else [args])]
    return {**table, "program": matrix.program, "program_args": joined}
