"""The report's figures, drawn with matplotlib (Agg, no pyplot state) from the analysis dict of
:func:`hpcbench.bench.analysing.analysis.analyse` and the power traces of the energy runs.

Each figure is a PNG written to a temporary name and renamed, and kept in memory for the HTML
page. A figure whose data are missing is not drawn: :class:`Plot` then carries one sentence saying
why (taken from the analysis where it gives one), which the report prints in its place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.bench.analysis_types import Analysis, ConfigAnalysis
from hpcbench.bench.reporting.figures_energy import energy, power
from hpcbench.bench.reporting.plotting import (
    RC,
    Plot,
    accuracy_range,
    colour_of,
    errors,
    interval,
    label,
    new_figure,
    no_runs,
    save,
    style_of,
    xticks,
)
from hpcbench.bench.reporting.power_traces import PowerTrace
from hpcbench.bench.stats import est_ok, stat_ok

PHASES = ("setup", "train", "val", "test")
PHASE_COLOURS = {"setup": "#9e9e9e", "train": "#0072b2", "val": "#e69f00", "test": "#009e73"}


def _configs_with_runs(analysis: Analysis) -> list[ConfigAnalysis]:
    return [c for c in analysis.get("configs", []) if stat_ok(c.get("time", {}).get("total"))]


# ---------------------------------------------------------------------------------------------
# The figures


PHASE_WORDS = {"setup": "set-up", "train": "training", "val": "validation", "test": "test"}


def _phase_caption(inside: list[str], outside: list[str]) -> str:
    """What the time-per-phase figure shows: the phases of the total, then those outside it."""
    return (
        "Each bar stacks the median seconds per run of "
        + ", ".join(PHASE_WORDS[p] for p in inside)
        + (
            f" (the total time), with {' and '.join(PHASE_WORDS[p] for p in outside)} on top, "
            "hatched, outside the total"
            if outside
            else ""
        )
        + "; the black point and whisker are the median total time and its 95 % bootstrap "
        "interval. Shorter is better."
    )


def phase_times(
    analysis: Analysis, out_dir: Path, total: Sequence[str] = ("train", "val", "test")
) -> Plot:
    """Stacked bars of the median seconds per phase per configuration (the phases of the total
    first, then those outside it, hatched), with the total's median and 95 % interval."""
    title = "Time per phase"
    inside = [p for p in PHASES if p in total]
    outside = [p for p in PHASES if p not in total]
    words = PHASE_WORDS
    caption = _phase_caption(inside, outside)
    configs = _configs_with_runs(analysis)
    if not configs:
        return Plot("phase_times", title, caption, missing=no_runs(analysis))
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
    all_configs: list[ConfigAnalysis], base: str | None
) -> tuple[list[ConfigAnalysis], list[str]]:
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
    configs: list[ConfigAnalysis],
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


def _efficiency_axes(ax2: Any, configs: list[ConfigAnalysis]) -> None:
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
    for name, pts in rows:  # each its own line style and hollow marker: none hides another
        ax.plot(
            [e for e, _ in pts],
            [a * 100 for _, a in pts],
            label=label(name),
            **style_of(analysis, name),
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
