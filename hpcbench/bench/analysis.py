"""What a benchmark results directory says: the analysis behind ``hpcbench report`` and
``hpcbench compare``. Pure Python and numpy (no torch); the statistics are in
:mod:`hpcbench.bench.stats`, the method in docs/benchmarking.md.

- :func:`load_results`: ``bench.json``, ``runs.json``, every completed run's ``metrics.json``
  and (energy runs) ``energy.json``, and ``idle.json``; :class:`AnalysisError`, one line naming
  the file, for anything that is not a results directory of ``hpcbench bench``;
- :func:`analyse`: per configuration, over its repetitions (timing runs for times, accuracy and
  throughput; energy runs for energy): phase times, speedups, efficiency, Karp–Flatt, accuracy,
  energy and EDP, the differences from the one-device baseline and sentences saying it in words;
- :func:`write_tables`: the analysis as CSV files; :func:`compare`: what changed between two
  results directories.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.atomic import write_atomically
from hpcbench.bench import stats

BENCH_FORMAT = "hpcbench-bench/1"
RUNS_FORMAT = "hpcbench-runs/1"
ENERGY_FORMAT = "hpcbench-energy/1"
PHASES = ("total", "setup", "train", "val", "test")
# The total time of a run: the measured work, set-up excluded (MLPerf's rule, as the trainer's
# throughput); set-up is reported as a phase of its own.
TOTAL_PHASES = ("train_s", "val_s", "test_s")
ENERGY_PHASES = ("train", "val", "test")  # the same window, for a device's joules


class AnalysisError(ValueError):
    """A results directory the analysis cannot read: one line naming the file and the fault."""


@dataclass
class Run:
    """One run of the matrix as ``runs.json`` records it, with what its run directory holds
    (completed runs only: ``metrics``; energy runs also ``energy``, None when absent)."""

    config: str
    kind: str
    rep: int
    status: str
    run_dir: Path
    error: str = ""
    metrics: dict[str, Any] | None = None
    energy: dict[str, Any] | None = None


@dataclass
class Results:
    """A results directory of ``hpcbench bench``, read and checked."""

    directory: Path
    bench: dict[str, Any]
    runs: list[Run] = field(default_factory=list)
    idle: dict[str, Any] | None = None

    @property
    def matrix(self) -> dict[str, Any]:
        return self.bench["matrix"]


# ----------------------------------------------------------------------------- loading


def _read_json(path: Path, hint: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AnalysisError(f"{path}: missing; {hint}") from None
    except OSError as err:
        raise AnalysisError(f"{path}: cannot read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise AnalysisError(f"{path}: not JSON (not UTF-8 text, byte {err.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise AnalysisError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    except ValueError as err:  # json's own int(): a number of more than 4300 digits
        raise AnalysisError(f"{path}: not JSON ({err})") from None
    except RecursionError:
        raise AnalysisError(f"{path}: not JSON that hpcbench wrote (nested too deeply)") from None


def _is_number(value: Any) -> bool:
    """A finite number (JSON lets NaN and Infinity through; they are never a measurement)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_bench(path: Path, bench: Any) -> None:
    if not isinstance(bench, dict) or bench.get("format") != BENCH_FORMAT:
        got = bench.get("format") if isinstance(bench, dict) else type(bench).__name__
        raise AnalysisError(f"{path}: format is {got!r}, not {BENCH_FORMAT!r}")
    matrix = bench.get("matrix")
    if not isinstance(matrix, dict) or not isinstance(matrix.get("configs"), list):
        raise AnalysisError(f'{path}: no "matrix" with a list of "configs"')
    names = set()
    for i, cfg in enumerate(matrix["configs"]):
        if not isinstance(cfg, dict) or not isinstance(cfg.get("name"), str):
            raise AnalysisError(f'{path}: matrix.configs[{i}] has no "name"')
        devices = cfg.get("devices")
        if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
            raise AnalysisError(
                f'{path}: config {cfg["name"]!r}: "devices" must be a whole number ≥ 1, '
                f"not {devices!r}"
            )
        names.add(cfg["name"])
    for key in ("baseline_cpu", "baseline_one_device"):
        base = matrix.get(key)
        if base is not None and base not in names:
            raise AnalysisError(f"{path}: matrix.{key} {base!r} is not one of the configs")


