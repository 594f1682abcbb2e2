"""What a benchmark results directory says: the analysis behind ``hpcbench report`` and
``hpcbench compare``. Pure Python and numpy (no torch); the directory is read by
:mod:`hpcbench.bench.reading.results_reader`, the energy figures made by :mod:`hpcbench.bench.analysing.energy_results`, the
statistics by :mod:`hpcbench.bench.stats`; the method is in docs/benchmarking.md.

- :func:`analyse`: per configuration, over its repetitions (timing runs for times, accuracy and
  throughput; energy runs for energy): phase times, speedups, efficiency, Karp–Flatt, accuracy,
  energy and EDP, the differences from the one-device baseline and sentences saying it in words.

What changed between two results directories is :mod:`hpcbench.bench.analysing.comparison`. The
analysis's types (:class:`Analysis`, :class:`~hpcbench.bench.analysis_types.ConfigAnalysis` …)
are in :mod:`hpcbench.bench.analysis_types`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hpcbench.bench import stats
from hpcbench.bench.analysing.accounting import accounting_block, queue_sentence
from hpcbench.bench.analysing.energy_results import (
    energy_block,
    idle_watts,
    kind_name,
    normalise_energy,
)
from hpcbench.bench.analysing.estimates import estimate_block
from hpcbench.bench.analysing.pairwise import batch_note, batches, global_batch, pairwise
from hpcbench.bench.analysis_types import (
    Accuracy,
    Analysis,
    Comparison,
    ConfigAnalysis,
    EstimateBlock,
    Factors,
)
from hpcbench.bench.reading.results_reader import (
    PHASES,
    AnalysisError,
    Results,
    Run,
    is_number,
    phase_times,
)
from hpcbench.bench.stats import Estimate, Stat

if TYPE_CHECKING:
    from hpcbench.bench.reading.results_documents import ConfigRecord


def _accuracy(runs: list[Run]) -> Accuracy:
    finals = [
        float(r.metrics["test"]["accuracy"])
        for r in runs
        if r.metrics
        and isinstance(r.metrics.get("test"), dict)
        and is_number(r.metrics["test"].get("accuracy"))
    ]
    by_epoch: dict[int, list[float]] = {}
    for r in runs:
        for row in (r.metrics or {}).get("epochs") or []:
            if isinstance(row, dict) and is_number(row.get("val_accuracy")):
                by_epoch.setdefault(int(row["epoch"]), []).append(float(row["val_accuracy"]))
    return {
        "final": stats.summarise(finals),
        "per_epoch": [[e, float(np.median(v))] for e, v in sorted(by_epoch.items())],
    }


def _speedup(name: str, base: str | None, times: dict[str, list[float]]) -> Estimate | None:
    if base is None or not times.get(base) or not times.get(name):
        return None
    if name == base:
        return {"value": 1.0, "ci95": [1.0, 1.0]}
    return stats.ratio_of_medians(times[base], times[name])


def _scaling(
    s_one: Estimate | None, s_one_train: Estimate | None, devices: int, comparable: bool
) -> ConfigAnalysis:
    """Speedup over the one-device baseline (whole run, train loop) and, where the devices are
    of the baseline's kind, parallel efficiency and the Karp–Flatt serial fraction."""
    return {
        "speedup_vs_one_device": s_one,
        "speedup_train_vs_one_device": s_one_train,
        "efficiency": stats.scaled(s_one, 1.0 / devices) if comparable else None,
        "efficiency_train": stats.scaled(s_one_train, 1.0 / devices) if comparable else None,
        "karp_flatt": stats.karp_flatt_est(s_one, devices) if comparable else None,
        "karp_flatt_train": stats.karp_flatt_est(s_one_train, devices) if comparable else None,
    }


def _throughput(runs: list[Run]) -> Stat | None:
    """Training samples per second over the runs that report it."""
    return stats.summarise(
        [
            float(r.metrics["throughput"]["train_samples_per_s"])
            for r in runs
            if r.metrics
            and is_number((r.metrics.get("throughput") or {}).get("train_samples_per_s"))
        ]
    )


def _completed(results: Results, name: str, kind: str) -> list[Run]:
    return [
        r for r in results.runs if r.config == name and r.kind == kind and r.status == "completed"
    ]


