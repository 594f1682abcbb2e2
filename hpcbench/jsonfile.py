"""Reading a JSON file that hpcbench wrote, with every failure one line naming the file.

A missing file, one that cannot be read, text that is not UTF-8, JSON that does not parse, a
number of more than 4300 digits and nesting too deep for the parser each become a
:class:`JsonFileError` whose message is ``"<path>: <what went wrong>"``; callers re-raise it as
their own error class.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class JsonFileError(ValueError):
    """A JSON file that cannot be read; ``str(err)`` is one line naming the file."""


def read_json(path: Path, missing_hint: str = "") -> Any:
    """The content of the JSON file ``path``; ``missing_hint`` follows "missing" when it is not
    there (what its absence means)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JsonFileError(f"{path}: missing; {missing_hint}") from None
    except OSError as err:
        raise JsonFileError(f"{path}: cannot read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise JsonFileError(f"{path}: not JSON (not UTF-8 text, byte {err.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JsonFileError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    except ValueError as err:  # json's own int(): a number of more than 4300 digits
        raise JsonFileError(f"{path}: not JSON ({err})") from None
    except RecursionError:
        raise JsonFileError(f"{path}: not JSON that hpcbench wrote (nested too deeply)") from None
