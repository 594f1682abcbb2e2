"""The last check on a rendered batch script: only its header can hold scheduler directives.

Each scheduler reads its options from comment lines of the script, by its own rule:

* SLURM (``#SBATCH``), PBS/Torque (``#PBS``), LSF (``#BSUB``) and Moab (``#MSUB``) read them from
  the leading block of comments and stop at the first command;
* Grid Engine reads *every* line that begins with ``#$``, wherever it is in the file;
* Flux reads ``#flux:`` lines.

hpcbench writes its directives in that leading block. After it, no line may begin (leading
blanks ignored, any letter case) with any scheduler's prefix: such a line could come only from a
value or a setup line, and one scheduler or another would obey it. The check runs on every
rendered script, whatever template produced it, so it holds by construction and not by the care
of each template.
"""

from __future__ import annotations

from hpcbench.jobs.schedulers import SCHEDULER_CLASSES

# Batch systems hpcbench submits to declare their prefix in their own module
# (``Scheduler.directive_prefix``); these are read by systems it does not drive.
OTHER_DIRECTIVE_PREFIXES = {"moab": "#MSUB", "flux": "#flux:"}


class ScriptCheckError(ValueError):
    """A rendered script with a directive-like line outside its header; one line."""


def header_length(lines: list[str]) -> int:
    """How many lines (shebang included) form the leading block of comments and blank lines."""
    for number, line in enumerate(lines):
        if number == 0 and line.startswith("#!"):
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return number
    return len(lines)


def reading_rules() -> dict[str, str]:
    """Every directive prefix to guard against: each scheduler class's own (a scheduler added to
    :mod:`hpcbench.jobs.schedulers` is guarded without an edit here) and those above."""
    rules = {n: c.directive_prefix for n, c in SCHEDULER_CLASSES.items() if c.directive_prefix}
    return {**rules, **OTHER_DIRECTIVE_PREFIXES}


def directive_of(line: str) -> str | None:
    """The scheduler that would read ``line`` as a directive (ignoring position), or None."""
    text = line.lstrip().lower()
    for scheduler, prefix in reading_rules().items():
        if text.startswith(prefix.lower()):
            return scheduler
    return None


def check_directives(text: str, scheduler: str) -> None:
    """Raise :class:`ScriptCheckError` if a line after the header reads as a directive, or if a
    header line holds a directive of another scheduler than ``scheduler``."""
    lines = text.split("\n")
    end = header_length(lines)
    for number, line in enumerate(lines, start=1):
        reader = directive_of(line)
        if reader is None:
            continue
        if number > end:
            raise ScriptCheckError(
                f"rendered {scheduler} script, line {number}: {line.strip()[:80]!r} would be read "
                f"by {reader} as a directive; no value or setup line may start a line with "
                f"{reading_rules()[reader]!r}"
            )
        if reader != scheduler:
            raise ScriptCheckError(
                f"rendered {scheduler} script, line {number}: {line.strip()[:80]!r} is a {reader} "
                f"directive in a {scheduler} script"
            )
