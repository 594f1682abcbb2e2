"""Shell words and quoting for the batch scripts, as pure functions.

A launch line is a list of shell words. A plain ``str`` is a literal that the renderer quotes; a
:class:`ShellVar` is an expression written by hpcbench (never taken from the user) that the shell
expands on the compute node, such as ``"$head_node:$rdzv_port"``. The batch templates define
those shell variables (``job_id``, ``run_dir``, ``head_node``, ``rdzv_port``, ``mpi_opts``,
``mpi_per_node``) before the launch; nothing from the scheduler's environment is ever expanded at
render time.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ShellVar:
    """A shell expression that must reach the script unquoted (written by hpcbench, not the user)."""

    text: str


Word = str | ShellVar


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TILDE_PREFIX = re.compile(r"^~([A-Za-z_][A-Za-z0-9_.-]*)?(?=/|$)")


def quote_word(value: str) -> str:
    """One inert shell word holding ``value``, written on one line of the script.

    Plain values get :func:`shlex.quote`. A value holding a newline or another control character
    is written as bash's ``$'...'`` with those characters as ``\\xHH`` escapes, so the script text
    never carries a raw newline from a value: no later line of the file can begin with what
    followed it (Grid Engine reads every line starting with ``#$`` as its options).
    """
    if "\x00" in value:
        raise ValueError(f"{value[:40]!r}: a NUL byte cannot be passed through a shell")
    if not _CONTROL.search(value):
        return shlex.quote(value)
    body = value.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", body) + "'"


def path_word(value: str) -> Word:
    """A path that may start with ``~`` or ``~user``: expanded by the shell on the compute node
    (the rest of the path stays quoted), as it would be typed at a prompt."""
    match = _TILDE_PREFIX.match(value)
    if not match:
        return value
    rest = value[match.end() :]
    return ShellVar(match.group(0) + ("/" + quote_word(rest[1:]) if rest[1:] else rest))


def shell_join(words: Iterable[Word], width: int | None = None) -> str:
    """Join words into one shell command line, quoting every literal.

    With ``width``, long lines are continued with `` \\`` so that a script stays readable.
    """
    quoted = [w.text if isinstance(w, ShellVar) else quote_word(w) for w in words]
    if width is None:
        return " ".join(quoted)
    lines = [""]
    for word in quoted:
        if lines[-1].strip() and len(lines[-1]) + 1 + len(word) > width:
            lines.append("    ")
        lines[-1] += (" " if lines[-1].strip() else "") + word
    return " \\\n".join(lines)