def _check_metrics(path: Path, metrics: Any) -> None:
    if not isinstance(metrics, dict) or not isinstance(metrics.get("phases"), dict):
        raise AnalysisError(f'{path}: no "phases" (not a metrics.json of hpcbench train)')
    for key in ("setup_s", *TOTAL_PHASES):
        value = metrics["phases"].get(key)
        if not _is_number(value) or value < 0 or (key == "train_s" and value == 0):
            raise AnalysisError(
                f"{path}: phases.{key} is {value!r}, not a finite number of seconds >= 0"
            )
    if not isinstance(metrics.get("run"), dict):
        raise AnalysisError(f'{path}: no "run" (not a metrics.json of hpcbench train)')


def _check_energy(path: Path, energy: Any) -> None:
    if not isinstance(energy, dict) or energy.get("format") != ENERGY_FORMAT:
        got = energy.get("format") if isinstance(energy, dict) else type(energy).__name__
        raise AnalysisError(f"{path}: format is {got!r}, not {ENERGY_FORMAT!r}")
    if not isinstance(energy.get("nodes"), list):
        raise AnalysisError(f'{path}: no list of "nodes"')
    for node in energy["nodes"]:
        if not isinstance(node, dict) or not isinstance(node.get("devices"), list):
            raise AnalysisError(f'{path}: a node without a list of "devices"')
        for dev in node["devices"]:
            if not isinstance(dev, dict) or "name" not in dev or "method" not in dev:
                raise AnalysisError(f'{path}: a device without "name" and "method"')
            if not isinstance(dev.get("phases") or {}, dict) or not isinstance(
                dev.get("samples") or [], list
            ):
                raise AnalysisError(f"{path}: device {dev['name']!r}: phases or samples malformed")
        if not isinstance(node.get("host", ""), str):
            raise AnalysisError(f"{path}: a node whose host is not a name")


def inside(results: Path, rel: Any) -> Path | None:
    """``results/rel`` if it stays inside ``results`` (a run_dir is data, not a free path: an
    absolute one, ``..`` or a link out of the directory gives None)."""
    if not isinstance(rel, str) or not rel:
        return None
    p = (results / rel).resolve()
    try:
        p.relative_to(results.resolve())
    except ValueError:
        return None
    return p


def load_results(results_dir: str | Path) -> Results:
    """Read a results directory of ``hpcbench bench``; :class:`AnalysisError` (one line, naming
    the file) when it is not one, or when a completed run's ``metrics.json`` is missing or has
    no phases. Pending, running and failed runs are kept (they are counted) without files."""
    directory = Path(results_dir)
    if not directory.is_dir():
        raise AnalysisError(f"{directory}: not a directory (give the results directory)")
    bench_path = directory / "bench.json"
    bench = _read_json(bench_path, "not a results directory of hpcbench bench")
    _check_bench(bench_path, bench)
    names = {cfg["name"] for cfg in bench["matrix"]["configs"]}

    runs_path = directory / "runs.json"
    doc = _read_json(runs_path, "the matrix has not started")
    if not isinstance(doc, dict) or doc.get("format") != RUNS_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise AnalysisError(f"{runs_path}: format is {got!r}, not {RUNS_FORMAT!r}")
    if not isinstance(doc.get("runs"), list):
        raise AnalysisError(f'{runs_path}: no list of "runs"')

    results = Results(directory=directory, bench=bench)
    for i, rec in enumerate(doc["runs"]):
        if not isinstance(rec, dict) or not all(
            k in rec for k in ("config", "kind", "rep", "status", "run_dir")
        ):
            raise AnalysisError(
                f"{runs_path}: runs[{i}] lacks one of config, kind, rep, status, run_dir"
            )
        if not isinstance(rec["config"], str) or rec["config"] not in names:
            raise AnalysisError(
                f"{runs_path}: runs[{i}]: config {rec['config']!r} is not in the matrix"
            )
        if not isinstance(rec["rep"], int) or isinstance(rec["rep"], bool):
            raise AnalysisError(f"{runs_path}: runs[{i}]: rep {rec['rep']!r} is not a whole number")
        if rec["kind"] not in ("timing", "energy"):
            raise AnalysisError(
                f"{runs_path}: runs[{i}]: kind {rec['kind']!r} is not timing or energy"
            )
        run_dir = rec["run_dir"]
        if run_dir is not None and not isinstance(run_dir, str):
            raise AnalysisError(f"{runs_path}: runs[{i}]: run_dir {run_dir!r} is not a path")
        if rec["status"] == "completed" and not run_dir:
            raise AnalysisError(f"{runs_path}: runs[{i}]: completed without a run_dir")
        if run_dir and inside(directory, run_dir) is None:
            raise AnalysisError(
                f"{runs_path}: runs[{i}]: run_dir {run_dir!r} is not inside the results "
                "directory (bench writes relative paths under it)"
            )
        run = Run(
            config=rec["config"],
            kind=rec["kind"],
            rep=rec["rep"],
            status=str(rec["status"]),
            # pending runs and runs never submitted have no directory; they are only counted
            run_dir=directory / run_dir if run_dir else directory,
            error=str(rec.get("error") or ""),
        )
        if run.status == "completed":
            mpath = run.run_dir / "metrics.json"
            run.metrics = _read_json(mpath, "the run is recorded as completed")
            _check_metrics(mpath, run.metrics)
            epath = run.run_dir / "energy.json"
            if run.kind == "energy" and epath.exists():
                run.energy = _read_json(epath, "")
                _check_energy(epath, run.energy)
        results.runs.append(run)

    idle_path = directory / "idle.json"
    if idle_path.exists():
        idle = _read_json(idle_path, "")
        if not isinstance(idle, dict) or not isinstance(idle.get("devices"), list):
            raise AnalysisError(f'{idle_path}: no list of "devices"')
        results.idle = idle
    return results


