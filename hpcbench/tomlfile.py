"""Reading every TOML file hpcbench takes as input (a job spec, the trainer's ``--config`` and
``--settings``, a benchmark matrix, a sweep, a profile's text), with every failure one line
naming the file: missing, not a regular file (a FIFO never blocks), too large, not UTF-8, not
TOML, an integer of more than 4300 digits, nesting too deep. Callers re-raise
:class:`TomlFileError` as their own class. The one place that imports ``tomllib``.

A table read is a :data:`hpcbench.jsonfile.JSONObject` (its values JSON's, or TOML's dates and
times): what it holds is not known until its reader checks it."""

from __future__ import annotations

import sys
from pathlib import Path

from hpcbench.files import NotRegularFile, read_regular
from hpcbench.jsonfile import JSONObject

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class TomlFileError(ValueError):
    """A TOML file that cannot be read; ``str(err)`` is one line naming the file."""


def read_toml_file(
    path: str | Path, max_bytes: int, what: str, kind: str, missing: str = "no such file"
) -> JSONObject:
    """The table of the TOML file ``path``, arbitrary until its caller checks it; the messages
    name the file the user should give (``what``: "the matrix file"), what a file too large is
    not (``kind``: "a matrix") and how a missing one is said (``missing``)."""
    where = str(path)
    try:
        text = read_regular(path, max_bytes).decode("utf-8-sig")
    except FileNotFoundError:
        raise TomlFileError(f"{where}: {missing}") from None
    except NotRegularFile:
        raise TomlFileError(f"{where}: not a regular file; give {what} (TOML)") from None
    except OSError as err:
        raise TomlFileError(f"{where}: cannot read it ({err.strerror})") from None
    except ValueError as err:  # too large (UnicodeDecodeError is handled below)
        if isinstance(err, UnicodeDecodeError):
            raise TomlFileError(f"{where}: not UTF-8 text (byte {err.start})") from None
        raise TomlFileError(f"{where}: {err}; not {kind}") from None
    return parse_toml(text, where)


def parse_toml(text: str, where: str) -> JSONObject:
    """The table of TOML ``text`` (from ``where``); a :class:`TomlFileError` naming it."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise TomlFileError(f"{where}: not valid TOML ({' '.join(str(err).split())})") from None
    except ValueError as err:  # tomllib's own int(): an integer of more than 4300 digits
        raise TomlFileError(f"{where}: not valid TOML ({err})") from None
    except RecursionError:
        raise TomlFileError(f"{where}: not valid TOML (nested too deeply)") from None
