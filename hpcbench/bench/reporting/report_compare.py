"""The report's comparisons of configurations with each other: what the summary leads with (the
differences the noise carries, and the configurations that trained another global batch than
the reference), and the table of every configuration against every other (the ratio of their
median total times, its 95 % interval and its significance, from
:func:`hpcbench.bench.analysing.pairwise.pairwise`)."""

from __future__ import annotations

from hpcbench.bench.analysing.pairwise import significant_findings
from hpcbench.bench.analysis_types import Analysis, Comparison
from hpcbench.bench.reporting.document import Block, Bullets, Para, Table
from hpcbench.bench.reporting.formatting import fmt_est
from hpcbench.bench.stats import MIN_SIGNIFICANT_N


def lead_blocks(analysis: Analysis) -> list[Block]:
    """The summary's first blocks: the significant differences between configurations (or
    that there is none), then a warning naming the configurations whose work differs."""
    found = significant_findings(dict(analysis))
    timed = sum(1 for c in analysis.get("configs", []) if (c.get("time") or {}).get("total"))
    blocks: list[Block] = []
    if found:
        blocks += [
            Para("Significant (the 95 % intervals of the total times do not overlap):"),
            Bullets(found),
        ]
    elif timed > 1 and "pairwise" in analysis:  # an analysis of before has no comparisons
        blocks.append(
            Para(
                "No difference of total time between configurations is significant: every "
                "pair's 95 % intervals overlap, or a side has fewer than "
                f"{MIN_SIGNIFICANT_N} repetitions. The figures below may be noise; more "
                "repetitions are the remedy.",
                "note",
            )
        )
    if (batch := batch_warning(analysis)) is not None:
        blocks.append(Para(batch, "warn"))
    return blocks


def batch_warning(analysis: Analysis) -> str | None:
    """The configurations that trained another global batch than the reference, in words."""
    work = analysis.get("batches") or {}
    different = work.get("different") or {}
    if not different:
        return None
    which = ", ".join(f"{name} {batch}" for name, batch in different.items())
    return (
        f"Different work: the configurations trained different global batches ({which}, "
        f"against {work['global_batch']} of {work['reference']}). A program with a fixed batch "
        "per rank trains more samples a step on more ranks: its speedup is weak scaling, "
        "not the same training done faster, and its accuracy may differ for that reason. "
        "For a strong-scaling comparison, divide the batch by the ranks (the trainer's "
        "--global-batch-size does)."
    )


def pairwise_blocks(analysis: Analysis) -> list[Block]:
    """Every configuration against every other: a row per configuration ``a``, a column per
    ``b``, each cell time(a) ÷ time(b), its interval, and whether it is significant."""
    cells = {(d["a"], d["b"]): d for d in analysis.get("pairwise") or []}
    names = [str(c["name"]) for c in analysis.get("configs", []) if c.get("time", {}).get("total")]
    if len(names) < 2:
        return [Para("Fewer than two configurations have a completed timing run.", "note")]
    rows = [[a, *(_cell(cells.get((a, b)), a == b) for b in names)] for a in names]
    return [
        Para(
            "Each cell is the median total time of the row's configuration ÷ that of the "
            "column's (below 1: the row is faster), its 95 % bootstrap interval, and "
            "'significant' where the two configurations' intervals do not overlap with at "
            f"least {MIN_SIGNIFICANT_N} repetitions each ('n.s.' otherwise), the rule of the "
            "comparisons with the baseline."
        ),
        Table(["time of ÷ time of", *names], rows, numeric=set(range(1, len(names) + 1))),
    ]


def _cell(d: Comparison | None, same: bool) -> str:
    if same:
        return "1"
    if d is None:
        return "–"
    return f"{fmt_est(d['ratio'], '×')}, {'significant' if d['significant'] else 'n.s.'}"