def _config_figures(
    results: Results,
    cfg: ConfigRecord,
    phase_values: dict[str, dict[str, list[float]]],
    speedups: tuple[Estimate | None, Estimate | None, Estimate | None],
    comparable: bool,
) -> ConfigAnalysis:
    """One configuration's figures: its runs, times, speedups and scaling, accuracy, throughput
    and energy (``speedups``: against the CPU baseline, the one-device one, and its train time)."""
    name, devices = cfg["name"], int(cfg["devices"])
    runs = [r for r in results.runs if r.config == name]
    timing = _completed(results, name, "timing")
    energy_runs = _completed(results, name, "energy")
    world = next((r.metrics["run"].get("world_size") for r in timing if r.metrics), None)
    s_cpu, s_one, s_one_train = speedups
    return {
        "name": name,
        "devices": devices,
        "device": cfg.get("device"),
        "nodes": int(cfg.get("nodes") or 1),
        "strategy": cfg.get("strategy"),
        "world_size": world,
        "global_batch": global_batch(timing),
        "runs": {
            "completed": sum(r.status == "completed" for r in runs),
            "failed": sum(r.status == "failed" for r in runs),
            "timing": len(timing),
            "energy": len(energy_runs),
        },
        "time": {p: stats.summarise(phase_values[name][p]) for p in PHASES},
        "speedup_vs_cpu": s_cpu,
        **_scaling(s_one, s_one_train, devices, comparable),
        "accuracy": _accuracy(timing),
        "throughput": _throughput(timing),
        "energy": energy_block(energy_runs, idle_watts(results.idle)),
    }


def analyse(results: Results) -> Analysis:
    """The analysis of a results directory (JSON-able; the layout in docs/benchmarking.md)."""
    matrix = results.matrix
    base_cpu = matrix.get("baseline_cpu")
    base_one = matrix.get("baseline_one_device")
    by_name = {c["name"]: c for c in matrix["configs"]}
    phase_values: dict[str, dict[str, list[float]]] = {}
    for c in matrix["configs"]:
        timing = [r for r in _completed(results, c["name"], "timing") if r.metrics]
        phase_values[c["name"]] = {p: [phase_times(r.metrics)[p] for r in timing] for p in PHASES}
    totals = {n: v["total"] for n, v in phase_values.items()}
    trains = {n: v["train"] for n, v in phase_values.items()}
    configs: list[ConfigAnalysis] = []
    for cfg in matrix["configs"]:
        name = cfg["name"]
        speedups = (
            _speedup(name, base_cpu, totals),
            _speedup(name, base_one, totals),
            _speedup(name, base_one, trains),
        )
        # parallel efficiency compares like with like: the same kind of device as the baseline
        comparable = base_one is not None and by_name[base_one].get("device") == cfg.get("device")
        configs.append(_config_figures(results, cfg, phase_values, speedups, comparable))
    normalise_energy(configs, base_one)
    factors = factors_of(results)
    for cfg in configs:
        runs = [r for r in results.runs if r.config == cfg["name"]]
        used = cfg["energy"]["used_j"]["median"] if cfg["energy"].get("used_j") else None
        cfg["accounting"] = accounting_block(runs, used)
        cfg["estimates"] = _estimates(cfg, factors)
    analysis: Analysis = {
        "name": matrix.get("name"),
        "baselines": {"cpu": base_cpu, "one_device": base_one},
        "configs": configs,
        "differences": _differences(configs, base_one),
        "pairwise": pairwise(configs, totals),
        "batches": batches(configs, base_one),
        # energy runs asked for: without them the report has no energy sections at all
        "energy_asked": int(matrix.get("energy_repetitions") or 0) > 0,
    }
    analysis["sentences"] = sentences(analysis)
    return analysis


def factors_of(results: Results) -> Factors:
    """The estimate factors the matrix ran with (recorded in bench.json when it started, the
    matrix's own ``[estimates]`` over the profile's), with where each came from."""
    from hpcbench.bench.analysing.estimates import check_factors

    recorded = results.bench.get("estimates")
    if isinstance(recorded, dict) and isinstance(recorded.get("values"), dict):
        values, sources = recorded["values"], recorded.get("sources")
    else:
        values = results.matrix.get("estimates") or {}
        sources = dict.fromkeys(values, "the matrix's [estimates]")
    try:  # bench.json is data: a factor edited into text is one line, as in the matrix
        checked = check_factors(values, str(results.directory / "bench.json"))
    except ValueError as err:
        raise AnalysisError(str(err)) from None
    return {"values": checked, "sources": sources if isinstance(sources, dict) else {}}


