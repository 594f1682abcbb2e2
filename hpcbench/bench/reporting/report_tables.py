"""The report's tables of the configurations, their times, their scaling and their accuracy."""

from __future__ import annotations

from hpcbench.bench.analysis_types import Analysis
from hpcbench.bench.reading.results_documents import BenchDocument
from hpcbench.bench.reading.results_reader import TOTAL_PHASES
from hpcbench.bench.reporting.document import (
    Table,
)
from hpcbench.bench.reporting.formatting import fmt_est, fmt_stat, num


def total_phases() -> tuple[str, ...]:
    """The phases the analysis sums into a run's total time ("train", "val", "test" ...)."""
    return tuple(p.removesuffix("_s") for p in TOTAL_PHASES)


def config_table(bench: BenchDocument, analysis: Analysis) -> Table:
    by_name = {c.get("name"): c for c in analysis.get("configs", [])}
    rows = []
    for c in (bench.get("matrix") or {}).get("configs") or []:
        a = by_name.get(c.get("name"), {})
        runs = a.get("runs") or {}
        rows.append(
            [
                str(c.get("name")),
                str(c.get("strategy")),
                str(c.get("device")),
                f"{c.get('nodes')} × {c.get('ranks_per_node')}",
                str(c.get("devices")),
                str(c.get("launcher")),
                " ".join(str(x) for x in c.get("trainer_args") or c.get("program_args") or [])
                or "–",
                str(runs.get("completed", 0)),
                str(runs.get("failed", 0)),
            ]
        )
    return Table(
        [
            "configuration",
            "strategy",
            "device",
            "nodes × ranks",
            "devices p",
            "launcher",
            "extra arguments",
            "completed",
            "failed",
        ],
        rows,
        numeric={4, 7, 8},
    )


def time_table(analysis: Analysis) -> Table:
    rows = []
    for c in analysis.get("configs", []):
        t = c.get("time") or {}
        rows.append(
            [str(c["name"])]
            + [fmt_stat(t.get(p), "s") for p in ("total", "setup", "train", "val", "test")]
            + [fmt_stat(c.get("throughput"), "samples/s")]
        )
    return Table(
        [
            "configuration",
            "total",
            "set-up" + ("" if "setup" in total_phases() else " (not in total)"),
            "train",
            "validation",
            "test",
            "train throughput",
        ],
        rows,
        numeric={1, 2, 3, 4, 5, 6},
    )


def scaling_table(analysis: Analysis) -> Table:
    """Speedups, efficiencies and Karp–Flatt per configuration, with its global batch; a
    speedup of a configuration that trained another global batch than the reference is marked
    weak scaling (different work per step)."""
    different = (analysis.get("batches") or {}).get("different") or {}
    rows = []
    for c in analysis.get("configs", []):
        weak = " (weak scaling)" if c["name"] in different else ""
        batch = c.get("global_batch")
        rows.append(
            [
                str(c["name"]),
                str(c.get("devices")),
                "–" if batch is None else str(batch),
                fmt_est(c.get("speedup_vs_cpu"), "×") + weak,
                fmt_est(c.get("speedup_vs_one_device"), "×") + weak,
                fmt_est(c.get("speedup_train_vs_one_device"), "×"),
                fmt_est(c.get("efficiency"), "%", 100.0),
                fmt_est(c.get("efficiency_train"), "%", 100.0),
                fmt_est(c.get("karp_flatt")),
            ]
        )
    return Table(
        [
            "configuration",
            "devices p",
            "global batch",
            "speedup vs CPU",
            "speedup vs 1 device",
            "train-loop speedup",
            "efficiency",
            "train-loop efficiency",
            "Karp–Flatt e",
        ],
        rows,
        numeric=set(range(1, 9)),
    )


def accuracy_table(analysis: Analysis) -> Table:
    rows = []
    for c in analysis.get("configs", []):
        acc = c.get("accuracy") or {}
        per_epoch = acc.get("per_epoch") or []
        last = per_epoch[-1][1] if per_epoch else None
        rows.append(
            [
                str(c["name"]),
                fmt_stat(acc.get("final"), "%", 100.0),
                f"{num(last * 100)} %" if isinstance(last, (int, float)) else "–",
            ]
        )
    return Table(
        ["configuration", "test accuracy", "last validation accuracy (median)"],
        rows,
        numeric={1, 2},
    )
