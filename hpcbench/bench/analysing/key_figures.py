"""The figures of an analysis that the history keeps and that references can name: for each
configuration, each figure as a statistic (``median``, ``ci95``, ``n``).

- ``samples_per_s``: training throughput (samples/s);
- ``total_s``, ``train_s``: the run's measured work (train + val + test), its train loop (s);
- ``test_accuracy``: the final test accuracy (a fraction);
- ``speedup``: of the whole run over the one-device baseline; ``efficiency``: speedup / devices;
- ``energy_j``: energy of the devices the run used (energy runs, J);
- ``queue_wait_s``, ``cpu_efficiency``, ``max_rss_bytes``: the scheduler's accounting (queue
  wait in s, seff's CPU time over elapsed × CPUs, the largest rank's resident high-water mark in
  bytes);
- ``co2e_g``: the estimated CO2e of one run, from the configured factors (g).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from hpcbench.bench.analysis_types import Analysis, ConfigAnalysis

UNITS = {
    "samples_per_s": "samples/s",
    "total_s": "s",
    "train_s": "s",
    "test_accuracy": "",
    "speedup": "×",
    "efficiency": "",
    "energy_j": "J",
    "queue_wait_s": "s",
    "cpu_efficiency": "",
    "max_rss_bytes": "B",
    "co2e_g": "g",
    # hpcbench doctor's (hpcbench.doctor.figures)
    "compute_gflops": "GFLOP/s",
    "busbw_gbps": "GB/s",
    "read_mbps": "MB/s",
    "read_together_mbps": "MB/s",
}
FIGURE_NAMES = tuple(UNITS)


class Figure(TypedDict):
    """A key figure: a median (or an estimate's value) with its interval and runs."""

    median: float | None
    ci95: list[float | None] | None
    n: int | None


def _stat(value: Any) -> Figure | None:
    """A summary (median, ci95, n) as it is, an estimate (value, ci95) as a statistic."""
    if not isinstance(value, dict):
        return None
    if "median" in value:
        return {"median": value["median"], "ci95": value.get("ci95"), "n": value.get("n")}
    if "value" in value:
        return {"median": value["value"], "ci95": value.get("ci95"), "n": None}
    return None


def config_figures(cfg: ConfigAnalysis) -> dict[str, Figure]:
    """One configuration's figures (those it has)."""
    acct = cfg.get("accounting") or {}
    energy = cfg.get("energy") or {}
    estimates = (cfg.get("estimates") or {}).get("per_run") or {}
    found = {
        "samples_per_s": _stat(cfg.get("throughput")),
        "total_s": _stat((cfg.get("time") or {}).get("total")),
        "train_s": _stat((cfg.get("time") or {}).get("train")),
        "test_accuracy": _stat((cfg.get("accuracy") or {}).get("final")),
        "speedup": _stat(cfg.get("speedup_vs_one_device")),
        "efficiency": _stat(cfg.get("efficiency")),
        "energy_j": _stat(energy.get("used_j")) if energy.get("available") else None,
        "queue_wait_s": _stat(acct.get("queue_wait_s")),
        "cpu_efficiency": _stat(acct.get("cpu_efficiency")),
        "max_rss_bytes": _stat(acct.get("max_rss_bytes")),
        "co2e_g": (
            {"median": estimates["co2e_g"], "ci95": None, "n": None}
            if estimates.get("co2e_g") is not None
            else None
        ),
    }
    return {k: v for k, v in found.items() if v is not None and v.get("median") is not None}


def analysis_figures(analysis: Analysis) -> dict[str, dict[str, Figure]]:
    """Every configuration's figures: config -> figure -> statistic."""
    return {cfg["name"]: config_figures(cfg) for cfg in analysis.get("configs") or []}