def _estimates(cfg: ConfigAnalysis, factors: Factors) -> EstimateBlock | None:
    """Carbon and cost of one configuration from the factors (None when none is set): the
    time is the scheduler's elapsed time where its accounting says, else the run's own."""
    acct = cfg["accounting"]
    if acct.get("available") and acct.get("elapsed_s"):
        seconds, basis = acct["elapsed_s"]["median"], "the scheduler's elapsed time"
    elif cfg["time"].get("total"):
        setup = cfg["time"]["setup"]["median"] if cfg["time"].get("setup") else 0.0
        seconds, basis = cfg["time"]["total"]["median"] + setup, "the run's set-up and work"
    else:
        seconds, basis = None, None
    block = estimate_block(cfg, factors["values"], cfg["runs"]["completed"], seconds)
    if block is not None:
        block["time_basis"] = basis
        block["sources"] = factors.get("sources") or {}
    return block


def _differences(configs: list[ConfigAnalysis], base: str | None) -> list[Comparison]:
    ref = next((c for c in configs if c["name"] == base), None)
    if ref is None:
        return []
    out = []
    for cfg in configs:
        if cfg["name"] == base:
            continue
        pairs = [(p, cfg["time"][p], ref["time"][p]) for p in ("total", "train")]
        pairs.append(("used_j", cfg["energy"]["used_j"], ref["energy"]["used_j"]))
        for metric, a, b in pairs:
            if a is None or b is None or not b["median"]:
                continue
            out.append(
                {
                    "a": cfg["name"],
                    "b": base,
                    "metric": metric,
                    "ratio": a["median"] / b["median"],
                    "significant": stats.significantly_different(a, b),
                    "n": [a["n"], b["n"]],
                }
            )
    return out


# ----------------------------------------------------------------------------- words


def _joules(j: float) -> str:
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if abs(j) >= scale:
            return f"{j / scale:.3g} {unit}"
    return f"{j:.3g} J"


def _faster(s: float, base: str) -> str:
    return f"{s:.2f}× faster than {base}" if s >= 1 else f"{1 / s:.2f}× slower than {base}"


# A training phase shorter than this (median seconds) is too short to compare configurations:
# start-up jitter, the first steps' warm-up and other work on the machine are of its size.
MIN_TRAIN_S = 10.0
NOT_SIGNIFICANT = (
    " (not significant: the 95 % intervals of the total times overlap, or a side has fewer "
    f"than {stats.MIN_SIGNIFICANT_N} repetitions)"
)


def too_short(cfg: ConfigAnalysis) -> str | None:
    """Why ``cfg``'s times cannot carry a comparison (None when they can): a training phase
    of a few seconds, or set-up, validation and test taking most of each run."""
    t = cfg["time"]
    if not t.get("train") or not t.get("total") or not t["train"]["n"]:
        return None
    train, total = t["train"]["median"], t["total"]["median"]
    setup = t["setup"]["median"] if t.get("setup") and t["setup"]["n"] else 0.0
    if train < MIN_TRAIN_S:
        return (
            f"its training phase lasts {train:.1f} s (median), too short to compare: "
            "start-up jitter and other work on the machine are of that size; train longer "
            "(more --epochs or data)"
        )
    rest = total + setup - train
    if rest > train:
        return (
            f"set-up, validation and test take {100 * rest / (rest + train):.0f} % of its run: "
            "whole-run speedups measure them more than training; compare the train-loop columns"
        )
    return None


