"""The statistics of a benchmark report, pure numpy: summaries of repetitions (median, olympic
mean, mean, percentile-bootstrap interval), bootstrapped ratios of medians, parallel efficiency
and the Karp–Flatt serial fraction. Every bootstrap uses a fixed seed, so a report read twice
from the same results gives the same numbers.

The two shapes of the report's figures are typed here, beside their one writer: :class:`Stat`
(a summary of repetitions, "STAT") and :class:`Estimate` (a value with its interval, "EST").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np

RESAMPLES = 2000  # bootstrap resamples
SEED = 20210701  # fixed: the same results always give the same intervals
LEVEL = 0.95  # two-sided, percentile bootstrap


class Stat(TypedDict):
    """A STAT (:func:`summarise`): a summary of repetitions with the bootstrap interval of the
    median."""

    n: int
    median: float
    olympic_mean: float
    mean: float
    ci95: list[float]
    values: list[float]


class Estimate(TypedDict):
    """An EST: a value (a ratio of medians, an efficiency, a serial fraction) and its 95 %
    interval (None ends where undefined)."""

    value: float | None
    ci95: list[float | None]


def olympic_mean(values: Sequence[float]) -> float:
    """The mean without the fastest and the slowest value (one of each), as MLPerf scores its
    repetitions; the plain mean of fewer than 3 values."""
    if not values:
        raise ValueError("olympic_mean of no values")
    ordered = sorted(float(v) for v in values)
    if len(ordered) >= 3:
        ordered = ordered[1:-1]
    return sum(ordered) / len(ordered)


def _interval(estimates: np.ndarray, level: float) -> list[float]:
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(estimates, [tail, 100.0 - tail])
    return [float(lo), float(hi)]


def _resampled_medians(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(values[idx], axis=1)


def bootstrap_ci(
    values: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> list[float]:
    """Percentile-bootstrap interval of the median: ``resamples`` resamples (with replacement,
    the size of ``values``), the median of each, and the central ``level`` of those medians.
    One value gives ``[v, v]``: a single run says nothing about its spread."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("bootstrap_ci of no values")
    if arr.size == 1:
        return [float(arr[0]), float(arr[0])]
    rng = np.random.default_rng(seed)
    return _interval(_resampled_medians(arr, rng, resamples), level)


def summarise(values: Sequence[float]) -> Stat | None:
    """A STAT: ``n``, ``median``, ``olympic_mean``, ``mean``, ``ci95`` (bootstrap of the median)
    and the ``values`` themselves; None for no values."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    return {
        "n": len(vals),
        "median": float(np.median(vals)),
        "olympic_mean": olympic_mean(vals),
        "mean": sum(vals) / len(vals),
        "ci95": bootstrap_ci(vals),
        "values": vals,
    }


def ratio_of_medians(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> Estimate:
    """An EST: ``median(numerator) / median(denominator)`` with a bootstrap interval, both
    samples resampled independently (they are repetitions of two different configurations).
    A speedup is ``ratio_of_medians(baseline_times, times)``."""
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    if num.size == 0 or den.size == 0:
        raise ValueError("ratio_of_medians needs values on both sides")
    value = float(np.median(num) / np.median(den))
    if num.size == 1 and den.size == 1:
        return {"value": value, "ci95": [value, value]}
    rng = np.random.default_rng(seed)
    ratios = _resampled_medians(num, rng, resamples) / _resampled_medians(den, rng, resamples)
    return {"value": value, "ci95": _interval(ratios, level)}


def scaled(est: Estimate | None, factor: float) -> Estimate | None:
    """An EST multiplied by a positive constant (efficiency = speedup / devices)."""
    if est is None:
        return None
    return {"value": est["value"] * factor, "ci95": [b * factor for b in est["ci95"]]}


def karp_flatt(speedup: float, devices: int) -> float | None:
    """The experimentally determined serial fraction ``e = (1/S - 1/p) / (1 - 1/p)``: 0 for
    linear scaling, growing with the share of the run that does not get faster with more
    devices (serial work, communication, imbalance). None for one device, where it is undefined."""
    if devices <= 1:
        return None
    return (1.0 / speedup - 1.0 / devices) / (1.0 - 1.0 / devices)


def karp_flatt_est(speedup: Estimate | None, devices: int) -> Estimate | None:
    """Karp–Flatt of an EST speedup; ``e`` falls as ``S`` rises, so the interval's ends swap."""
    if speedup is None or devices <= 1:
        return None
    lo, hi = speedup["ci95"]
    return {
        "value": karp_flatt(speedup["value"], devices),
        "ci95": [karp_flatt(hi, devices), karp_flatt(lo, devices)],
    }


MIN_SIGNIFICANT_N = 5  # below, [min, max] is what the bootstrap gives: too often apart by chance


def significantly_different(a: Stat, b: Stat) -> bool:
    """Whether two STATs differ beyond their noise: both have at least
    :data:`MIN_SIGNIFICANT_N` values and their 95 % intervals do not overlap."""
    if min(a["n"], b["n"]) < MIN_SIGNIFICANT_N:
        return False
    return not overlap(a["ci95"], b["ci95"])


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two intervals ``[lo, hi]`` share at least one point."""
    return a[0] <= b[1] and b[0] <= a[1]


def stat_ok(stat: Any) -> bool:
    """A STAT with at least one value and a median."""
    return (
        isinstance(stat, dict)
        and bool(stat.get("n"))
        and isinstance(stat.get("median"), (int, float))
        and math.isfinite(stat["median"])
    )


def est_ok(est: Any) -> bool:
    """An EST with a finite value."""
    return (
        isinstance(est, dict)
        and isinstance(est.get("value"), (int, float))
        and math.isfinite(est["value"])
    )
