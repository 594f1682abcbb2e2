"""Running a scheduler's commands (one-line errors quoting what they said) and reading the tail of
a job's log."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from hpcbench.files import read_tail
from hpcbench.jobs.schedulers.errors import SchedulerError


class CommandHost(Protocol):
    """Another machine that runs the scheduler's commands (a login node over SSH:
    :mod:`hpcbench.jobs.remote`)."""

    def run(
        self,
        argv: Sequence[str],
        what: str,
        timeout: float = 60,
        stdin_file: Path | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]: ...


#: where the current block's scheduler commands run (None: this machine); set by
#: :func:`hpcbench.jobs.remote.using`
COMMAND_HOST: ContextVar[CommandHost | None] = ContextVar("hpcbench_command_host", default=None)


def run_process(
    argv: Sequence[str],
    what: str,
    timeout: float = 60,
    stdin_file: Path | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a scheduler command whatever its exit status (``stdin_file`` as its input, in
    ``cwd``); only a missing or hung one raises. In a block that works on a login node over SSH
    (:func:`hpcbench.jobs.remote.using`) it runs there."""
    if (host := COMMAND_HOST.get()) is not None:
        return host.run(argv, what, timeout, stdin_file, cwd)
    return run_here(argv, what, timeout, stdin_file, cwd)


def run_here(
    argv: Sequence[str],
    what: str,
    timeout: float = 60,
    stdin_file: Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """:func:`run_process` on this machine, wherever the block's scheduler commands run (ssh
    itself, rsync and scp run here); ``env`` replaces the environment when given."""
    try:
        given = open(stdin_file, "rb") if stdin_file is not None else None  # noqa: SIM115
    except OSError as err:
        raise SchedulerError(f"{what}: cannot read {stdin_file}: {err.strerror}") from None
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout,
            stdin=given if given is not None else subprocess.DEVNULL, cwd=cwd, env=env,
        )  # fmt: skip
    except FileNotFoundError:
        raise SchedulerError(f"{what}: {argv[0]} not found on PATH") from None
    except OSError as err:
        raise SchedulerError(f"{what}: cannot run {argv[0]}: {err.strerror}") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{what}: {argv[0]} did not answer within {timeout:.0f} s") from None
    finally:
        if given is not None:
            given.close()


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
    try:  # a regular file only, its end only: a log may be a FIFO or a link to a device
        text = read_tail(path, 64 * 1024).decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