def _energy_sentences(
    cfg: ConfigAnalysis, base_one: str | None, signif: dict[tuple[str, str], Any]
) -> list[str]:
    """One configuration's energy in words: its joules (per kind of device where only some
    could be read), its EDP against the one-device baseline, and where each figure came from."""
    name, en = cfg["name"], cfg["energy"]
    out: list[str] = []
    if not en["available"] and en.get("partial"):
        out.append(f"{name}: {en['partial']}")
        for kind, entry in en["by_kind"].items():
            if not entry["available"]:
                continue
            text = f"{name}: {kind_name(kind)} {_joules(entry['used_j']['median'])}"
            if entry["per_sample_j"]:
                text += f" ({entry['per_sample_j']['median']:.3g} J per sample)"
            if entry["edp_norm"] is not None and name != base_one:
                text += f"; {kind_name(kind)} EDP {entry['edp_norm']:.2f}× that of {base_one}"
            out.append(text)
        return out
    if not en["available"]:
        return [f"{name}: energy not known: {en['reason']}"]
    text = f"{name}: {_joules(en['used_j']['median'])} on the devices it used"
    if en["with_idle_j"]:
        text += f", {_joules(en['with_idle_j']['median'])} with the idle devices of its nodes"
    if en["net_j"]:
        text += f", {_joules(en['net_j']['median'])} above idle power"
    if en["edp_norm"] is not None and name != base_one:
        text += f"; EDP {en['edp_norm']:.2f}× that of {base_one}"
        if en["edp_with_idle_norm"] is not None:
            text += f" ({en['edp_with_idle_norm']:.2f}× counting idle devices)"
        if signif.get((name, "used_j")) is not True:
            text += NOT_SIGNIFICANT.replace("total times", "energies")
    out.append(text)
    for group in en["source_groups"]:
        out.append(
            f"{name}: energy of {', '.join(group['devices'])} from {group['method']}, "
            f"read every {group['interval_s']:g} s"
        )
    return out


def _with_batch(text: str, name: str, analysis: Analysis) -> str:
    """A speedup's sentence, and why it compares different work where it does."""
    note = batch_note(name, analysis.get("batches") or {})
    return text if note is None else f"{text} ({note})"


def sentences(analysis: Analysis) -> list[str]:
    """The analysis in words: speed against each baseline, efficiency, energy and its sources;
    each comparison that the noise does not carry says so, and so does a configuration whose
    times are too short to compare."""
    base_cpu = analysis["baselines"]["cpu"]
    base_one = analysis["baselines"]["one_device"]
    signif = {(d["a"], d["metric"]): d["significant"] for d in analysis["differences"]}
    by_name = {c["name"]: c for c in analysis["configs"]}
    out: list[str] = []
    for cfg in analysis["configs"]:
        if (why := too_short(cfg)) is not None:
            out.append(f"{cfg['name']}: {why}")
    for cfg in analysis["configs"]:
        name = cfg["name"]
        # against the CPU only where that is another baseline than the one-device one
        if cfg["speedup_vs_cpu"] and name != base_cpu and base_cpu != base_one:
            s = cfg["speedup_vs_cpu"]["value"]
            slower = f"{1 / s:.1f}× slower" if s < 1 else f"{s:.1f}× faster"
            text = f"{name}: {slower} than {base_cpu} (whole run)"
            a, b = cfg["time"].get("total"), by_name[base_cpu]["time"].get("total")
            if not (a and b and a["n"] and b["n"] and stats.significantly_different(a, b)):
                text += NOT_SIGNIFICANT
            out.append(_with_batch(text, name, analysis))
        if cfg["speedup_vs_one_device"] and name != base_one:
            text = f"{name}: {_faster(cfg['speedup_vs_one_device']['value'], base_one)}"
            if cfg["efficiency"]:
                text += f", {cfg['efficiency']['value'] * 100:.1f} % efficient"
            if cfg["efficiency_train"]:
                text += f"; the train loop alone {cfg['efficiency_train']['value'] * 100:.1f} %"
            if cfg["karp_flatt"]:
                text += f"; serial fraction (Karp–Flatt) {cfg['karp_flatt']['value']:.3f}"
            if signif.get((name, "total")) is not True:
                text += NOT_SIGNIFICANT
            out.append(_with_batch(text, name, analysis))
    if (queued := queue_sentence(analysis["configs"])) is not None:
        out.append(queued)
    if not analysis.get("energy_asked", True):
        return out
    for cfg in analysis["configs"]:
        out += _energy_sentences(cfg, base_one, signif)
    return out


# ----------------------------------------------------------------------------- tables
