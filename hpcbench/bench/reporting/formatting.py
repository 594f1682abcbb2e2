"""Numbers as the report writes them: three significant digits, a statistic with its 95 %
interval and count, energies in J, kJ or MJ, times in UTC; ``–`` where there is no value."""

from __future__ import annotations

import math
import time
from typing import Any

from hpcbench.bench.stats import Estimate, Stat, est_ok, stat_ok


def num(x: Any) -> str:
    """A measurement with three significant digits (whole numbers from 1000 up)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        return "–"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}".replace(",", " ")
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1 or ax == 0:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def _ci(d: Stat | Estimate, scale: float = 1.0) -> str:
    """`` [lo, hi]``; nothing when there is no interval (one value: lo = hi)."""
    ci = d.get("ci95")
    if (
        isinstance(ci, (list, tuple))
        and len(ci) == 2
        and all(isinstance(v, (int, float)) for v in ci)
        and ci[0] != ci[1]
    ):
        return f" [{num(ci[0] * scale)}, {num(ci[1] * scale)}]"
    return ""


def fmt_joules(stat: Any) -> str:
    """An energy STAT in J, kJ or MJ, whichever keeps the median below 10 000."""
    if not stat_ok(stat):
        return "–"
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3), ("J", 1.0)):
        if abs(stat["median"]) >= 10 * scale or unit == "J":
            return fmt_stat(stat, unit, 1.0 / scale)
    return "–"


def fmt_stat(stat: Any, unit: str = "", scale: float = 1.0) -> str:
    """``median [lo, hi] unit, n = k`` of a STAT; ``–`` without values."""
    if not stat_ok(stat):
        return "–"
    u = f" {unit}" if unit else ""
    return f"{num(stat['median'] * scale)}{u}{_ci(stat, scale)}, n = {stat['n']}"


def fmt_est(est: Any, unit: str = "", scale: float = 1.0) -> str:
    """``value [lo, hi] unit`` of an EST; ``–`` when undefined."""
    if not est_ok(est):
        return "–"
    u = f" {unit}" if unit else ""
    return f"{num(est['value'] * scale)}{u}{_ci(est, scale)}"


def when(t: Any) -> str:
    """A unix time as a UTC date and time; ``–`` for none."""
    if not isinstance(t, (int, float)):
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
