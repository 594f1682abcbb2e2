"""The power of energy runs over time, for the report's power figure: each device's watts
from its cumulative joules, and each configuration's first completed energy run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hpcbench.bench.reading.results_reader import (
    Results,
)


@dataclass
class PowerTrace:
    """The power of one energy run: per device (``label``: host and device), watts over seconds
    since the run's first sample; ``phases``: (phase, start s, end s) on the same clock."""

    config: str
    run: str
    series: list[tuple[str, list[float], list[float]]] = field(default_factory=list)
    phases: list[tuple[str, float, float]] = field(default_factory=list)


def watts_from_samples(samples: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Cumulative joules ``[[unix s, J], ...]`` to power: the mean watts of each interval, placed
    at the interval's midpoint, in seconds since the first sample. Intervals of zero length are
    skipped (two readings in the same clock tick)."""
    times, watts = [], []
    pts = [(float(t), float(j)) for t, j in samples]
    if len(pts) < 2:
        return times, watts
    t0 = pts[0][0]
    for (ta, ja), (tb, jb) in zip(pts, pts[1:], strict=False):
        if tb <= ta:
            continue
        times.append((ta + tb) / 2 - t0)
        watts.append((jb - ja) / (tb - ta))
    return times, watts


def power_traces(results: Results) -> list[PowerTrace]:
    """Per configuration, the power trace of its first completed energy run."""
    traces: list[PowerTrace] = []
    done: set[str] = set()
    for run in sorted(results.runs, key=lambda r: (r.config, r.rep)):
        name = run.config
        if run.kind != "energy" or run.status != "completed" or name in done:
            continue
        energy = run.energy
        if not isinstance(energy, dict):
            continue
        trace = PowerTrace(name, f"energy run {run.rep}")
        t0 = None
        for node in energy.get("nodes") or []:
            for dev in node.get("devices") or []:
                samples = dev.get("samples") or []
                if dev.get("method") == "unavailable" or len(samples) < 2:
                    continue
                first = float(samples[0][0])
                t0 = first if t0 is None else min(t0, first)
        if t0 is None:
            continue
        for node in energy.get("nodes") or []:
            for dev in node.get("devices") or []:
                samples = dev.get("samples") or []
                if dev.get("method") == "unavailable" or len(samples) < 2:
                    continue
                times, watts = watts_from_samples(samples)
                shift = float(samples[0][0]) - t0
                used = "" if dev.get("used", True) else ", unused"
                trace.series.append(
                    (
                        f"{node.get('host')}:{dev.get('name')} ({dev.get('method')}{used})",
                        [t + shift for t in times],
                        watts,
                    )
                )
        for w in (run.metrics or {}).get("phase_windows") or []:
            try:
                trace.phases.append((str(w["phase"]), w["start"] - t0, w["end"] - t0))
            except (KeyError, TypeError):
                continue
        traces.append(trace)
        done.add(name)
    return traces
