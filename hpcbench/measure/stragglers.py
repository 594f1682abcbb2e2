"""Stragglers: a rank whose compute time per step (the time before the collective, from its
telemetry records) stays more than :data:`THRESHOLD` times the median of the other ranks' for at
least :data:`SUSTAIN_STEPS` steps and two records. The collective makes every rank's step as long
as the slowest one's; the time *before* it shows which rank the others wait for.

:class:`StragglerWatch` names one live (rank 0's log, ``hpcbench watch``) from each rank's latest
record; :func:`analyse` reads a finished run's records for the report: each rank's compute times,
the slowest rank and its host, how much the others waited for it, and the stragglers the live
rule named, replayed over the records in time order (:class:`Stragglers`, each named rank a
:class:`Straggler`).

The threshold is calibrated on a 2-core machine running 4 DDP ranks of the small CNN
(oversubscribed, the noisiest case): without a slowed rank no rank stayed above 1.15 times the
others for two records; the drill's rank (50 ms more on a step of about 70 ms) shows 1.5. A rank
once named stays named until it is back under half the margin (1.15), and a difference under
:data:`FLOOR_S` is never a straggler (timer noise on tiny steps).
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
from typing import TypedDict

from hpcbench.measure.telemetry_files import TelemetryRecord

THRESHOLD = 1.3
SUSTAIN_STEPS = 20
MIN_RECORDS = 2
FLOOR_S = 0.002


class Straggler(TypedDict):
    """What the rule said when it named a rank: how much slower, since which step."""

    rank: int
    host: str | None
    ratio: float
    since_step: int
    compute_s: float
    median_s: float


class RankCompute(TypedDict):
    """One rank's compute seconds per step, one per record, and their mean."""

    host: str | None
    steps: int
    compute_s: list[float]
    mean_compute_s: float


class Slowest(TypedDict):
    rank: int
    host: str | None
    ratio: float | None


class Stragglers(TypedDict):
    """The report's straggler section of a run (:func:`analyse`)."""

    threshold: float
    sustain_steps: int
    ranks: dict[int, RankCompute]
    slowest: Slowest
    others_waited_s: float
    named: dict[int, Straggler]


@dataclass
class _Run:
    since_step: int  # the first step of the first slow record
    records: int = 0
    named: bool = False


@dataclass
class StragglerWatch:
    """Feed it each rank's latest record (:meth:`update`); it says when a rank becomes a
    straggler and when it stops being one."""

    threshold: float = THRESHOLD
    sustain_steps: int = SUSTAIN_STEPS
    runs: dict[int, _Run] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)  # rank -> step of its last record used
    named: dict[int, Straggler] = field(default_factory=dict)  # rank -> what was said

    def update(self, latest: dict[int, TelemetryRecord]) -> list[str]:
        """The lines to print for these records (none when nothing changed)."""
        compute = {r: rec["compute_s"] for r, rec in latest.items() if _usable(rec)}
        if len(compute) < 2:
            return []
        ordered = sorted(compute.values())
        lines = []
        for rank, rec in latest.items():
            if rank not in compute or self.seen.get(rank) == rec["step"]:
                continue
            self.seen[rank] = rec["step"]
            others = median_without(ordered, compute[rank])
            line = self._judge(rank, rec, compute[rank], others)
            if line:
                lines.append(line)
        return lines

    def _judge(self, rank: int, rec: TelemetryRecord, mine: float, others: float) -> str | None:
        run = self.runs.get(rank)
        # once named, a rank stays so until it is back under half the margin (no flapping)
        bar = 1 + (self.threshold - 1) / 2 if run is not None and run.named else self.threshold
        slow = mine > others * bar and mine - others > FLOOR_S
        if not slow:
            self.runs.pop(rank, None)
            if run is not None and run.named:
                self.named.pop(rank, None)
                return f"rank {rank} ({rec.get('host')}) is no longer a straggler at step {rec['step']}"
            return None
        if run is None:
            run = self.runs[rank] = _Run(since_step=rec["step"] - rec["steps"])
        run.records += 1
        due = run.records >= MIN_RECORDS and rec["step"] - run.since_step >= self.sustain_steps
        if run.named or not due:
            return None
        run.named = True
        ratio = mine / others if others > 0 else float("inf")
        self.named[rank] = {
            "rank": rank,
            "host": rec.get("host"),
            "ratio": ratio,
            "since_step": run.since_step,
            "compute_s": mine,
            "median_s": others,
        }
        return (
            f"straggler: rank {rank} on {rec.get('host')} is {ratio:.1f}x slower than the other "
            f"ranks (compute {mine * 1000:.1f} ms a step, median {others * 1000:.1f} ms) "
            f"since step {run.since_step}"
        )


def median_without(ordered: list[float], value: float) -> float:
    """The median of ``ordered`` (sorted) without one occurrence of ``value`` (in it): the
    other ranks' median for each rank from one sort, not one sort per rank."""
    i = bisect.bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(j: int) -> float:  # the j-th of the others
        return ordered[j] if j < i else ordered[j + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def _usable(rec: TelemetryRecord) -> bool:
    value = rec.get("compute_s")
    return isinstance(value, (int, float)) and value >= 0 and (rec.get("steps") or 0) > 0


def replay(
    records: dict[int, list[TelemetryRecord]], threshold: float = THRESHOLD
) -> dict[int, Straggler]:
    """The stragglers the live rule names over these records, fed in time order (rank ->
    what it said when naming it)."""
    watch = StragglerWatch(threshold=threshold)
    stream = sorted(
        (rec.get("t") or 0, rank, i) for rank, recs in records.items() for i, rec in enumerate(recs)
    )
    latest: dict[int, TelemetryRecord] = {}
    ever: dict[int, Straggler] = {}
    for _, rank, i in stream:
        latest[rank] = records[rank][i]
        watch.update(latest)
        for r, said in watch.named.items():
            ever.setdefault(r, said)
    return ever


def analyse(records: dict[int, list[TelemetryRecord]]) -> Stragglers | None:
    """The report's straggler section for a run's telemetry (None without two ranks' records):
    per rank its compute times per step (one per record) and their mean, its host; the slowest
    rank, its ratio to the median of the others' means, the seconds the others waited for it,
    and the stragglers named (:func:`replay`)."""
    ranks = {}
    for rank, recs in records.items():
        usable = [r for r in recs if _usable(r)]
        steps = sum(r["steps"] for r in usable)
        if not steps:
            continue
        mean = sum(r["compute_s"] * r["steps"] for r in usable) / steps
        ranks[rank] = {
            "host": usable[-1].get("host"),
            "steps": steps,
            "compute_s": [r["compute_s"] for r in usable],
            "mean_compute_s": mean,
        }
    if len(ranks) < 2:
        return None
    slowest = max(ranks, key=lambda r: ranks[r]["mean_compute_s"])
    slow_mean = ranks[slowest]["mean_compute_s"]
    others = statistics.median(v["mean_compute_s"] for r, v in ranks.items() if r != slowest)
    waited = sum(
        max(0.0, slow_mean - v["mean_compute_s"]) * v["steps"]
        for r, v in ranks.items()
        if r != slowest
    )
    return {
        "threshold": THRESHOLD,
        "sustain_steps": SUSTAIN_STEPS,
        "ranks": ranks,
        "slowest": {
            "rank": slowest,
            "host": ranks[slowest]["host"],
            "ratio": slow_mean / others if others > 0 else None,
        },
        "others_waited_s": waited,
        "named": replay(records),
    }
