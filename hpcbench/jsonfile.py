"""Reading JSON that a file holds, with every failure one line naming the file.

:func:`parse_json` turns bytes or text read from a file into its content: text that is not UTF-8,
JSON that does not parse, a number of more than 4300 digits and nesting too deep for the parser
each become a :class:`JsonFileError` saying ``"<path>: not valid JSON (<why>)"``.
:func:`read_json` reads the file first, as hpcbench reads every file a results directory holds:
a regular file only (a FIFO, a device or a link to one is refused before a byte is read, never
waited on), at most :data:`MAX_JSON_BYTES`; a missing, unreadable or oversized file is one line
too. Callers re-raise the error as their own class.

:data:`JSONValue` and :data:`JSONObject` type what is truly arbitrary JSON (a user's config
table, a measured program's own values); a document hpcbench writes has its own type beside its
writer (:class:`hpcbench.run_documents.Metrics`, …).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcbench.files import NotRegularFile, read_regular

#: any value JSON (or TOML, read as JSON) holds, as :func:`json.loads` gives it
JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
#: a JSON object whose keys are not known in advance (a user's table, a program's own values)
JSONObject = dict[str, JSONValue]

# The largest JSON file read (metrics, accounting, energy samples of a long run, a sweep's plan):
# far above what hpcbench writes, far below what would exhaust a login node's memory.
MAX_JSON_BYTES = 128 << 20


class JsonFileError(ValueError):
    """JSON that cannot be read; ``str(err)`` is one line naming the file, ``why`` the reason
    alone (for a caller that words its own line); ``kind`` is ``"missing"`` (no such file),
    ``"unreadable"`` (not a regular file, too large, no permission) or ``"invalid"`` (read, but
    not JSON)."""

    def __init__(self, message: str, why: str = "", kind: str = "invalid") -> None:
        super().__init__(message)
        self.why = why or message
        self.kind = kind

    @property
    def missing(self) -> bool:
        return self.kind == "missing"


def _not_json(path: str | Path, why: str) -> JsonFileError:
    return JsonFileError(f"{path}: not valid JSON ({why})", why)


def parse_json(
    raw: bytes | str, path: str | Path, parse_constant: Callable[[str], Any] | None = None
) -> Any:
    """The content of ``raw``, read from ``path``; ``parse_constant`` as :func:`json.loads`
    takes it (to refuse NaN and Infinity). Bytes are decoded as :func:`json.loads` decodes them:
    UTF-8 (with or without a byte-order mark), UTF-16 or UTF-32, told apart by their first bytes."""
    if isinstance(raw, bytes):
        encoding = json.detect_encoding(raw)
        try:
            raw = raw.decode(encoding, "surrogatepass")
        except UnicodeDecodeError as err:
            name = "UTF-8" if encoding.startswith("utf-8") else encoding.upper()
            raise _not_json(path, f"not {name} text, byte {err.start}") from None
    try:
        return json.loads(raw, parse_constant=parse_constant)
    except json.JSONDecodeError as err:
        raise _not_json(path, f"{err.msg} at line {err.lineno}") from None
    except ValueError as err:  # json's own int() (over 4300 digits), or parse_constant's refusal
        raise _not_json(path, str(err)) from None
    except RecursionError:
        raise _not_json(path, "nested too deeply") from None


def read_json(path: Path, missing_hint: str = "", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The content of the JSON file ``path``; ``missing_hint`` follows "missing" when it is not
    there (what its absence means). Only a regular file of at most ``max_bytes`` is read."""
    try:
        raw = read_regular(path, max_bytes)
    except FileNotFoundError:
        hint = f"; {missing_hint}" if missing_hint else ""
        raise JsonFileError(f"{path}: missing{hint}", "missing", "missing") from None
    except NotRegularFile:
        why = "not a regular file (a FIFO, a device or a directory): not read"
        raise JsonFileError(f"{path}: {why}", why, "unreadable") from None
    except OSError as err:
        why = f"cannot read ({err.strerror or err})"
        raise JsonFileError(f"{path}: {why}", why, "unreadable") from None
    except ValueError as err:  # larger than max_bytes
        why = f"{err}: not a file hpcbench wrote"
        raise JsonFileError(f"{path}: {why}", why, "unreadable") from None
    return parse_json(raw, path)
