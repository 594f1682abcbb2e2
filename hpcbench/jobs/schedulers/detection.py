"""Which batch system this machine has: each batch system's own check, asked in order, and the
list of every batch system defined so far in that order.

Every batch system has this part (the :class:`~.base.Scheduler` base includes it). One that
``--scheduler auto`` should recognise defines ``detect`` (by default it never claims a machine)
and a ``detect_order`` when it must be asked before or after another whose submit command has
the same name.
"""

from __future__ import annotations

from typing import ClassVar

from hpcbench.plugins import registered


class Detection:
    """Whether this machine's batch system is this one."""

    #: the order in which :func:`hpcbench.jobs.schedulers.detect` asks (lowest first)
    detect_order: ClassVar[int] = 50

    @classmethod
    def detect(cls) -> str | None:
        """Why this machine's batch system is this one ('' or None when it is not)."""
        return None

    @classmethod
    def other_submit_commands(cls) -> list[str]:
        """The submit commands of every other scheduler, in the order they are detected."""
        found: list[str] = []
        for other in defined_schedulers():
            if other is not cls and other.submit_command and other.submit_command not in found:
                found.append(other.submit_command)
        return found


def defined_schedulers() -> list[type[Detection]]:
    """Every scheduler class defined so far, in the order they are detected (every
    :class:`~.base.Scheduler` is a :class:`Detection`: the base includes every part)."""
    return sorted(registered(Detection), key=lambda c: (c.detect_order, c.name))
