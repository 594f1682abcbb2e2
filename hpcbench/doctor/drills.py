"""The doctor's drills: a fault made on purpose, so that each finding is proved on CPUs.

``HPCBENCH_DOCTOR_DRILL`` holds one or more, separated by commas:

- ``slow-compute:NODE``: the ranks of node NODE (its index in the job) pause after every matrix
  multiply for nine times its time, a tenth of the node's throughput (named even where a busy
  machine's cores are several times unequal);
- ``slow-link:NODE``: after every collective that crosses nodes, the ranks of node NODE wait
  nine times what it took them, so that their peers see a link a tenth as fast (the bandwidth a
  fallback from InfiniBand to sockets loses, at every message size);
- ``absent:RANK@STEP``: rank RANK never arrives at step STEP (it sleeps, then fails).

A placement that overlaps needs no drill: ask for one (``launcher.placement = "0;0"``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

DRILL_VARIABLE = "HPCBENCH_DOCTOR_DRILL"
LINK_SLOWDOWN = 10  # a drilled link this many times slower


class DrillError(ValueError):
    """A drill that is not one: one line naming it."""


@dataclass(frozen=True)
class Drills:
    slow_compute: frozenset[int] = frozenset()
    slow_link: frozenset[int] = frozenset()
    absent: dict[str, frozenset[int]] = field(default_factory=dict)

    def compute_pause(self, node: int, seconds: float) -> None:
        if node in self.slow_compute:
            time.sleep(9 * seconds)

    def link_pause(self, node: int, crosses_nodes: bool, took: float) -> None:
        """After a collective that took ``took`` seconds here: a drilled link's extra time."""
        if crosses_nodes and node in self.slow_link:
            time.sleep((LINK_SLOWDOWN - 1) * took)

    def stays_away(self, step: str, rank: int, timeout: float) -> None:
        """A rank drilled to miss ``step``: it sleeps past the step's timeout, then fails."""
        if rank in self.absent.get(step, frozenset()):
            time.sleep(timeout * 3 + 5)
            raise SystemExit(1)


def read_drills(value: str | None = None) -> Drills:
    value = os.environ.get(DRILL_VARIABLE, "") if value is None else value
    slow_compute: set[int] = set()
    slow_link: set[int] = set()
    absent: dict[str, set[int]] = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        kind, _, where = entry.partition(":")
        target, _, step = where.partition("@")
        if not target.isdigit() or kind not in ("slow-compute", "slow-link", "absent"):
            raise DrillError(
                f"{DRILL_VARIABLE}: {entry!r} is not a drill (slow-compute:NODE, "
                "slow-link:NODE, absent:RANK@STEP)"
            )
        if kind == "absent":
            absent.setdefault(step or "communication", set()).add(int(target))
        else:
            (slow_compute if kind == "slow-compute" else slow_link).add(int(target))
    return Drills(
        frozenset(slow_compute),
        frozenset(slow_link),
        {k: frozenset(v) for k, v in absent.items()},
    )
