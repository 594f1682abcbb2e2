"""The trainer's options as a TOML file (``--config``): every option a top-level key named as its
flag without the dashes, read with each value checked (:func:`read_toml`) and written back
(:func:`to_toml`)."""

from __future__ import annotations

import difflib
import math
from typing import Any

from hpcbench.tomlfile import TomlFileError, read_toml_file
from hpcbench.train.config import OPTIONS, ConfigError, TrainConfig, kind_of

MAX_OPTIONS_BYTES = 1 << 20  # the trainer's options fit in a few KiB

TOML_KINDS: dict[type, str] = {
    int: "a whole number",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list of numbers",
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_float(value: float) -> float:
    """A TOML number as a float; a whole number beyond float's range as an infinity (which the
    option's rule then refuses)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _from_toml(kind: type, value: Any) -> tuple[bool, Any]:
    """(whether ``value`` fits the option's kind, the value as the option holds it)."""
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if kind is float:
        return _number(value), _as_float(value) if _number(value) else value
    if kind is list:
        ok = isinstance(value, list) and all(_number(v) for v in value)
        return ok, [_as_float(v) for v in value] if ok else value
    return isinstance(value, kind), value


def read_toml(path: str, option: str = "--config") -> dict[str, tuple[str, Any]]:
    """The options a TOML file sets: key as written -> (field name, value); a ConfigError naming
    the file (and the key) for a file that cannot be read, is not TOML, or holds an unknown key or
    a value of the wrong type. Values are checked against their rules later, with the flags."""
    try:
        table = read_toml_file(path, MAX_OPTIONS_BYTES, "a TOML file of options", "an options file")
    except TomlFileError as err:
        raise ConfigError(f"{option} {err}") from None
    return check_options(table, path)


def check_options(table: dict[str, Any], path: str) -> dict[str, tuple[str, Any]]:
    """The options of a table of a ``--config`` file (key -> (field name, value)), each key and
    value's kind checked; errors name ``path`` and the key."""
    by_name = {f.name: f for f in OPTIONS}
    found: dict[str, tuple[str, Any]] = {}
    seen: dict[str, str] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        f = by_name.get(name)
        if f is None:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else " (the options of --help, without dashes)"
            )
            raise ConfigError(f"{path}: unknown option {key!r}{hint}")
        if name in seen:
            raise ConfigError(f"{path}: {seen[name]!r} and {key!r} are the same option")
        kind = kind_of(f)
        ok, converted = _from_toml(kind, value)
        if not ok:
            got = repr(value)
            got = got if len(got) <= 60 else got[:57] + "..."
            raise ConfigError(f"{path}: {key} must be {TOML_KINDS[kind]}, got {got}")
        seen[name] = key
        found[key] = (name, converted)
    return found


def toml_value(value: Any) -> str:
    """One value as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    escaped = "".join(
        "\\" + ch
        if ch in '"\\'
        else f"\\u{ord(ch):04x}"
        if ord(ch) < 0x20 or ord(ch) == 0x7F
        else ch
        for ch in str(value)
    )
    return f'"{escaped}"'


def to_toml(config: TrainConfig) -> str:
    """``config`` as a file for ``--config``: every option that is set, one per line."""
    lines = ["# hpcbench train options: python -m hpcbench.train --config FILE"]
    for f in OPTIONS:
        value = config.value(f.name)
        if value is not None:
            lines.append(f"{f.name} = {toml_value(value)}")
    return "\n".join(lines) + "\n"
