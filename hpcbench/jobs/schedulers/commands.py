"""Running a scheduler's commands (one-line errors quoting what they said) and reading the tail of
a job's log."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from hpcbench.jobs.schedulers.errors import SchedulerError


def run_process(
    argv: Sequence[str], what: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a scheduler command whatever its exit status; only a missing or hung one raises."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise SchedulerError(f"{what}: {argv[0]} not found on PATH") from None
    except OSError as err:
        raise SchedulerError(f"{what}: cannot run {argv[0]}: {err.strerror}") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{what}: {argv[0]} did not answer within {timeout:.0f} s") from None


def run_command(argv: Sequence[str], what: str, timeout: float = 60) -> str:
    """Run a scheduler command; a failure becomes a one-line SchedulerError quoting its stderr."""
    proc = run_process(argv, what, timeout)
    if proc.returncode != 0:
        said = " ".join((proc.stderr or proc.stdout).split()) or f"exit status {proc.returncode}"
        raise SchedulerError(f"{what} refused: {said}")
    return proc.stdout


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ('' for none, or when it does not exist yet)."""
    if lines <= 0:
        return ""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
