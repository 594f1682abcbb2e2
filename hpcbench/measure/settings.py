"""A sweep's settings for any program: :func:`settings` reads the task's settings file
(``$HPCBENCH_SETTINGS``, written by ``hpcbench sweep``) over the program's own defaults, so that
a script that takes no arguments can still be swept."""

from __future__ import annotations

import os
import warnings
from typing import Any

from hpcbench.jsonfile import JSONObject
from hpcbench.tomlfile import TomlFileError, read_toml_file

SETTINGS_VAR = "HPCBENCH_SETTINGS"
MAX_SETTINGS_BYTES = 1 << 20


def settings(**defaults: Any) -> JSONObject:
    """``defaults`` with the values of this sweep task's settings file over them (the file's keys
    as written, ``-`` read as ``_``); just ``defaults`` outside a sweep. A value of another type
    than its default's (an int default takes a float setting) and an unreadable file are
    warnings: the defaults stay."""
    path = os.environ.get(SETTINGS_VAR)
    if not path:
        return dict(defaults)
    try:
        found = read_toml_file(path, MAX_SETTINGS_BYTES, "a settings file", "sweep settings")
    except TomlFileError as err:
        warnings.warn(f"hpcbench.measure: {err}; the defaults are used", stacklevel=2)
        return dict(defaults)
    chosen = dict(defaults)
    for raw, value in found.items():
        key = raw.replace("-", "_")
        default = defaults.get(key)
        if default is not None and not _same_kind(default, value):
            warnings.warn(
                f"hpcbench.measure: {path}: {raw} = {value!r} is not a {type(default).__name__} "
                f"as its default {default!r}; the default is used",
                stacklevel=2,
            )
            continue
        chosen[key] = float(value) if isinstance(default, float) else value
    return chosen


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