# ----------------------------------------------------------------------------- per run


def _phase_times(metrics: dict[str, Any]) -> dict[str, float]:
    ph = metrics["phases"]
    times = {p: float(ph[f"{p}_s"]) for p in ("setup", "train", "val", "test")}
    times["total"] = sum(float(ph[k]) for k in TOTAL_PHASES)
    return times


def _samples_trained(metrics: dict[str, Any]) -> int | None:
    run = metrics["run"]
    try:
        n = int(run["epochs"]) * int(run["steps_per_epoch"]) * int(run["global_batch"])
    except (KeyError, TypeError, ValueError):
        return None
    return n or None


def _where(host: str, name: str, many_hosts: bool) -> str:
    return f"{host} {name}" if many_hosts else name


def _device_joules(dev: dict[str, Any], window: str) -> float | None:
    if dev.get("method") == "unavailable":
        return None
    if window == "train+val+test":
        phases = dev.get("phases") or {}
        vals = [phases.get(p) for p in ENERGY_PHASES]
        return float(sum(vals)) if all(_is_number(v) for v in vals) else None
    total = dev.get("total_j")
    return float(total) if _is_number(total) else None


@dataclass
class _RunEnergy:
    used_j: float | None = None
    with_idle_j: float | None = None
    net_j: float | None = None
    seconds: float = 0.0
    samples: int | None = None
    reason: str = ""
    with_idle_reason: str = ""
    net_reason: str = ""
    window: str = ""
    sources: list[str] = field(default_factory=list)
    source_groups: dict[tuple[str, float], list[str]] = field(default_factory=dict)
    kind_j: dict[str, float | None] = field(default_factory=dict)  # used devices, per kind
    kind_reason: dict[str, str] = field(default_factory=dict)  # why a kind's is None


