"""Reading job logs: find the first failing rank's traceback in a job's combined output, and
tell Python's warnings apart from what went wrong.

Launchers label each rank's lines differently; all four labels are understood:
torchrun ``--tee`` (``[default<local rank>]:``), MPICH/Intel MPI ``-prepend-rank`` (``[<rank>] ``),
Open MPI ``--tag-output`` (``[<job>,<rank>]<stderr>:``) and ``srun --label`` (``<rank>: ``).
torchrun's own "Root Cause" summary, when present, names the global rank that failed first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_LABEL = re.compile(
    r"^(?:\[default(?P<torchrun>\d+)\]:"
    r"|\[(?P<mpich>\d+)\] "
    r"|\[\d+,(?P<openmpi>\d+)\]<std(?:err|out)>:\s?"
    r"|\s*(?P<srun>\d+): )"
)
_ROOT_CAUSE_RANK = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)", re.DOTALL
)
_TRACEBACK = "Traceback (most recent call last):"
# the launchers' own error lines say that a rank died, not why
_LAUNCHER_ERRORS = re.compile(r"(?:srun|slurmstepd|mpiexec|mpirun|torchrun|hpcbench)(?:-\S+)?:")
# "prog: error: …" as argparse prints it; prog may be "python -m hpcbench.train"
_ERROR_LINE = re.compile(r"[A-Za-z][\w./-]*(?: [\w./-]+){0,3}: error: \S")
# The lines that say why a rank's program never started or died without a traceback: Python
# that cannot open the script or find the module, a shell or launcher that cannot execute the
# program, the C++ runtime's abort (a thread left running at exit), a fatal interpreter error.
_FATAL_LINE = re.compile(
    r"can't open file |: No module named |Error while finding module specification"
    r"|: command not found$|execve\(\)|execvp error|terminate called |Fatal Python error: "
)
# Frames of the launchers themselves: their tracebacks say that a rank died, not why.
_LAUNCHER_FRAMES = (
    "torch/distributed/run.py",
    "torch/distributed/elastic",
    "torch/distributed/launch",
)


# Launchers' own lines that a rank died of a signal that leaves no traceback (SIGKILL, the OOM
# killer, a segfault): srun's "srun: error: node2: task 1: Killed". Not "Aborted" or
# "Terminated": MPI_Abort and srun's own clean-up end the other ranks that way after a rank's
# error. (MPICH's mpiexec names only the PID.)
# The tasks of a node that ended alike reach srun together and share a line ("tasks 2-3:
# Killed": one killed, its neighbour killed by --kill-on-bad-exit); which died first is not in
# the log, so all of them are named.
_SRUN_DEATH = re.compile(
    r"srun: error: (?P<node>\S+): tasks? (?P<rank>\d+(?:[-,]\d+)*): "
    r"(?P<how>Killed|Segmentation fault|Bus error|Illegal instruction|Floating point exception)"
)

# What a rank's MPI call raises when a peer it talks to is gone: a consequence of that peer's
# death, whichever line reached the log first (the launcher's report of the death can come after).
_PEER_LOST = re.compile(r"mpi4py\.MPI\.Exception|MPI_ERR_PROC_FAILED|MPIDI_\w+: Connection")


@dataclass
class RankError:
    # global rank when known, else the label the launcher printed; several ("2-3", "4,6-7")
    # where the launcher reported them together
    rank: str | None
    traceback: str


def _split(line: str) -> tuple[str, str | None, str]:
    m = _LABEL.match(line)
    if not m:
        return "", None, line
    label = next(v for v in m.groupdict().values() if v is not None)
    return m.group(0), label, line[m.end() :]


def _block(lines: list[str], start: int, prefix: str) -> list[str]:
    """The traceback starting at ``start``: its frames and the exception line that ends it."""
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if prefix and not line.startswith(prefix):
            continue  # another rank's line interleaved
        body = line[len(prefix) :]
        block.append(line)
        if body and not body[0].isspace() and not body.startswith(_TRACEBACK):
            break  # "SomeError: message" ends a traceback
    return block


def killed_rank(lines: list[str]) -> tuple[int, RankError] | None:
    """(line index, the rank) of the first rank a launcher says died of a signal."""
    for i, line in enumerate(lines):
        if m := _SRUN_DEATH.search(line):
            return i, RankError(m.group("rank"), line.strip())
    return None


def first_rank_error(text: str, one_line_errors: bool = True) -> RankError | None:
    """The first traceback printed by a rank (not by a launcher), with the rank if known -- unless
    a launcher said before it that a rank died of a signal (a rank killed outright prints
    nothing; the others' errors follow from it); else the first one-line error a rank printed
    (unless ``one_line_errors`` is False: a caller with several logs looks for a traceback in
    each before settling for a line)."""
    lines = text.splitlines()
    killed = killed_rank(lines)
    found = _first_traceback(lines, text, one_line_errors)
    if killed is not None and (
        found is None or found[0] > killed[0] or _PEER_LOST.search(found[1].traceback)
    ):
        return killed[1]
    return None if found is None else found[1]


def _first_traceback(
    lines: list[str], text: str, one_line_errors: bool
) -> tuple[int, RankError] | None:
    root = _ROOT_CAUSE_RANK.search(text)
    fallback: tuple[int, RankError] | None = None
    for i, line in enumerate(lines):
        prefix, label, body = _split(line)
        if not body.startswith(_TRACEBACK):
            continue
        block = _block(lines, i, prefix)
        if any(frame in b for b in block for frame in _LAUNCHER_FRAMES):
            continue
        is_torchrun_label = prefix.startswith("[default")
        rank = root.group(1) if (root and (is_torchrun_label or label is None)) else label
        error = (i, RankError(rank, "\n".join(block)))
        if label is not None:
            return error
        fallback = fallback or error
    if fallback is None and one_line_errors:
        fallback = _first_error_line(lines, root.group(1) if root else None)
    if fallback is None and root:
        return len(lines), RankError(root.group(1), "")
    return fallback


def _first_error_line(lines: list[str], root_rank: str | None) -> tuple[int, RankError] | None:
    """A rank that stopped with a one-line error (``hpcbench train: error: ...``, argparse's
    ``prog: error: ...``) and no traceback, or whose program never started (``can't open
    file``) or aborted (``terminate called ...``): that line is the reason."""
    for i, line in enumerate(lines):
        prefix, label, body = _split(line)
        one_line = _ERROR_LINE.match(body) and not _LAUNCHER_ERRORS.match(body)
        if one_line or _FATAL_LINE.search(body):
            torchrun = prefix.startswith("[default")
            return i, RankError(
                root_rank if (torchrun or label is None) and root_rank else label, line
            )
    return None


# A Python warning as the warnings module prints it ("path:line: SomethingWarning: text"), under
# any launcher's rank label; the indented source line it prints after is part of it.
_WARNING = re.compile(r"^\S.*?:\d+: \w*Warning: ")


def without_warnings(text: str) -> tuple[str, int]:
    """``text`` without Python's warning lines (each with the source line printed under it),
    and how many lines were left out; ``text`` itself when nothing else is in it."""
    kept: list[str] = []
    dropped = 0
    after_warning = False
    for line in text.splitlines():
        _, _, body = _split(line)
        if _WARNING.match(body):
            dropped, after_warning = dropped + 1, True
            continue
        if after_warning and body.startswith(" "):
            dropped += 1
            continue
        after_warning = False
        kept.append(line)
    if not dropped or not any(line.strip() for line in kept):
        return text, 0
    return "\n".join(kept), dropped


def error_tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of a log's ``text`` other than Python's warnings (a line says how
    many warning lines were left out), so that a job's real errors are not pushed out of view by
    a deprecation warning every rank printed."""
    kept, dropped = without_warnings(text)
    shown = "\n".join(kept.splitlines()[-lines:]) if lines > 0 else ""
    if dropped and shown:
        shown += f"\n({dropped} line(s) of Python warnings left out)"
    return shown


PREFLIGHT_FAILED = "hpcbench: preflight failed: "


def preflight_line(stderr_path: str | Path) -> str | None:
    """The ``submit --preflight`` verdict a failed job's error log ends with, if any."""
    from hpcbench.jobs.schedulers.commands import tail

    found = [
        line for line in tail(stderr_path, 200).splitlines() if line.startswith(PREFLIGHT_FAILED)
    ]
    return found[-1] if found else None
