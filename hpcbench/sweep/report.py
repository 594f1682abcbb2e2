"""The report of a sweep: accuracy per epoch per setting (grouped by the first axis), time per
setting, the ranking metric along each axis, the ranking table with its spread over repetitions
and the best setting in words; CSV tables beside it. The page is written as the benchmark report
is (:mod:`hpcbench.bench.reporting.document`: Markdown and one self-contained HTML page).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.bench.matrix_program import program_line
from hpcbench.bench.reporting.document import (
    Block,
    Bullets,
    Heading,
    Image,
    Para,
    Table,
    to_html,
    to_markdown,
)
from hpcbench.bench.reporting.plotting import PALETTE, Plot, accuracy_range, label, new_figure, save
from hpcbench.bench.reporting.report import claim_output, require_matplotlib
from hpcbench.csvfile import csv_text
from hpcbench.sweep.analysis import analyse_sweep, best_in_words, fmt
from hpcbench.sweep.documents import Setting, SettingResult, SweepAnalysis, SweepRecord


def _values(setting: Setting, keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={setting.get(k)}" for k in keys) or "the job as it is"


def _panels(analysis: SweepAnalysis) -> list[tuple[str, list[SettingResult]]]:
    """The settings grouped by the first axis's value when there are two axes or more."""
    axes = list(analysis["sweep"]["axes"])
    settings = analysis["settings"]
    if len(axes) < 2:
        return [("", settings)]
    first = axes[0]
    groups: dict[str, list[SettingResult]] = {}
    for s in settings:
        groups.setdefault(f"{first}={s['setting'].get(first)}", []).append(s)
    return list(groups.items())


def accuracy_figure(analysis: SweepAnalysis, out: Path) -> Plot:
    key, title = "accuracy_per_epoch", "Validation accuracy per epoch, per setting"
    caption = "The median over repetitions of each epoch's validation accuracy; one curve each."
    panels = _panels(analysis)
    if not any(e["val_accuracy"] is not None for s in analysis["settings"] for e in s["epochs"]):
        return Plot(key, title, caption, missing="No task completed an epoch with validation.")
    axes = list(analysis["sweep"]["axes"])
    rest = axes[1:] if len(axes) > 1 else axes
    fig = new_figure(min(5.0 * len(panels), 15.0), 3.8)
    grid = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, (name, settings) in zip(grid, panels, strict=True):
        for i, s in enumerate(settings):
            points = [(e["epoch"], 100 * e["val_accuracy"]) for e in s["epochs"]
                      if e["val_accuracy"] is not None]  # fmt: skip
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", color=PALETTE[i % len(PALETTE)],
                        label=label(_values(s["setting"], rest)))  # fmt: skip
        ax.set_title(label(name or "all settings"))
        ax.set_xlabel("epoch")
        ax.legend(fontsize=7)
    shown = [100 * e["val_accuracy"] for s in analysis["settings"] for e in s["epochs"]
             if e["val_accuracy"] is not None]  # fmt: skip
    grid[0].set_ylim(*accuracy_range(shown))
    grid[0].set_ylabel("validation accuracy (%)")
    epochs = sorted({e["epoch"] for s in analysis["settings"] for e in s["epochs"]})
    for ax in grid:
        epoch_axis(ax, epochs)
    path, png = save(fig, out, key)
    return Plot(key, title, caption, path, png)


def epoch_axis(ax: Any, epochs: list[int]) -> None:
    """Whole epochs on the x axis, each one ticked where there are few, and a margin of half an
    epoch (a one-epoch sweep drew 0.96 to 1.04 otherwise)."""
    ax.xaxis.get_major_locator().set_params(integer=True)
    if epochs:
        ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
        if len(epochs) <= 12:
            ax.set_xticks(epochs)


def time_figure(analysis: SweepAnalysis, out: Path) -> Plot:
    key, title = "time_per_setting", "Time to result per setting"
    caption = (
        "Median set-up, training, validation and test seconds over repetitions, with the 95 % "
        "bootstrap interval of the median where there are several."
    )
    rows = [s for s in analysis["settings"] if s["total_s"]]
    if not rows:
        return Plot(key, title, caption, missing="No task completed: no times to show.")
    fig = new_figure(7.0, max(2.0, 0.35 * len(rows) + 1.0))
    ax = fig.subplots()
    medians = [s["total_s"]["median"] for s in rows]
    below = [max(0.0, m - s["total_s"]["ci95"][0]) for m, s in zip(medians, rows, strict=True)]
    above = [max(0.0, s["total_s"]["ci95"][1] - m) for m, s in zip(medians, rows, strict=True)]
    ax.barh(range(len(rows)), medians, xerr=[below, above], color=PALETTE[0])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label(s["name"]) for s in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    path, png = save(fig, out, key)
    return Plot(key, title, caption, path, png)


