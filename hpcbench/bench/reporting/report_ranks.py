"""The report's section on the ranks of each run: stragglers (from the ranks' telemetry,
:func:`hpcbench.measure.stragglers.analyse`) with a figure of each rank's compute time per step,
and the profiler traces' summaries (``--trace-steps``: :mod:`hpcbench.measure.traces`)."""

from __future__ import annotations

from pathlib import Path

from hpcbench.bench.reading.results_reader import Results, Run
from hpcbench.bench.reporting.document import Block, Image, Para, Table
from hpcbench.bench.reporting.formatting import num
from hpcbench.files import printable
from hpcbench.measure.stragglers import Stragglers

FIGURE_KEY = "ranks"
MAX_RUNS_DRAWN = 4


def _named(st: Stragglers) -> str:
    named = st.get("named") or {}
    return (
        "; ".join(
            f"rank {r} ({printable(v.get('host'))}) {v['ratio']:.1f}x from step {v['since_step']}"
            for r, v in sorted(named.items(), key=lambda kv: int(kv[0]))
        )
        or "none"
    )


def straggler_table(runs: list[Run]) -> Table:
    rows = []
    for run in runs:
        st = run.stragglers or {}
        slow = st.get("slowest") or {}
        ratio = slow.get("ratio")
        rows.append([
            f"{run.config} {run.kind} {run.rep}", str(len(st.get("ranks") or {})),
            f"{slow.get('rank')} ({printable(slow.get('host'))})",
            f"{ratio:.2f}" if isinstance(ratio, (int, float)) else "–",
            num(st.get("others_waited_s")), _named(st),
        ])  # fmt: skip
    head = ["run", "ranks", "slowest rank (host)", "× others' median", "others waited (rank-s)",
            "stragglers named"]  # fmt: skip
    return Table(head, rows)


def trace_table(runs: list[Run]) -> Table:
    rows = []
    for run in runs:
        for tr in run.traces:
            sec = tr["seconds"]
            top = ", ".join(f"{printable(o['name'])} {o['self_s'] * 1000:.1f} ms"
                            for o in tr.get("top_ops", [])[:3])  # fmt: skip
            rows.append([
                f"{run.config} {run.kind} {run.rep}", str(tr["rank"]), printable(tr.get("host")),
                f"{tr['steps'][0]}–{tr['steps'][1]}", num(sec.get("compute")),
                num(sec.get("comm")), num(sec.get("data")), top or "–",
            ])  # fmt: skip
    head = ["run", "rank", "host", "steps", "compute (s)", "comm (s)", "data (s)", "top operators"]
    return Table(head, rows)


def figure(runs: list[Run], fig_dir: Path) -> tuple[Path, bytes] | None:
    """Each rank's compute time per step (a box per rank, one panel per run), a named straggler
    in red; the runs with the largest imbalance first."""
    from matplotlib import rc_context

    from hpcbench.bench.reporting.plotting import RC, label, new_figure, save

    drawn = sorted(
        runs, key=lambda r: -(((r.stragglers or {}).get("slowest") or {}).get("ratio") or 0)
    )
    drawn = drawn[:MAX_RUNS_DRAWN]
    if not drawn:
        return None
    with rc_context(RC):
        fig = new_figure(6.4, 2.2 * len(drawn))
        for i, run in enumerate(drawn):
            st = run.stragglers or {}
            ranks = sorted(st["ranks"].items(), key=lambda kv: int(kv[0]))
            ax = fig.add_subplot(len(drawn), 1, i + 1)
            data = [[v * 1000 for v in info["compute_s"]] for _, info in ranks]
            boxes = ax.boxplot(data, patch_artist=True, showfliers=False,
                               medianprops={"color": "black"})  # fmt: skip
            named = {str(r) for r in (st.get("named") or {})}
            for i, (rank, _) in enumerate(ranks):  # a narrow box shows its lines, not its fill
                colour = "#d62728" if str(rank) in named else "#3182bd"
                boxes["boxes"][i].set(facecolor=colour, edgecolor=colour)
                for line in (
                    *boxes["whiskers"][2 * i : 2 * i + 2],
                    *boxes["caps"][2 * i : 2 * i + 2],
                ):
                    line.set_color(colour)
                if str(rank) in named:
                    ax.annotate("straggler", (i + 1, max(data[i])), xytext=(0, 4),
                                textcoords="offset points", ha="center", color=colour, fontsize=8)  # fmt: skip
            ax.set_xticks(range(1, len(ranks) + 1), [str(r) for r, _ in ranks])
            ax.set_xlabel("rank")
            ax.set_ylabel("compute per step (ms)")
            ax.set_title(label(f"{run.config} {run.kind} {run.rep}"), fontsize=9)
        return save(fig, fig_dir, FIGURE_KEY)


def rank_blocks(results: Results, out_dir: Path) -> list[Block]:
    """The section's blocks (a note where no run has telemetry of two ranks or traces)."""
    with_ranks = [r for r in results.runs if r.stragglers]
    with_traces = [r for r in results.runs if r.traces]
    fig_dir = out_dir / "figures"
    drawn = figure(with_ranks, fig_dir) if with_ranks else None
    if drawn is None:
        (fig_dir / f"{FIGURE_KEY}.png").unlink(missing_ok=True)
    blocks: list[Block] = []
    if not with_ranks:
        blocks.append(Para("Stragglers: none to look for, as no run has telemetry of two ranks "
                           "or more (--telemetry 0, or one rank each).", "note"))  # fmt: skip
    else:
        blocks += [
            Para(
                "From each rank's telemetry: compute per step is the time before the collective "
                "(the step less its data wait and its communication). A straggler stays above "
                f"{with_ranks[0].stragglers['threshold']} × the other ranks' median for "
                f"{with_ranks[0].stragglers['sustain_steps']} steps or more; others waited = "
                "the sum over the other ranks of (the slowest rank's mean − theirs) × their steps, "
                "in rank-seconds (divide by the other ranks for the wall time lost); a rank named "
                "from a step may have slowed down within its first slow record."
            ),
            straggler_table(with_ranks),
        ]
        if drawn is not None:
            path, png = drawn
            caption = "Each rank's compute time per step (one value per telemetry record); a "
            caption += "rank named a straggler in red."
            blocks.append(Image("Compute time per step, by rank", caption,
                                path.relative_to(out_dir).as_posix(), png))  # fmt: skip
    skipped = [line for r in results.runs for line in r.skipped_telemetry]
    if skipped:
        blocks.append(Para("Telemetry lines that were not a record, skipped: " + "; ".join(
            printable(line) for line in skipped) + ".", "warn"))  # fmt: skip
    if with_traces:
        blocks += [
            Para("Profiler traces (--trace-steps): each rank's traced steps split into compute, "
                 "communication and data wait, with its top operators by own time; the traces "
                 "are traces/rank-N.pt.trace.json in each run directory (Perfetto, "
                 "chrome://tracing, TensorBoard's profiler plugin). Traced steps run slower."),
            trace_table(with_traces),
        ]  # fmt: skip
    return blocks
