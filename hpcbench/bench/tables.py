"""The analysis as CSV tables beside the report: phase times, scaling, accuracy per epoch, energy
(also per kind of device) and the differences from the baseline."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.bench.results import PHASES


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _write_csv(path: Path, header: list[str], rows: Iterable[list[Any]]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([_cell(v) for v in row])
    return write_atomically(path, buf.getvalue())


def _est(est: dict[str, Any] | None) -> list[Any]:
    return [None, None, None] if est is None else [est["value"], *est["ci95"]]


def write_tables(analysis: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """The analysis as CSV files in ``out_dir`` (each written to a temporary name and renamed):
    ``times.csv``, ``scaling.csv``, ``accuracy.csv``, ``energy.csv``, ``energy_by_kind.csv``,
    ``differences.csv``."""
    out = Path(out_dir)
    cfgs = analysis["configs"]
    paths = []
    paths.append(
        _write_csv(
            out / "times.csv",
            [
                "config",
                "phase",
                "n",
                "median_s",
                "olympic_mean_s",
                "mean_s",
                "ci95_lo_s",
                "ci95_hi_s",
            ],
            (
                [c["name"], p, s["n"], s["median"], s["olympic_mean"], s["mean"], *s["ci95"]]
                for c in cfgs
                for p in PHASES
                if (s := c["time"][p]) is not None
            ),
        )
    )
    est_keys = (
        "speedup_vs_cpu",
        "speedup_vs_one_device",
        "speedup_train_vs_one_device",
        "efficiency",
        "efficiency_train",
        "karp_flatt",
        "karp_flatt_train",
    )
    paths.append(
        _write_csv(
            out / "scaling.csv",
            ["config", "devices"]
            + [f"{k}{s}" for k in est_keys for s in ("", "_ci95_lo", "_ci95_hi")],
            ([c["name"], c["devices"]] + sum((_est(c[k]) for k in est_keys), []) for c in cfgs),
        )
    )
    acc_rows: list[list[Any]] = []
    for c in cfgs:
        acc_rows += [[c["name"], e, v] for e, v in c["accuracy"]["per_epoch"]]
        if c["accuracy"]["final"]:
            acc_rows.append([c["name"], "test", c["accuracy"]["final"]["median"]])
    paths.append(_write_csv(out / "accuracy.csv", ["config", "epoch", "accuracy_median"], acc_rows))
    stat_keys = ("used_j", "with_idle_j", "net_j", "per_sample_j")
    float_keys = (
        "edp",
        "ed2p",
        "edp_norm",
        "ed2p_norm",
        "edp_with_idle_norm",
        "ed2p_with_idle_norm",
    )
    paths.append(
        _write_csv(
            out / "energy.csv",
            ["config", "available", "reason"]
            + [f"{k}{s}" for k in stat_keys for s in ("_median", "_ci95_lo", "_ci95_hi")]
            + list(float_keys)
            + ["window", "sources"],
            (
                [c["name"], c["energy"]["available"], c["energy"]["reason"]]
                + sum(
                    (
                        [None, None, None]
                        if (s := c["energy"][k]) is None
                        else [s["median"], *s["ci95"]]
                        for k in stat_keys
                    ),
                    [],
                )
                + [c["energy"][k] for k in float_keys]
                + [c["energy"]["window"], "; ".join(c["energy"]["sources"])]
                for c in cfgs
            ),
        )
    )
    paths.append(
        _write_csv(
            out / "energy_by_kind.csv",
            ["config", "kind", "available", "reason"]
            + [
                f"{k}{s}"
                for k in ("used_j", "per_sample_j")
                for s in ("_median", "_ci95_lo", "_ci95_hi")
            ]
            + ["edp", "ed2p", "edp_norm", "ed2p_norm"],
            (
                [c["name"], kind, e["available"], e["reason"]]
                + sum(
                    (
                        [None, None, None] if (s := e[k]) is None else [s["median"], *s["ci95"]]
                        for k in ("used_j", "per_sample_j")
                    ),
                    [],
                )
                + [e[k] for k in ("edp", "ed2p", "edp_norm", "ed2p_norm")]
                for c in cfgs
                for kind, e in (c["energy"].get("by_kind") or {}).items()
            ),
        )
    )
    paths.append(
        _write_csv(
            out / "differences.csv",
            ["a", "b", "metric", "ratio", "significant"],
            (
                [d["a"], d["b"], d["metric"], d["ratio"], d["significant"]]
                for d in analysis["differences"]
            ),
        )
    )
    return paths


# ----------------------------------------------------------------------------- compare
