"""The command-line parser of every hpcbench entry point: no abbreviated options, and a mistyped
one answered with the option it was probably meant to be.

argparse takes any unambiguous prefix of a long option by default: ``--node 2`` is ``--nodes 2``
and ``--gpus-per-nod 3`` is ``--gpus-per-node 3``, so a typo passes unnoticed until a prefix
becomes ambiguous when an option is added. A job script is read once and runs for hours: every
option is spelt in full here, and ``unrecognized arguments: --node 2`` comes with ``did you mean
--nodes?``. Standard library only: this runs on login nodes.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

UNRECOGNIZED = "unrecognized arguments: "
USAGE_LINES = 6  # a longer usage (the trainer's runs over 30) is shortened to one line


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` without abbreviations, whose errors for an unknown option
    suggest the closest known one. Sub-commands made with ``add_subparsers`` are of this class
    too; an unknown option is matched against the options of the sub-command that was parsed."""

    #: the innermost parser that parsed arguments last (a sub-command's): where the options of
    #: an "unrecognized arguments" error, raised by the outermost parser, belong
    _last: Parser | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        Parser._last = self
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """The usage of the command that was parsed (a sub-command's, not ``hpcbench``'s), in
        one line where the full one would run over :data:`USAGE_LINES` lines, then the error
        with its suggestion; exit 2."""
        parsed = Parser._last or self
        usage = parsed.format_usage()
        if usage.count("\n") > USAGE_LINES:
            usage = f"usage: {parsed.prog} [options]  ({parsed.prog} -h lists them)\n"
        self._print_message(usage, sys.stderr)
        self.exit(2, f"{parsed.prog}: error: {message}{suggestion(parsed, message)}\n")


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``" (did you mean --nodes?)"`` for each unknown option of an "unrecognized arguments"
    ``message`` that is close to one of ``parser``'s options; "" when none is."""
    if not message.startswith(UNRECOGNIZED):
        return ""
    known = [s for s in parser._option_string_actions if s.startswith("--")]
    hints = []
    for word in message[len(UNRECOGNIZED) :].split():
        if not word.startswith("--"):
            continue
        flag = word.split("=", 1)[0]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        if close and close[0] != flag:
            hints.append(f"{flag}: did you mean {close[0]}?")
    return f" ({'; '.join(hints)})" if hints else ""


def count(low: int, high: int = 10_000_000) -> Any:
    """An argparse type: a whole number from ``low`` to ``high``, else a usage error saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low} to {high:,}, got {text[:40]!r}"
            )
        return value

    return parse