def _run_energy(run: Run, idle_watts: dict[tuple[str, str], float] | None) -> _RunEnergy:
    """One energy run's joules on the devices it used, on all devices of its nodes, and net of
    the used devices' idle power; each None with the reason when a device is unavailable."""
    out = _RunEnergy()
    where = f"{run.run_dir.name} of {run.config}"
    if run.energy is None:
        out.reason = out.with_idle_reason = out.net_reason = f"no energy.json in {where}"
        return out
    devices = [
        (node.get("host", "?"), dev) for node in run.energy["nodes"] for dev in node["devices"]
    ]
    many = len({h for h, _ in devices}) > 1
    measured = [d for _, d in devices if d.get("method") != "unavailable"]
    window = "train+val+test"
    if not measured or any(_device_joules(d, window) is None for d in measured):
        window = "whole run"
    out.window = window
    assert run.metrics is not None
    times = _phase_times(run.metrics)
    out.seconds = times["total"] if window == "train+val+test" else times["total"] + times["setup"]
    out.samples = _samples_trained(run.metrics)

    used: list[float] = []
    every: list[float] = []
    for host, dev in devices:
        name = _where(host, str(dev["name"]), many)
        interval = dev.get("interval_s", run.energy.get("interval_s"))
        is_used = bool(dev.get("used"))
        joules = _device_joules(dev, window)
        kind = str(dev.get("kind") or "other")
        if is_used and out.kind_j.get(kind, 0.0) is not None:
            out.kind_j[kind] = None if joules is None else out.kind_j.get(kind, 0.0) + joules
        if joules is None:
            why = dev.get("reason") or "no energy figure"
            fault = f"{name} unavailable ({why}) in {where}"
            out.sources.append(f"unavailable ({name}: {why})")
            out.with_idle_reason = out.with_idle_reason or fault
            if is_used:
                out.reason = out.reason or fault
                out.kind_reason.setdefault(kind, why)
            continue
        period = float(interval) if _is_number(interval) else float("nan")
        out.sources.append(
            f"{dev['method']} ({name}, {period:g} s{'' if is_used else ', not used'})"
        )
        out.source_groups.setdefault((str(dev["method"]), period), []).append(
            name if is_used else f"{name} (not used)"
        )
        every.append(joules)
        if is_used:
            used.append(joules)
    if not any(d.get("used") for _, d in devices):
        out.reason = out.reason or f"no device marked as used in the energy.json of {where}"
    if not out.reason:
        out.used_j = sum(used)
    if not out.with_idle_reason:
        out.with_idle_j = sum(every)

    if out.used_j is None:
        out.net_reason = out.reason
    elif idle_watts is None:
        out.net_reason = "no idle.json (idle power not measured before the matrix)"
    else:
        idle_j = 0.0
        for host, dev in devices:
            if not dev.get("used"):
                continue
            watts = idle_watts.get((host, str(dev["name"])))
            if watts is None:
                out.net_reason = (
                    f"idle.json has no idle power of {_where(host, str(dev['name']), many)}"
                )
                break
            idle_j += watts * out.seconds
        else:
            out.net_j = out.used_j - idle_j
    return out


def _idle_watts(idle: dict[str, Any] | None) -> dict[tuple[str, str], float] | None:
    if idle is None:
        return None
    return {
        (str(d.get("host", "?")), str(d.get("name"))): float(d["watts"])
        for d in idle["devices"]
        if isinstance(d, dict) and _is_number(d.get("watts"))
    }


# ----------------------------------------------------------------------------- analysis


def _energy_block(
    runs: list[Run], idle_watts: dict[tuple[str, str], float] | None
) -> dict[str, Any]:
    block: dict[str, Any] = {
        "available": False,
        "reason": "",
        "with_idle_reason": "",
        "net_reason": "",
        "window": "",
        "sources": [],
        "source_groups": [],
        **{k: None for k in ("used_j", "with_idle_j", "net_j", "per_sample_j")},
        **{k: None for k in ("seconds", "edp", "ed2p", "edp_with_idle", "ed2p_with_idle")},
        **{k: None for k in ("edp_norm", "edp_with_idle_norm", "ed2p_norm", "ed2p_with_idle_norm")},
    }
    if not runs:
        block["reason"] = block["with_idle_reason"] = block["net_reason"] = (
            "no completed energy runs"
        )
        return block
    per_run = [_run_energy(r, idle_watts) for r in runs]
    block["window"] = ", ".join(sorted({e.window for e in per_run if e.window}))
    block["sources"] = sorted({s for e in per_run for s in e.sources})
    groups: dict[tuple[str, float], set[str]] = {}
    for e in per_run:
        for key, names in e.source_groups.items():
            groups.setdefault(key, set()).update(names)
    block["source_groups"] = [
        {"method": m, "interval_s": p, "devices": sorted(names)}
        for (m, p), names in sorted(groups.items())
    ]
    block["seconds"] = stats.summarise([e.seconds for e in per_run])

    def every_run(attr: str, reason_attr: str) -> list[float] | None:
        missing = [getattr(e, reason_attr) for e in per_run if getattr(e, attr) is None]
        if missing:
            block[reason_attr] = missing[0]
            return None
        return [getattr(e, attr) for e in per_run]

    used = every_run("used_j", "reason")
    with_idle = every_run("with_idle_j", "with_idle_reason")
    net = every_run("net_j", "net_reason")
    seconds = [e.seconds for e in per_run]
    if used is not None:
        block["available"] = True
        block.update(_joule_figures(used, seconds, per_run))
    if with_idle is not None:
        block["with_idle_j"] = stats.summarise(with_idle)
        block["edp_with_idle"] = float(
            np.median([t * j for t, j in zip(seconds, with_idle, strict=True)])
        )
        block["ed2p_with_idle"] = float(
            np.median([t * t * j for t, j in zip(seconds, with_idle, strict=True)])
        )
    if net is not None:
        block["net_j"] = stats.summarise(net)
    block["by_kind"] = _kinds_block(per_run, seconds)
    block["partial"] = _partial_sentence(block["by_kind"]) if not block["available"] else ""
    return block


