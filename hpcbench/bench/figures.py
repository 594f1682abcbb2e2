"""The report's figures, drawn with matplotlib (Agg, no pyplot state) from the analysis dict of
:func:`hpcbench.bench.analysis.analyse` and the power traces of the energy runs.

Each figure is a PNG written to a temporary name and renamed, and kept in memory for the HTML
page. A figure whose data are missing is not drawn: :class:`Plot` then carries one sentence saying
why (taken from the analysis where it gives one), which the report prints in its place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.bench.analysis import Analysis
from hpcbench.bench.energy import PowerTrace
from hpcbench.bench.plotting import (
    PALETTE,
    RC,
    Plot,
    accuracy_range,
    colour_of,
    errors,
    interval,
    label,
    mark_unavailable,
    new_figure,
    save,
    xticks,
)
from hpcbench.bench.stats import est_ok, stat_ok

PHASES = ("setup", "train", "val", "test")
PHASE_COLOURS = {"setup": "#9e9e9e", "train": "#0072b2", "val": "#e69f00", "test": "#009e73"}
MAX_POWER_PANELS = 6


def _configs_with_runs(analysis: Analysis) -> list[dict[str, Any]]:
    return [c for c in analysis.get("configs", []) if stat_ok(c.get("time", {}).get("total"))]


# ---------------------------------------------------------------------------------------------
# The figures


def phase_times(
    analysis: Analysis, out_dir: Path, total: Sequence[str] = ("train", "val", "test")
) -> Plot:
    """Stacked bars of the median seconds per phase per configuration (the phases of the total
    first, then those outside it, hatched), with the total's median and 95 % interval."""
    title = "Time per phase"
    inside = [p for p in PHASES if p in total]
    outside = [p for p in PHASES if p not in total]
    words = {"setup": "set-up", "train": "training", "val": "validation", "test": "test"}
    caption = (
        "Each bar stacks the median seconds per run of "
        + ", ".join(words[p] for p in inside)
        + (
            f" (the total time), with {' and '.join(words[p] for p in outside)} on top, hatched, "
            "outside the total"
            if outside
            else ""
        )
        + "; the black point and whisker are the median total time and its 95 % bootstrap "
        "interval. Shorter is better."
    )
    configs = _configs_with_runs(analysis)
    if not configs:
        return Plot("phase_times", title, caption, missing=_no_runs(analysis))
    names = [c["name"] for c in configs]
    fig = new_figure(max(6.5, 1.5 + 1.1 * len(names)), 4.5)
    ax = fig.add_subplot()
    bottom = [0.0] * len(names)
    for phase in inside + outside:
        heights = []
        for c in configs:
            s = c["time"].get(phase)
            heights.append(float(s["median"]) if stat_ok(s) else 0.0)
        if not any(heights):
            continue
        out = phase in outside
        ax.bar(
            range(len(names)),
            heights,
            bottom=bottom,
            width=0.6,
            color="white" if out else PHASE_COLOURS[phase],
            edgecolor=PHASE_COLOURS[phase],
            hatch="///" if out else None,
            label=words[phase] + (" (not in total)" if out else ""),
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    totals = [float(c["time"]["total"]["median"]) for c in configs]
    ax.errorbar(
        range(len(names)),
        totals,
        yerr=errors([(c["time"]["total"], t) for c, t in zip(configs, totals, strict=True)]),
        fmt="o",
        color="black",
        markersize=4,
        capsize=4,
        label="total (median, 95 % CI)",
    )
    xticks(ax, names)
    ax.set_xlabel("configuration")
    ax.set_ylabel("time per run (s)")
    ax.set_ylim(0, max(bottom) * 1.08)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(title)
    path, png = save(fig, out_dir, "phase_times")
    return Plot("phase_times", title, caption, path, png)


def scaling(analysis: Analysis, out_dir: Path) -> Plot:
    """Speedup against the one-device baseline over the device count, with the ideal line, and
    the parallel efficiency (whole run and train loop) per configuration. Only configurations on
    the baseline's kind of device: a speedup of GPUs over a CPU says nothing about scaling."""
    title = "Speedup and efficiency"
    base = (analysis.get("baselines") or {}).get("one_device")
    all_configs = analysis.get("configs", [])
    configs, left_out = _comparable(all_configs, base)
    caption = (
        f"Left: speedup of the median total time over the one-device baseline "
        f"({base or 'none'}) against the number of devices p; the dashed line is ideal linear "
        "speedup (p times faster); filled circles are the whole run, hollow squares the train "
        "loop alone. Right: parallel efficiency = speedup ÷ p; 100 % is ideal. Whiskers: 95 % "
        "bootstrap intervals."
    )
    if left_out:
        caption += (
            f" Left out, as they run on another kind of device than {base}: "
            + ", ".join(left_out)
            + " (their speedups are in the scaling table)."
        )
    if not configs:
        if not base:
            why = (
                "No speedup figure: the matrix names no one-device baseline "
                "(baseline_one_device), so speedup and efficiency are not defined."
            )
        else:
            why = (
                f"No speedup figure: the one-device baseline {base} has no completed run to "
                "compare with."
            )
        return Plot("scaling", title, caption, missing=why)
    configs.sort(key=lambda c: (c.get("devices") or 0, c["name"]))
    fig = new_figure(11.0, 4.8)
    ax, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.2])
    ps = [float(c.get("devices") or 1) for c in configs]
    pmax = max(max(ps), 2.0)
    _speedup_axes(ax, configs, ps, pmax, analysis, base)
    _efficiency_axes(ax2, configs)
    path, png = save(fig, out_dir, "scaling")
    return Plot("scaling", title, caption, path, png)


