"""Checking one value of a job spec by its field's kind (the kinds ``spec.py`` declares in each
field's metadata): counts, times, memory sizes, text that stays one inert line, paths, job ids,
environment tables and choices (the schedulers', launchers' and container runtimes' names from
their registries).
A problem is a ValueError without the field's name; :mod:`.spec_load` adds it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from hpcbench.jobs.containers import runtime_names
from hpcbench.jobs.launchers import launcher_names
from hpcbench.jobs.remote.ssh import check_target
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES, SCHEDULER_CLASSES
from hpcbench.jobs.spec import MAX_LINE_CHARS, MAX_TEXT_CHARS
from hpcbench.jobs.spec_options import requeue_methods
from hpcbench.jobs.units import parse_memory, parse_time
from hpcbench.placement.choice import KEYWORDS as PLACEMENT_KEYWORDS
from hpcbench.placement.choice import parse_explicit
from hpcbench.placement.topology import TopologyError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A leading ~ or ~user, expanded for path fields (a user name as POSIX allows it portably).
_TILDE = re.compile(r"^~([A-Za-z_][A-Za-z0-9_.-]*)?(?=/|$)")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"(?:local-)?[0-9]{1,18}(?:[._][A-Za-z0-9_.-]{1,200})?\Z")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# ----------------------------------------------------------------------------------- validation


def is_utf8(text: str) -> bool:
    """Whether ``text`` is valid Unicode (command-line bytes that are not UTF-8 arrive as lone
    surrogates, which no UTF-8 file can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_string(kind: str, meta: dict[str, Any], value: str) -> str:
    """Check one string of a text, line, path or module field; raise ValueError with the problem."""
    if "\x00" in value:
        raise ValueError("must not hold a NUL byte (no shell can pass one on)")
    if not is_utf8(value):
        raise ValueError(f"is not UTF-8 text ({ascii(value)}); a job script is written as UTF-8")
    single_line = kind in ("line", "linelist", "path", "pathlist", "outdir", "module")
    if single_line and _CONTROL.search(value):
        raise ValueError("must be a single line without control characters")
    limit = meta.get("max_len", MAX_LINE_CHARS if single_line else MAX_TEXT_CHARS)
    if len(value) > limit:
        raise ValueError(f"is {len(value)} characters long, the limit is {limit}")
    if kind == "module" and not _MODULE_NAME.match(value):
        raise ValueError("expected a dotted Python module name like 'hpcbench.train'")
    if (meta.get("noopt") or kind in ("path", "pathlist")) and value.startswith("-"):
        raise ValueError(
            f"must not start with '-' (it would be read as an option); write ./{value}"
        )
    if kind in ("path", "pathlist", "outdir") and value.startswith("~") and not _TILDE.match(value):
        raise ValueError("a leading ~ must be followed by / or a user name (~/x, ~alice/x)")
    if kind == "outdir":
        return _check_output_dir(value)
    return value


def _check_output_dir(value: str) -> str:
    """``output_dir`` reaches scheduler path patterns, so the characters any scheduler interprets
    there (each class's ``log_path_refusals``: the scheduler may still be chosen later) are
    refused: logs would land elsewhere than hpcbench looks for them. A leading ``~`` is expanded
    here, on the submitting machine, which is also where the logs are read.
    """
    for char, (name, why) in log_path_refusals().items():
        if char in value:
            raise ValueError(f"must not hold {name} ({why} in log paths); give the path itself")
    if value.startswith("~"):
        expanded = os.path.expanduser(value)
        if expanded.startswith("~"):
            raise ValueError(f"no such user for {value.split('/', 1)[0]!r}")
        return expanded
    return value


def _check_count(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> int:
    if from_cli and isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError("expected a whole number") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("expected a whole number")
    if kind == "posint" and value < 1:
        raise ValueError("must be a positive count (1 or more)")
    if kind == "nonnegint" and value < 0:
        raise ValueError("must be 0 or more")
    if kind == "port" and not 1024 <= value <= 65535:
        raise ValueError("a port must be between 1024 and 65535")
    if "max" in meta and value > meta["max"]:
        raise ValueError(f"must be at most {meta['max']}")
    return value


def _check_bool(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _check_text(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    if not value:
        raise ValueError("must not be empty")
    return _check_string(kind, meta, value)


def _check_job_ids(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError('expected a list of job ids, e.g. ["12345"]')
    for entry in value:
        if not _JOB_ID.match(entry):
            raise ValueError(
                f"{entry!r} is not a job id (digits, as 12345, 12345_7 or 12345.server, or local-N)"
            )
    return list(value)


def _check_list(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> list[str]:
    if isinstance(value, str):
        raise ValueError('expected a list of strings, e.g. ["a", "b"]')
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    if len(value) > 4096:
        raise ValueError(f"holds {len(value)} entries, the limit is 4096")
    checked = []
    for i, entry in enumerate(value):
        try:
            checked.append(_check_string(kind, meta, entry))
        except ValueError as err:
            raise ValueError(f"entry {i + 1} {err}") from None
    return checked


def _check_env(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError('expected a table of NAME = "value"')
    for name, val in value.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise ValueError(f"{name}: expected a string value")
        try:
            _check_string("text", meta, str(val))
        except ValueError as err:
            raise ValueError(f"{name} {err}") from None
    return {k: str(v) for k, v in value.items()}


def log_path_refusals() -> dict[str, tuple[str, str]]:
    """Every scheduler's refused log-path characters: character -> (its name, who reads it how),
    in the order the schedulers are detected; a character two read alike says both."""
    found: dict[str, tuple[str, list[str], str]] = {}
    for cls in SCHEDULER_CLASSES.values():
        for char, name, reads in cls.log_path_refusals:
            entry = found.setdefault(char, (name, [], reads))
            entry[1].append(cls.label)
    return {
        char: (name, f"{' and '.join(reversed(labels))} {reads}")
        for char, (name, labels, reads) in found.items()
    }


#: the choices of a field whose kind is a registry's (asked when a value is checked)
_REGISTRY_CHOICES: dict[str, Callable[[], tuple[str, ...]]] = {
    "requeue_method": requeue_methods,
    "scheduler": lambda: SCHEDULER_CHOICES,
    "launcher": launcher_names,
    "container_runtime": runtime_names,
}


def _check_placement(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> str:
    text = _check_text("line", meta, value, from_cli).strip()
    if text not in PLACEMENT_KEYWORDS:
        try:
            parse_explicit(text)
        except TopologyError as err:
            raise ValueError(str(err)) from None
    return text


def _check_choice(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> str:
    ask = _REGISTRY_CHOICES.get(kind)
    choices = ask() if ask else meta.get("choices", ())
    if value not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}")
    return value


_CHECKS: dict[str, Callable[[str, dict[str, Any], Any, bool], Any]] = {
    **dict.fromkeys(("posint", "nonnegint", "port"), _check_count),
    "bool": _check_bool,
    "time": lambda kind, meta, value, from_cli: parse_time(value),
    "memory": lambda kind, meta, value, from_cli: parse_memory(value),
    **dict.fromkeys(("text", "line", "path", "outdir", "module"), _check_text),
    "jobids": _check_job_ids,
    "sshhost": lambda kind, meta, value, from_cli: check_target(
        _check_text("line", meta, value, from_cli)
    ),
    **dict.fromkeys(("textlist", "linelist", "pathlist"), _check_list),
    "envdict": _check_env,
    "placement": _check_placement,
    **dict.fromkeys(("choice", *_REGISTRY_CHOICES), _check_choice),
}


def check_value(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> Any:
    """Convert and check one value of a field of ``kind``; raise ValueError with the problem
    (no field name: the caller adds it)."""
    check = _CHECKS.get(kind)
    if check is None:
        raise AssertionError(f"unknown field kind {kind}")  # a bug, not user input
    return check(kind, meta, value, from_cli)