def _joule_figures(
    joules: list[float], seconds: list[float], per_run: list[_RunEnergy]
) -> dict[str, Any]:
    """Each energy run's joules as used_j, per_sample_j (when every run knows its samples), and
    EDP and ED²P: each run's joules with its own duration (the time they were spent in), the
    median over the runs."""
    out: dict[str, Any] = {"used_j": stats.summarise(joules), "per_sample_j": None}
    if all(e.samples for e in per_run):
        out["per_sample_j"] = stats.summarise(
            [j / e.samples for j, e in zip(joules, per_run, strict=True) if e.samples]
        )
    out["edp"] = float(np.median([t * j for t, j in zip(seconds, joules, strict=True)]))
    out["ed2p"] = float(np.median([t * t * j for t, j in zip(seconds, joules, strict=True)]))
    return out


KIND_NAMES = {"gpu": "GPU", "cpu": "CPU packages", "dram": "DRAM"}


def kind_name(kind: str) -> str:
    return KIND_NAMES.get(kind, kind)


def _kinds_block(per_run: list[_RunEnergy], seconds: list[float]) -> dict[str, dict[str, Any]]:
    """Per kind of used device (gpu, cpu, dram): its joules, per sample, EDP and ED²P over the
    energy runs, or None with the reason where a device of that kind could not be read in one
    of them. A kind that was read is reported even when another kind was not."""
    kinds = sorted({k for e in per_run for k in e.kind_j}, key=lambda k: (k not in KIND_NAMES, k))
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        entry: dict[str, Any] = {"available": False, "reason": ""}
        entry.update({k: None for k in ("used_j", "per_sample_j", "edp", "ed2p")})
        entry.update({k: None for k in ("edp_norm", "ed2p_norm")})
        joules = [e.kind_j.get(kind) for e in per_run]
        if any(j is None for j in joules):
            entry["reason"] = next(
                (e.kind_reason[kind] for e in per_run if kind in e.kind_reason),
                "not used in every energy run",
            )
        else:
            entry["available"] = True
            entry.update(
                _joule_figures([float(j) for j in joules if j is not None], seconds, per_run)
            )
        out[kind] = entry
    return out


def _partial_sentence(by_kind: dict[str, dict[str, Any]]) -> str:
    """'GPU energy only: CPU packages unreadable (why)' where some kinds were read and others
    not; '' otherwise."""
    read = [k for k, e in by_kind.items() if e["available"]]
    unread = [k for k, e in by_kind.items() if not e["available"]]
    if not read or not unread:
        return ""
    return (
        f"{' and '.join(kind_name(k) for k in read)} energy only: "
        + "; ".join(f"{kind_name(k)} unreadable ({by_kind[k]['reason']})" for k in unread)
        + "; the totals over all devices are not known"
    )


def _normalise_energy(configs: list[dict[str, Any]], base: str | None) -> None:
    ref = next((c["energy"] for c in configs if c["name"] == base), None)
    for cfg in configs:
        en = cfg["energy"]
        for key in ("edp", "ed2p", "edp_with_idle", "ed2p_with_idle"):
            if ref is not None and en[key] is not None and ref[key]:
                en[f"{key}_norm"] = en[key] / ref[key]
        for kind, entry in en.get("by_kind", {}).items():
            theirs = (ref or {}).get("by_kind", {}).get(kind) or {}
            for key in ("edp", "ed2p"):
                if entry[key] is not None and theirs.get(key):
                    entry[f"{key}_norm"] = entry[key] / theirs[key]


