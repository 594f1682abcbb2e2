"""The report's energy figures: each device's power over an energy run, and the energy (and
energy-delay product) of each configuration with its interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.bench.analysis_types import Analysis, ConfigAnalysis
from hpcbench.bench.reporting.plotting import (
    PALETTE,
    Plot,
    interval,
    label,
    mark_unavailable,
    new_figure,
    save,
    xticks,
)
from hpcbench.bench.reporting.power_traces import PowerTrace
from hpcbench.bench.stats import stat_ok

MAX_POWER_PANELS = 6


def power(traces: Sequence[PowerTrace], analysis: Analysis, out_dir: Path) -> Plot:
    """Power over time per device, one panel per configuration (its first completed energy run),
    phases shaded."""
    title = "Power over time"
    caption = (
        "Watts drawn by each measured device during one energy run per configuration (the first "
        "completed), from the cumulative energy counters differentiated over each sampling "
        "interval; shaded bands are the training, validation and test phases on rank 0. Idle "
        "draw is included."
    )
    traces = [t for t in traces if t.series]
    if not traces:
        return Plot("power", title, caption, missing=_no_energy(analysis, "power"))
    shown = traces[:MAX_POWER_PANELS]
    if len(traces) > len(shown):
        caption += f" The first {len(shown)} of {len(traces)} configurations are shown."
    fig = new_figure(10.0, 2.6 * len(shown) + 0.6)
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    shade = {"setup": "#bdbdbd", "train": "#56b4e9", "val": "#e69f00", "test": "#009e73"}
    for ax, trace in zip(axes, shown, strict=True):
        seen: set[str] = set()
        for phase, start, end in trace.phases:
            name = {"val": "validation", "setup": "set-up"}.get(phase, phase)
            ax.axvspan(
                start,
                end,
                color=shade.get(phase, "#dddddd"),
                alpha=0.18,
                lw=0,
                label=None if name in seen else label(name),
            )
            seen.add(name)
        for i, (dev, times, watts) in enumerate(trace.series):
            ax.plot(times, watts, color=PALETTE[i % len(PALETTE)], lw=1.4, label=label(dev))
        ax.set_ylabel("power (W)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{label(trace.config)}  ({label(trace.run)})", loc="left")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    axes[-1].set_xlabel("time since the first sample (s)")
    path, png = save(fig, out_dir, "power")
    return Plot("power", title, caption, path, png)


def energy(analysis: Analysis, out_dir: Path) -> Plot:
    """Energy per run (measured devices, and with the idle draw of the unused ones) and the
    energy-delay product relative to the baseline."""
    title = "Energy and energy-delay product"
    caption = (
        "Left: median energy of one energy run on the devices it computed on (used), and on "
        "every sampled device of its nodes, the allocated ones it left idle included (with "
        "idle); whiskers are 95 % bootstrap intervals. Right: energy-delay product (energy × "
        "time, lower is better) relative to the one-device baseline; below 1 beats the baseline "
        "on the energy/speed trade-off. Configurations without a measurement are marked n/a."
    )
    configs = analysis.get("configs", [])
    have = [c for c in configs if (c.get("energy") or {}).get("available")]
    if not have or not any(stat_ok(c["energy"].get("used_j")) for c in have):
        return Plot("energy", title, caption, missing=_no_energy(analysis, "energy"))
    names = [c["name"] for c in configs]
    values = [
        float(s["median"]) for c in have for s in (c["energy"].get("used_j"),) if stat_ok(s)
    ] + [float(s["median"]) for c in have for s in (c["energy"].get("with_idle_j"),) if stat_ok(s)]
    scale, unit = (1e-3, "kJ") if max(values) >= 1e4 else (1.0, "J")
    fig = new_figure(max(10.0, 2.0 + 1.6 * len(names)), 4.5)
    ax, ax2 = fig.subplots(1, 2)
    _energy_axes(ax, configs, scale, unit)
    _edp_axes(ax2, configs)
    path, png = save(fig, out_dir, "energy")
    return Plot("energy", title, caption, path, png)


def _energy_axes(ax: Any, configs: list[ConfigAnalysis], scale: float, unit: str) -> None:
    """Energy per run: used devices and with the idle ones, with their intervals."""
    names = [c["name"] for c in configs]
    x = list(range(len(names)))
    for offset, key, name, colour in (
        (-0.2, "used_j", "used devices", "#0072b2"),
        (0.2, "with_idle_j", "with idle devices", "#e69f00"),
    ):
        vals, below, above = [], [], []
        for c in configs:
            s = (
                (c.get("energy") or {}).get(key)
                if (c.get("energy") or {}).get("available")
                else None
            )
            v = float(s["median"]) * scale if stat_ok(s) else 0.0
            lo, hi = interval(s, v, scale) if stat_ok(s) else (0.0, 0.0)
            vals.append(v)
            below.append(lo)
            above.append(hi)
        if any(vals):
            ax.bar(
                [i + offset for i in x],
                vals,
                width=0.4,
                color=colour,
                yerr=[below, above],
                capsize=3,
                label=name,
            )
    mark_unavailable(ax, configs, "available")
    xticks(ax, names)
    ax.set_ylabel(f"energy per run ({unit})")
    ax.set_xlabel("configuration")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
    ax.legend(loc="upper center", ncol=2)
    ax.set_title("Energy")


def _edp_axes(ax2: Any, configs: list[ConfigAnalysis]) -> None:
    """EDP per configuration, relative to the baseline where it is known."""
    names = [c["name"] for c in configs]
    x = list(range(len(names)))
    norm = any(isinstance((c.get("energy") or {}).get("edp_norm"), (int, float)) for c in configs)
    keys = (
        (("edp_norm", "used devices", "#0072b2"), ("edp_with_idle_norm", "with idle", "#e69f00"))
        if norm
        else (("edp", "used devices", "#0072b2"),)
    )
    for offset, (key, name, colour) in zip((-0.2, 0.2) if norm else (0.0,), keys, strict=True):
        vals = []
        for c in configs:
            v = (c.get("energy") or {}).get(key)
            vals.append(float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0)
        if any(vals):
            ax2.bar(
                [i + offset for i in x], vals, width=0.4 if norm else 0.6, color=colour, label=name
            )
    if norm:
        ax2.axhline(1.0, ls="--", color="grey", label="baseline = 1")
        ax2.set_ylabel("EDP relative to the baseline")
    else:
        ax2.set_ylabel("EDP (J·s)")
    mark_unavailable(ax2, configs, "available")
    xticks(ax2, names)
    ax2.set_xlabel("configuration")
    ax2.set_ylim(0, ax2.get_ylim()[1] * 1.25)
    ax2.legend(loc="upper center", ncol=3)
    ax2.set_title("Energy-delay product")


def _no_energy(analysis: Analysis, what: str) -> str:
    reasons, partial = [], []
    for c in analysis.get("configs", []):
        e = c.get("energy") or {}
        if e.get("partial"):
            partial.append(str(c["name"]))
        elif not e.get("available"):
            reasons.append(f"{c['name']}: {e.get('reason') or 'no energy run completed'}")
    if partial:
        reasons.append(
            f"{', '.join(partial)}: only some kinds of device were read (the summary says "
            "which); their figures are in the table per kind of device"
        )
    detail = "; ".join(reasons) if reasons else "no energy samples were recorded"
    return f"No {what} figure: the energy over all devices was not measured ({detail})."
