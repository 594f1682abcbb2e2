"""The analysis as CSV tables beside the report: phase times, scaling, accuracy per epoch, energy
(also per kind of device) and the differences from the baseline."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.bench.analysis_types import Analysis, Comparison, ConfigAnalysis
from hpcbench.bench.reading.results_reader import PHASES
from hpcbench.bench.stats import Estimate, Stat
from hpcbench.csvfile import csv_text


def _write_csv(path: Path, header: list[str], rows: Iterable[list[Any]]) -> Path:
    """Figures to six significant digits; names made inert (:mod:`hpcbench.csvfile`)."""
    return write_atomically(path, csv_text(header, rows, float_format=".6g"))


def _est(est: Estimate | None) -> list[Any]:
    return [None, None, None] if est is None else [est["value"], *est["ci95"]]


def write_tables(analysis: Analysis, out_dir: str | Path) -> list[Path]:
    """The analysis as CSV files in ``out_dir`` (each written to a temporary name and renamed):
    ``times.csv``, ``scaling.csv``, ``accuracy.csv``, ``energy.csv``, ``energy_by_kind.csv``,
    ``accounting.csv``, ``estimates.csv``, ``differences.csv``, ``pairwise.csv``."""
    out = Path(out_dir)
    cfgs = analysis["configs"]
    return [
        _times(out, cfgs),
        _scaling(out, cfgs),
        _accuracy(out, cfgs),
        _energy(out, cfgs),
        _energy_by_kind(out, cfgs),
        _accounting(out, cfgs),
        _estimates(out, cfgs),
        _differences(out, analysis["differences"]),
        _pairwise(out, analysis.get("pairwise") or []),
    ]


def _stat_cells(stat: Stat | None) -> list[Any]:
    """median, ci95 low, ci95 high of a STAT; three empty cells without one."""
    return [None, None, None] if stat is None else [stat["median"], *stat["ci95"]]


def _stat_header(keys: tuple[str, ...]) -> list[str]:
    """The three columns of each STAT in ``keys``: median, ci95 low, ci95 high."""
    return [f"{k}{s}" for k in keys for s in ("_median", "_ci95_lo", "_ci95_hi")]


def _times(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """Each phase's time per configuration: n, median, olympic mean, mean, 95 % interval."""
    header = ["config", "phase", "n", "median_s", "olympic_mean_s", "mean_s"]
    return _write_csv(
        out / "times.csv",
        [*header, "ci95_lo_s", "ci95_hi_s"],
        (
            [c["name"], p, s["n"], s["median"], s["olympic_mean"], s["mean"], *s["ci95"]]
            for c in cfgs
            for p in PHASES
            if (s := c["time"][p]) is not None
        ),
    )


SCALING_KEYS = (
    "speedup_vs_cpu",
    "speedup_vs_one_device",
    "speedup_train_vs_one_device",
    "efficiency",
    "efficiency_train",
    "karp_flatt",
    "karp_flatt_train",
)


