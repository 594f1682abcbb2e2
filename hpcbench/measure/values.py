"""A measured run's values made valid JSON before they are kept (:func:`plain`): the program's
``config`` and the documents rank 0 writes. JSON has no NaN nor infinity and Python's writer
refuses a cycle, a whole number of thousands of digits and an object it cannot print: one such
value must not lose the whole ``metrics.json``, so each becomes null or a short placeholder text,
and the caller is told (one line naming where it was) to warn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: a whole number this large or larger is kept as a placeholder text (JSON readers use 64 bits)
MAX_WHOLE = 2**63
#: nesting deeper than this is a placeholder (a structure that is not settings)
MAX_DEPTH = 32


def plain(value: Any, warn: Callable[[str], None], where: str = "config") -> Any:
    """``value`` as JSON-able data (dicts with text keys, lists, text, numbers, None): a number
    that is not finite is None; a cycle, a too deep nesting, a huge whole number and an object
    whose ``str()`` fails are placeholders (``"<cycle>"``, ...); another object is its text (a
    path, an enum). ``warn`` gets one line for each value changed."""
    return _plain(value, warn, where, set(), 0)


def _plain(value: Any, warn: Callable[[str], None], where: str, seen: set[int],
           depth: int) -> Any:  # fmt: skip
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if -MAX_WHOLE < value < MAX_WHOLE:
            return int(value)
        warn(f"{where}: a whole number of {value.bit_length()} bits: kept as a placeholder text")
        return f"<a whole number of {value.bit_length()} bits>"
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        warn(f"{where}: {value!r} is not a finite number: null")
        return None
    if isinstance(value, (dict, list, tuple)):
        if id(value) in seen:
            warn(f"{where}: refers to itself (a cycle): kept as a placeholder text")
            return "<cycle>"
        if depth >= MAX_DEPTH:
            warn(f"{where}: nested deeper than {MAX_DEPTH}: kept as a placeholder text")
            return "<too deep>"
        seen.add(id(value))
        try:
            if isinstance(value, dict):
                return {(k := _key(key, warn, where)): _plain(item, warn, f"{where}.{k}", seen,
                                                            depth + 1)
                        for key, item in value.items()}  # fmt: skip
            return [_plain(item, warn, f"{where}[{i}]", seen, depth + 1)
                    for i, item in enumerate(value)]  # fmt: skip
        finally:
            seen.discard(id(value))
    return _text(value, warn, where)


def _key(key: Any, warn: Callable[[str], None], where: str) -> str:
    """A dict key as JSON's writer makes it (text; a number, a bool, None as their JSON)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, (int, float)):
        kept = _plain(key, warn, where, set(), 0)
        return "null" if kept is None else str(kept)
    return _text(key, warn, where)


def _text(value: Any, warn: Callable[[str], None], where: str) -> str:
    kind = type(value).__name__
    try:
        return str(value)
    except Exception as err:
        warn(f"{where}: a {kind} whose text cannot be made ({type(err).__name__}): kept as a "
             "placeholder text")  # fmt: skip
        return f"<unprintable {kind}>"
