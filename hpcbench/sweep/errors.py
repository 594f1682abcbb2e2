"""A sweep the user can fix: :class:`SweepError`, one line naming the file and the key."""

from __future__ import annotations


class SweepError(ValueError):
    """A sweep the user can fix (one line, naming the file and key)."""


def fail(where: str, key: str, problem: str) -> SweepError:
    return SweepError(f"{where}: {key}: {problem}")