def _scaling(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """Speedups, efficiencies and Karp–Flatt per configuration, each with its interval."""
    return _write_csv(
        out / "scaling.csv",
        ["config", "devices"]
        + [f"{k}{s}" for k in SCALING_KEYS for s in ("", "_ci95_lo", "_ci95_hi")],
        ([c["name"], c["devices"]] + sum((_est(c[k]) for k in SCALING_KEYS), []) for c in cfgs),
    )


def _accuracy(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """The median validation accuracy per epoch, and the test accuracy, per configuration."""
    rows: list[list[Any]] = []
    for c in cfgs:
        rows += [[c["name"], e, v] for e, v in c["accuracy"]["per_epoch"]]
        if c["accuracy"]["final"]:
            rows.append([c["name"], "test", c["accuracy"]["final"]["median"]])
    return _write_csv(out / "accuracy.csv", ["config", "epoch", "accuracy_median"], rows)


ENERGY_STATS = ("used_j", "with_idle_j", "net_j", "per_sample_j")
ENERGY_FLOATS = (
    "edp",
    "ed2p",
    "edp_norm",
    "ed2p_norm",
    "edp_with_idle_norm",
    "ed2p_with_idle_norm",
)


def _energy(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """Each configuration's energy figures, EDP and ED²P, window and sources."""
    return _write_csv(
        out / "energy.csv",
        ["config", "available", "reason"]
        + _stat_header(ENERGY_STATS)
        + list(ENERGY_FLOATS)
        + ["window", "sources"],
        (
            [c["name"], c["energy"]["available"], c["energy"]["reason"]]
            + sum((_stat_cells(c["energy"][k]) for k in ENERGY_STATS), [])
            + [c["energy"][k] for k in ENERGY_FLOATS]
            + [c["energy"]["window"], "; ".join(c["energy"]["sources"])]
            for c in cfgs
        ),
    )


def _energy_by_kind(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """The energy figures per kind of device (gpu, cpu, dram) of each configuration."""
    stats = ("used_j", "per_sample_j")
    floats = ("edp", "ed2p", "edp_norm", "ed2p_norm")
    return _write_csv(
        out / "energy_by_kind.csv",
        ["config", "kind", "available", "reason"] + _stat_header(stats) + list(floats),
        (
            [c["name"], kind, e["available"], e["reason"]]
            + sum((_stat_cells(e[k]) for k in stats), [])
            + [e[k] for k in floats]
            for c in cfgs
            for kind, e in (c["energy"].get("by_kind") or {}).items()
        ),
    )


ACCOUNTING_STATS = (
    "queue_wait_s",
    "elapsed_s",
    "cpu_efficiency",
    "max_rss_bytes",
    "memory_used_bytes",
    "scheduler_energy_j",
)


def _accounting(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """What the scheduler's accounting recorded of each configuration's runs, and its source."""
    return _write_csv(
        out / "accounting.csv",
        ["config", "available", "runs", "states", "source", "reason"]
        + _stat_header(ACCOUNTING_STATS)
        + ["energy_ratio", "energy_reason"],
        (
            [c["name"], a["available"], a["runs"]]
            + [" ".join(f"{k}={v}" for k, v in (a.get("states") or {}).items())]
            + [a.get("source"), a.get("reason")]
            + sum((_stat_cells(a.get(k)) for k in ACCOUNTING_STATS), [])
            + [a.get("energy_ratio"), a.get("energy_reason")]
            for c in cfgs
            for a in [c.get("accounting") or {"available": False, "runs": 0}]
        ),
    )


ESTIMATE_KEYS = ("facility_kwh", "co2e_g", "energy_cost", "allocation_cost")


def _estimates(out: Path, cfgs: list[ConfigAnalysis]) -> Path:
    """The carbon and cost estimates (from the configured factors) per run and per
    configuration; empty cells where a factor or the energy is missing."""
    return _write_csv(
        out / "estimates.csv",
        ["config", "runs", "currency"]
        + [f"{k}_per_run" for k in ESTIMATE_KEYS]
        + [f"{k}_all_runs" for k in ESTIMATE_KEYS],
        (
            [c["name"], e["runs"], e["currency"]]
            + [e["per_run"][k] for k in ESTIMATE_KEYS]
            + [e["per_config"][k] for k in ESTIMATE_KEYS]
            for c in cfgs
            if (e := c.get("estimates"))
        ),
    )


def _differences(out: Path, differences: list[Comparison]) -> Path:
    """The differences from the one-device baseline and whether each is significant."""
    return _write_csv(
        out / "differences.csv",
        ["a", "b", "metric", "ratio", "significant"],
        ([d["a"], d["b"], d["metric"], d["ratio"], d["significant"]] for d in differences),
    )


def _pairwise(out: Path, pairs: list[Comparison]) -> Path:
    """Every configuration against every other: time(a) ÷ time(b), its interval, significant."""
    return _write_csv(
        out / "pairwise.csv",
        [
            "a",
            "b",
            "metric",
            "ratio",
            "ratio_ci95_lo",
            "ratio_ci95_hi",
            "significant",
            "n_a",
            "n_b",
        ],
        (
            [
                d["a"],
                d["b"],
                d["metric"],
                d["ratio"]["value"],
                *d["ratio"]["ci95"],
                d["significant"],
                *d["n"],
            ]
            for d in pairs
        ),  # fmt: skip
    )