def metric_figure(analysis: SweepAnalysis, out: Path) -> Plot:
    m = analysis["metric"]
    key, title = "metric_by_axis", f"{m['words'].capitalize()} along each axis"
    caption = (
        "The median over repetitions for each value of an axis; one line per value of the "
        "next axis (the first axis for the last), as the reference study drew accuracy against "
        "batch size per resolution."
    )
    axes = list(analysis["sweep"]["axes"])
    done = [s for s in analysis["settings"] if s["metric"]]
    if not axes or not done:
        return Plot(key, title, caption, missing="No axis, or no completed task, to draw.")
    scale = 100.0 if m["name"].endswith("accuracy") else 1.0
    fig = new_figure(min(4.5 * len(axes), 15.0), 3.5)
    grid = fig.subplots(1, len(axes), squeeze=False)[0]
    for n, (ax, axis) in enumerate(zip(grid, axes, strict=True)):
        values = [str(v) for v in analysis["sweep"]["axes"][axis]]
        other = axes[(n + 1) % len(axes)] if len(axes) > 1 else None
        lines: dict[str, dict[str, list[float]]] = {}
        for s in done:
            line = f"{other}={s['setting'].get(other)}" if other else "all"
            cell = lines.setdefault(line, {})
            value = str(s["setting"].get(axis))
            cell.setdefault(value, []).append(s["metric"]["median"] * scale)
        for i, (line, cell) in enumerate(lines.items()):
            xs = [j for j, v in enumerate(values) if v in cell]
            ys = [sum(cell[values[j]]) / len(cell[values[j]]) for j in xs]
            ax.plot(xs, ys, marker="o", color=PALETTE[i % len(PALETTE)], label=label(line))
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([label(v) for v in values], rotation=30 if len(values) > 4 else 0,
                           fontsize=7)  # fmt: skip
        ax.set_xlabel(label(axis))
        if other:
            ax.legend(fontsize=7)
    if scale == 100.0:
        for ax in grid:
            ax.set_ylim(*accuracy_range([100 * s["metric"]["median"] for s in done]))
    unit = " (%)" if scale == 100.0 else (f" ({m['unit']})" if m["unit"] else "")
    grid[0].set_ylabel(label(m["words"] + unit))
    path, png = save(fig, out, key)
    return Plot(key, title, caption, path, png)


def _csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    """Names and values made inert (:mod:`hpcbench.csvfile`); figures as Python writes them."""
    return write_atomically(path, csv_text(header, rows))


def write_tables(analysis: SweepAnalysis, out: Path) -> list[Path]:
    """``ranking.csv`` (best first), ``tasks.csv`` (every task) and ``epochs.csv`` (each
    setting's median accuracy per epoch)."""
    axes = list(analysis["sweep"]["axes"])
    by_name = {s["name"]: s for s in analysis["settings"]}
    ranked = [by_name[n] for n in analysis["ranking"]]
    unranked = [s for s in analysis["settings"] if s["name"] not in analysis["ranking"]]
    rows = []
    for rank, s in enumerate(ranked + unranked, 1):
        st, t = s["metric"] or {}, s["total_s"] or {}
        ci = st.get("ci95") or [None, None]
        rows.append(
            [rank if s["metric"] else "", s["name"], *(s["setting"].get(a) for a in axes),
             st.get("median"), ci[0], ci[1], st.get("n", 0), s["failed"], t.get("median")]
        )  # fmt: skip
    metric = analysis["metric"]["name"]
    header = ["rank", "setting", *axes, f"{metric}_median", f"{metric}_ci95_low",
              f"{metric}_ci95_high", "runs", "failed", "total_s_median"]  # fmt: skip
    paths = [_csv(out / "ranking.csv", header, rows)]
    paths.append(
        _csv(
            out / "tasks.csv",
            ["task", "run", *axes, "rep", "completed", metric],
            [
                [
                    t["index"],
                    t["run"],
                    *(t["setting"].get(a) for a in axes),
                    t["rep"],
                    t["completed"],
                    t["metric"],
                ]
                for t in analysis["tasks"]
            ],  # fmt: skip
        )
    )
    epoch_rows = [
        [s["name"], e["epoch"], e["val_accuracy"], e["train_accuracy"]]
        for s in analysis["settings"]
        for e in s["epochs"]
    ]
    paths.append(
        _csv(out / "epochs.csv", ["setting", "epoch", "val_accuracy", "train_accuracy"], epoch_rows)
    )
    return paths


