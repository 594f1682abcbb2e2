"""Reading one value of a benchmark matrix's table (counts, seconds, names, the trainer's
arguments), each failure one line naming the file and the key (:class:`MatrixError`)."""

from __future__ import annotations

import math
import re
from typing import Any

from hpcbench.jsonfile import JSONObject

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Options the matrix sets for every run itself; a configuration or trainer_args must not.
RESERVED_TRAINER_FLAGS = ("--strategy", "--device", "--output-dir", "--energy", "--energy-interval")


class MatrixError(ValueError):
    """A matrix the user can fix (one line, naming the file and key)."""


def matrix_error(where: str, key: str, problem: str) -> MatrixError:
    return MatrixError(f"{where}: {key}: {problem}")


def read_int(table: JSONObject, key: str, where: str, default: int, low: int, high: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise matrix_error(
            where, key, f"expected a whole number from {low} to {high}, got {value!r}"
        )
    return value


def read_float(
    table: JSONObject, key: str, where: str, default: float, low: float, high: float
) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise matrix_error(where, key, f"expected a number, got {value!r}")
    if not (math.isfinite(value) and low <= value <= high):
        raise matrix_error(where, key, f"expected a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


def read_str(
    table: JSONObject, key: str, where: str, choices: tuple[str, ...] | None = None
) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or any(c in value for c in "\n\r\x00"):
        raise matrix_error(where, key, f"expected one line of text, got {value!r}")
    if choices is not None and value not in choices:
        raise matrix_error(where, key, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def read_args(table: JSONObject, key: str, where: str, trainer: bool = True) -> list[str]:
    """A list of arguments; ``trainer``: the trainer's, which may not set what the matrix sets
    for each run."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise matrix_error(where, key, f"expected a list of strings, got {value!r}")
    for flag in value if trainer else ():
        if flag.split("=", 1)[0] in RESERVED_TRAINER_FLAGS:
            raise matrix_error(
                where,
                key,
                f"{flag.split('=', 1)[0]} is set by the matrix for each run "
                "(strategy and device per configuration, output and energy per run)",
            )
    return list(value)


def read_name(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise matrix_error(
            where,
            key,
            f"{value!r} is not a name (letters, digits, '.', '_', '-'; at most 64; it names "
            "directories)",
        )
    return value