def _accuracy(runs: list[Run]) -> dict[str, Any]:
    finals = [
        float(r.metrics["test"]["accuracy"])
        for r in runs
        if r.metrics
        and isinstance(r.metrics.get("test"), dict)
        and _is_number(r.metrics["test"].get("accuracy"))
    ]
    by_epoch: dict[int, list[float]] = {}
    for r in runs:
        for row in (r.metrics or {}).get("epochs") or []:
            if isinstance(row, dict) and _is_number(row.get("val_accuracy")):
                by_epoch.setdefault(int(row["epoch"]), []).append(float(row["val_accuracy"]))
    return {
        "final": stats.summarise(finals),
        "per_epoch": [[e, float(np.median(v))] for e, v in sorted(by_epoch.items())],
    }


def _speedup(name: str, base: str | None, times: dict[str, list[float]]) -> dict | None:
    if base is None or not times.get(base) or not times.get(name):
        return None
    if name == base:
        return {"value": 1.0, "ci95": [1.0, 1.0]}
    return stats.ratio_of_medians(times[base], times[name])


def analyse(results: Results) -> dict[str, Any]:
    """The analysis of a results directory (JSON-able; the layout in docs/benchmarking.md)."""
    matrix = results.matrix
    base_cpu = matrix.get("baseline_cpu")
    base_one = matrix.get("baseline_one_device")
    by_name = {c["name"]: c for c in matrix["configs"]}
    idle_watts = _idle_watts(results.idle)

    def completed(name: str, kind: str) -> list[Run]:
        return [
            r
            for r in results.runs
            if r.config == name and r.kind == kind and r.status == "completed"
        ]

    timing = {c["name"]: completed(c["name"], "timing") for c in matrix["configs"]}
    phase_values = {
        name: {p: [_phase_times(r.metrics)[p] for r in runs if r.metrics] for p in PHASES}
        for name, runs in timing.items()
    }
    totals = {n: v["total"] for n, v in phase_values.items()}
    trains = {n: v["train"] for n, v in phase_values.items()}

    configs: list[dict[str, Any]] = []
    for cfg in matrix["configs"]:
        name, devices = cfg["name"], int(cfg["devices"])
        runs = [r for r in results.runs if r.config == name]
        world = next((r.metrics["run"].get("world_size") for r in timing[name] if r.metrics), None)
        s_cpu = _speedup(name, base_cpu, totals)
        s_one = _speedup(name, base_one, totals)
        s_one_train = _speedup(name, base_one, trains)
        # parallel efficiency compares like with like: the same kind of device as the baseline
        comparable = base_one is not None and by_name[base_one].get("device") == cfg.get("device")
        configs.append(
            {
                "name": name,
                "devices": devices,
                "device": cfg.get("device"),
                "strategy": cfg.get("strategy"),
                "world_size": world,
                "runs": {
                    "completed": sum(r.status == "completed" for r in runs),
                    "failed": sum(r.status == "failed" for r in runs),
                    "timing": len(timing[name]),
                    "energy": len(completed(name, "energy")),
                },
                "time": {p: stats.summarise(phase_values[name][p]) for p in PHASES},
                "speedup_vs_cpu": s_cpu,
                "speedup_vs_one_device": s_one,
                "speedup_train_vs_one_device": s_one_train,
                "efficiency": stats.scaled(s_one, 1.0 / devices) if comparable else None,
                "efficiency_train": stats.scaled(s_one_train, 1.0 / devices)
                if comparable
                else None,
                "karp_flatt": stats.karp_flatt_est(s_one, devices) if comparable else None,
                "karp_flatt_train": stats.karp_flatt_est(s_one_train, devices)
                if comparable
                else None,
                "accuracy": _accuracy(timing[name]),
                "throughput": stats.summarise(
                    [
                        float(r.metrics["throughput"]["train_samples_per_s"])
                        for r in timing[name]
                        if r.metrics
                        and _is_number(
                            (r.metrics.get("throughput") or {}).get("train_samples_per_s")
                        )
                    ]
                ),
                "energy": _energy_block(completed(name, "energy"), idle_watts),
            }
        )
    _normalise_energy(configs, base_one)
    differences = _differences(configs, base_one)
    analysis = {
        "name": matrix.get("name"),
        "baselines": {"cpu": base_cpu, "one_device": base_one},
        "configs": configs,
        "differences": differences,
        # energy runs asked for: without them the report has no energy sections at all
        "energy_asked": int(matrix.get("energy_repetitions") or 0) > 0,
    }
    analysis["sentences"] = sentences(analysis)
    return analysis