def _ranking_table(analysis: SweepAnalysis) -> Table:
    m = analysis["metric"]
    by_name = {s["name"]: s for s in analysis["settings"]}
    axes = list(analysis["sweep"]["axes"])
    rows = []
    for rank, name in enumerate(analysis["ranking"], 1):
        s = by_name[name]
        st, t = s["metric"], s["total_s"] or {}
        spread = f"{fmt(st['ci95'][0], m)} to {fmt(st['ci95'][1], m)}" if st["n"] > 1 else "one run"
        total = f"{t['median']:.1f}" if t.get("median") is not None else "n/a"
        rows.append([str(rank), *(str(s["setting"].get(a)) for a in axes),
                     fmt(st["median"], m), spread, str(st["n"]), total])  # fmt: skip
    header = ["rank", *axes, m["words"], "95 % interval", "runs", "time to result (s)"]
    n = len(axes)
    return Table(header, rows, numeric={0, n + 1, n + 3, n + 4})


def what_ran(sweep: SweepRecord) -> list[str]:
    """The header's lines of what every task ran: the program and its arguments (each
    ``{axis}`` as the sweep gives it), or hpcbench's trainer and its common options; the job
    spec."""
    smoke = " (its smoke form)" if sweep.get("smoke") else ""
    job = f"job spec: {sweep['job']}{smoke}" if sweep.get("job") else (
        f"job spec: none (hpcbench's default job){smoke}"
    )  # fmt: skip
    program = sweep.get("program")
    if program:
        return [f"program: {program_line(program, list(sweep.get('program_args') or []))}", job]
    options = " ".join(str(a) for a in sweep.get("trainer_args") or []) or "none"
    return [
        f"program: hpcbench's trainer ({program_line(None, [])})",
        f"common trainer options: {options}",
        job,
    ]


def build_blocks(analysis: SweepAnalysis, plots: Sequence[Plot], tables: Sequence[Path],
                 out: Path) -> list[Block]:  # fmt: skip
    sweep = analysis["sweep"]
    axes = ", ".join(f"{k} ({len(v)} values)" for k, v in sweep["axes"].items()) or "none"
    blocks: list[Block] = [
        Heading(1, f"Sweep report: {sweep['name']}"),
        Para(best_in_words(analysis)),
        Bullets(
            [
                *what_ran(sweep),
                f"axes: {axes}; combined as {sweep['mode']}; "
                f"{sweep['repetitions']} repetition(s) of each setting",
                f"tasks: {len(analysis['tasks'])}, completed "
                f"{sum(t['completed'] for t in analysis['tasks'])}",
            ]
        ),
        Heading(2, "Ranking"),
        _ranking_table(analysis),
    ]
    missing = [t for t in analysis["tasks"] if not t["completed"]]
    if missing:
        blocks.append(
            Para(
                f"{len(missing)} task(s) have no results (failed, or not run yet): "
                + ", ".join(t["run"] for t in missing[:20])
                + ("…" if len(missing) > 20 else "")
                + ". hpcbench sweep … --retry-failed runs them again.",
                "warn",
            )
        )
    blocks.append(Heading(2, "Figures"))
    for p in plots:
        blocks.append(Heading(3, p.title))
        if p.path is None:
            blocks.append(Para(p.missing, "note"))
        else:
            blocks.append(Image(p.title, p.caption, p.path.relative_to(out).as_posix(), p.png))
    blocks += [
        Heading(2, "Tables"),
        Bullets([t.relative_to(out).as_posix() for t in tables]),
    ]
    return blocks


def build_sweep_report(results: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Analyse a sweep's results directory and write its report into ``out_dir`` (default
    ``RESULTS/report``): ``report.md``, ``report.html``, ``figures/*.png``, ``tables/*.csv``.
    Returns the paths written, ``report.md`` and ``report.html`` first."""
    require_matplotlib()
    directory = Path(results)
    out = Path(out_dir) if out_dir is not None else directory / "report"
    analysis = analyse_sweep(directory)
    claim_output(out)
    tables = write_tables(analysis, out / "tables")
    fig_dir = out / "figures"
    plots = [f(analysis, fig_dir) for f in (accuracy_figure, metric_figure, time_figure)]
    for p in plots:
        if p.path is None:
            (fig_dir / f"{p.key}.png").unlink(missing_ok=True)
    blocks = build_blocks(analysis, plots, tables, out)
    md = write_atomically(out / "report.md", to_markdown(blocks))
    page = write_atomically(
        out / "report.html", to_html(blocks, f"Sweep report: {analysis['sweep']['name']}")
    )
    return [md, page, *(p.path for p in plots if p.path is not None), *tables]