def _comparable(
    all_configs: list[dict[str, Any]], base: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The configurations with a speedup on the baseline's kind of device, and the names of
    those with a speedup on another kind (left out of the figure)."""
    base_device = next((c.get("device") for c in all_configs if c.get("name") == base), None)
    configs = [
        c
        for c in all_configs
        if est_ok(c.get("speedup_vs_one_device"))
        and (base_device is None or c.get("device") in (None, base_device))
    ]
    left_out = [
        c["name"]
        for c in all_configs
        if est_ok(c.get("speedup_vs_one_device")) and c not in configs
    ]
    return configs, left_out


def _speedup_axes(
    ax: Any,
    configs: list[dict[str, Any]],
    ps: list[float],
    pmax: float,
    analysis: Analysis,
    base: str | None,
) -> None:
    """Speedup over p: whole run (filled circles) and train loop (hollow squares), the ideal."""
    from matplotlib.lines import Line2D

    ax.plot([1.0, pmax], [1.0, pmax], "--", color="grey", label="ideal (speedup = p)")
    # configurations with the same p side by side, not on top of each other
    dodge: dict[float, int] = {}
    for i, c in enumerate(configs):
        colour = colour_of(analysis, c["name"])
        p = ps[i]
        same = sum(1 for q in ps if q == p)
        k = dodge.get(p, 0)
        dodge[p] = k + 1
        width = 0.04 * pmax
        x = p + (k - (same - 1) / 2) * 2.2 * width
        s = c["speedup_vs_one_device"]
        v = float(s["value"])
        ax.errorbar(
            [x - width / 2],
            [v],
            yerr=errors([(s, v)]),
            fmt="o",
            color=colour,
            capsize=4,
            label=label(c["name"]),
        )
        t = c.get("speedup_train_vs_one_device")
        if est_ok(t):
            tv = float(t["value"])
            ax.errorbar(
                [x + width / 2],
                [tv],
                yerr=errors([(t, tv)]),
                fmt="s",
                mfc="white",
                color=colour,
                capsize=3,
            )
    handles, labels = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], marker="o", ls="", color="black"),
        Line2D([], [], marker="s", ls="", mfc="white", color="black"),
    ]
    labels += ["whole run", "train loop"]
    ax.legend(handles, labels, loc="upper left")
    ax.set_xlabel("devices p")
    ax.set_ylabel(f"speedup over {label(base)} (×)")
    ax.set_xlim(0.5, pmax * 1.1 + 0.2)
    ax.set_ylim(0, pmax * 1.1)
    if pmax <= 16:
        ax.set_xticks(sorted({1, *(int(p) for p in ps)}))
    ax.set_title("Speedup")


def _efficiency_axes(ax2: Any, configs: list[dict[str, Any]]) -> None:
    """Parallel efficiency per configuration, whole run and train loop, against 100 %."""
    x = list(range(len(configs)))
    for offset, key, name, hatch in (
        (-0.2, "efficiency", "whole run", ""),
        (0.2, "efficiency_train", "train loop", "//"),
    ):
        vals, below, above = [], [], []
        for c in configs:
            e = c.get(key)
            v = float(e["value"]) * 100 if est_ok(e) else 0.0
            lo, hi = interval(e, v, 100.0) if est_ok(e) else (0.0, 0.0)
            vals.append(v)
            below.append(lo)
            above.append(hi)
        if not any(vals):
            continue
        ax2.bar(
            [i + offset for i in x],
            vals,
            width=0.4,
            color="white" if hatch else "#0072b2",
            edgecolor="#0072b2",
            hatch=hatch or None,
            yerr=[below, above],
            capsize=3,
            label=name,
        )
    ax2.axhline(100, ls="--", color="grey", label="ideal (100 %)")
    xticks(ax2, [f"{c['name']} (p = {c.get('devices')})" for c in configs])
    ax2.set_ylabel("parallel efficiency (%)")
    ax2.set_xlabel("configuration")
    ax2.set_ylim(0, max(130.0, ax2.get_ylim()[1] * 1.1))
    ax2.legend(loc="upper center", ncol=3)
    ax2.set_title("Efficiency")


def accuracy(analysis: Analysis, out_dir: Path) -> Plot:
    """The median validation accuracy per epoch, one line per configuration."""
    title = "Validation accuracy per epoch"
    caption = (
        "The median over a configuration's runs of the validation accuracy after each epoch. "
        "Configurations that train the same model on the same data with the same global batch "
        "should follow the same curve; a curve that departs shows the parallel strategy changed "
        "what is learnt, not only how fast."
    )
    rows = []
    for c in analysis.get("configs", []):
        pts = [
            (int(e), float(a))
            for e, a in ((c.get("accuracy") or {}).get("per_epoch") or [])
            if isinstance(a, (int, float)) and math.isfinite(a)
        ]
        if pts:
            rows.append((c["name"], pts))
    if not rows:
        return Plot(
            "accuracy",
            title,
            caption,
            missing=(
                "No accuracy figure: no completed run recorded a validation accuracy "
                "(no run completed, or validation was switched off with --val-every)."
            ),
        )
    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot()
    markers = "osD^v<>P"
    for i, (name, pts) in enumerate(rows):
        ax.plot(
            [e for e, _ in pts],
            [a * 100 for _, a in pts],
            marker=markers[i % len(markers)],
            color=colour_of(analysis, name),
            label=label(name),
            markersize=5,
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_ylim(*accuracy_range([a * 100 for _, pts in rows for _, a in pts]))
    epochs = sorted({e for _, pts in rows for e, _ in pts})
    if len(epochs) <= 20:
        ax.set_xticks(epochs)
    ax.legend(loc="lower right")
    ax.set_title(title)
    path, png = save(fig, out_dir, "accuracy")
    return Plot("accuracy", title, caption, path, png)


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


def _energy_axes(ax: Any, configs: list[dict[str, Any]], scale: float, unit: str) -> None:
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


def _edp_axes(ax2: Any, configs: list[dict[str, Any]]) -> None:
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


def _no_runs(analysis: Analysis) -> str:
    n = sum((c.get("runs") or {}).get("failed", 0) for c in analysis.get("configs", []))
    return "No time figure: no run completed" + (
        f" ({n} failed; see Failed runs)." if n else " yet."
    )


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


def render_all(
    analysis: Analysis,
    traces: Sequence[PowerTrace],
    out_dir: Path,
    total: Sequence[str] = ("train", "val", "test"),
) -> list[Plot]:
    """Every figure of the report, in the report's order, written into ``out_dir``; ``total``:
    the phases a run's total time sums."""
    from matplotlib import rc_context

    with rc_context(RC):
        plots = [
            phase_times(analysis, out_dir, total),
            scaling(analysis, out_dir),
            accuracy(analysis, out_dir),
        ]
        if analysis.get("energy_asked", True):  # else no figure, and no note saying so either
            plots += [power(traces, analysis, out_dir), energy(analysis, out_dir)]
        return plots
