"""Writing the CSV files hpcbench leaves for people to open (predictions, the bench and sweep
tables): one writer, so that no cell of any of them runs in a spreadsheet.

A text cell a spreadsheet would read as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return: a file named ``=HYPERLINK(…).jpg``, a configuration named ``=cmd|…``), or
that starts with ``'``, gets a leading ``'`` (OWASP's advice on CSV injection); removing one
leading ``'`` gives the text back, always. Numbers pass unchanged (a negative number is a
number, not a formula). Text that is not UTF-8 (a file name's bytes kept as surrogate escapes, a
lone surrogate) is written as ``\\xNN`` / ``\\udNNN`` instead of failing the whole file.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

# What makes a spreadsheet read a cell as a formula, and the quote that neutralises it.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 text: bytes that are not UTF-8 (kept by the file system as surrogate
    escapes) as ``\\xNN``, any other lone surrogate as ``\\udNNN``."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system byte makes
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def inert(cell: str) -> str:
    """A text cell no spreadsheet runs (see the module's docstring)."""
    text = utf8_text(cell)
    return "'" + text if text.startswith((*FORMULA_START, "'")) else text


def cell(value: Any, float_format: str = "") -> Any:
    """One cell: None as empty, a float in ``float_format`` (as written by ``format``), other
    numbers as they are, text made inert."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return format(value, float_format)
    if isinstance(value, int):
        return value
    return inert(str(value))


def csv_text(
    header: list[str],
    rows: Iterable[Iterable[Any]],
    float_format: str = "",
    lineterminator: str = "\n",
) -> str:
    """The CSV text of ``header`` and ``rows``, every cell through :func:`cell`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=lineterminator)
    writer.writerow([inert(h) for h in header])
    for row in rows:
        writer.writerow([cell(v, float_format) for v in row])
    return out.getvalue()