def _differences(configs: list[dict[str, Any]], base: str | None) -> list[dict[str, Any]]:
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


def too_short(cfg: dict[str, Any]) -> str | None:
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


def sentences(analysis: dict[str, Any]) -> list[str]:
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
            out.append(text)
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
            out.append(text)
    if not analysis.get("energy_asked", True):
        return out
    for cfg in analysis["configs"]:
        name, en = cfg["name"], cfg["energy"]
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
            continue
        if not en["available"]:
            out.append(f"{name}: energy not known: {en['reason']}")
            continue
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


# ----------------------------------------------------------------------------- tables


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


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _stat_change(label: str, a: dict | None, b: dict | None, unit: str) -> str | None:
    if a is None or b is None or not stats.significantly_different(a, b):
        return None
    ratio = f" ({b['median'] / a['median']:.2f}×)" if a["median"] else ""
    return (
        f"{label}: {_num(a['median'])}{unit} → {_num(b['median'])}{unit}{ratio}; "
        "the 95 % intervals do not overlap"
    )


def compare(a_dir: str | Path, b_dir: str | Path) -> list[str]:
    """What changed from results directory ``a_dir`` to ``b_dir``, one finding a line:
    configurations added or removed, a changed configuration or matrix setting, each metric
    whose 95 % intervals do not overlap, provenance that differs. Empty: nothing changed."""
    ra, rb = load_results(a_dir), load_results(b_dir)
    aa, ab = analyse(ra), analyse(rb)
    ca = {c["name"]: c for c in aa["configs"]}
    cb = {c["name"]: c for c in ab["configs"]}
    findings: list[str] = []
    findings += [f"config {n} added" for n in cb if n not in ca]
    findings += [f"config {n} removed" for n in ca if n not in cb]

    ma, mb = ra.matrix, rb.matrix
    for key in sorted((set(ma) | set(mb)) - {"configs", "name"}):
        if ma.get(key) != mb.get(key):
            findings.append(f"matrix {key}: {ma.get(key)!r} → {mb.get(key)!r}")
    defs_a = {c["name"]: c for c in ma["configs"]}
    defs_b = {c["name"]: c for c in mb["configs"]}
    for name in (n for n in defs_a if n in defs_b):
        for key in sorted(set(defs_a[name]) | set(defs_b[name])):
            if defs_a[name].get(key) != defs_b[name].get(key):
                findings.append(
                    f"config {name} {key}: {defs_a[name].get(key)!r} → {defs_b[name].get(key)!r}"
                )

    for name in (n for n in ca if n in cb):
        a, b = ca[name], cb[name]
        checks = [
            (f"{name} {p} time", a["time"][p], b["time"][p], " s") for p in ("total", "train")
        ]
        checks.append((f"{name} throughput", a["throughput"], b["throughput"], " samples/s"))
        checks.append((f"{name} test accuracy", a["accuracy"]["final"], b["accuracy"]["final"], ""))
        checks.append((f"{name} energy", a["energy"]["used_j"], b["energy"]["used_j"], " J"))
        for label, sa, sb, unit in checks:
            found = _stat_change(label, sa, sb, unit)
            if found:
                findings.append(found)
        if a["energy"]["available"] != b["energy"]["available"]:
            state = (
                "measured" if b["energy"]["available"] else f"not known ({b['energy']['reason']})"
            )
            findings.append(f"{name} energy: now {state}")
        ka, kb = a["energy"].get("by_kind") or {}, b["energy"].get("by_kind") or {}
        for kind in sorted(set(ka) | set(kb)):
            was, now = ka.get(kind) or {}, kb.get(kind) or {}
            if bool(was.get("available")) != bool(now.get("available")):
                state = (
                    "measured"
                    if now.get("available")
                    else f"not known ({now.get('reason') or 'not used'})"
                )
                findings.append(f"{name} {kind_name(kind)} energy: now {state}")
            elif was.get("available"):
                found = _stat_change(
                    f"{name} {kind_name(kind)} energy", was["used_j"], now["used_j"], " J"
                )
                if found:
                    findings.append(found)

    pa, pb = ra.bench.get("provenance") or {}, rb.bench.get("provenance") or {}
    for key in sorted(set(pa) | set(pb)):
        if pa.get(key) != pb.get(key):
            findings.append(f"provenance {key}: {pa.get(key)!r} → {pb.get(key)!r}")
    return findings
