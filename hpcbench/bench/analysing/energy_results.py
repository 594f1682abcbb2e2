"""Energy in a benchmark's results: per configuration, the joules of its energy runs on the
devices they used, with the idle devices of their nodes and net of idle power, per sample, EDP and
ED²P, per kind of device (GPU, CPU packages, DRAM), each with its source, or None with the reason
where a device could not be read; the power traces for the report's figure and the table of
sources. Works from :class:`~hpcbench.bench.reading.results_reader.Results`; opens no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcbench.bench import stats
from hpcbench.bench.analysis_types import ConfigAnalysis, EnergyBlock, KindEnergy
from hpcbench.bench.reading.results_reader import (
    ENERGY_PHASES,
    Results,
    Run,
    is_number,
    phase_times,
    samples_trained,
)
from hpcbench.energy.sampler import IdleDocument
from hpcbench.run_documents import EnergyDevice

# ---------------------------------------------------------------------------------------------
# Small helpers


def _where(host: str, name: str, many_hosts: bool) -> str:
    return f"{host} {name}" if many_hosts else name


def _device_joules(dev: EnergyDevice, window: str) -> float | None:
    if dev.get("method") == "unavailable":
        return None
    if window == "train+val+test":
        phases = dev.get("phases") or {}
        vals = [phases.get(p) for p in ENERGY_PHASES]
        return float(sum(vals)) if all(is_number(v) for v in vals) else None
    total = dev.get("total_j")
    return float(total) if is_number(total) else None


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


def _run_energy(run: Run, idle: dict[tuple[str, str], float] | None) -> _RunEnergy:
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
    times = phase_times(run.metrics)
    out.seconds = times["total"] if window == "train+val+test" else times["total"] + times["setup"]
    out.samples = samples_trained(run.metrics)

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
        period = float(interval) if is_number(interval) else float("nan")
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

    _net_of_idle(out, devices, idle, many)
    return out


def _net_of_idle(
    out: _RunEnergy,
    devices: list[tuple[str, EnergyDevice]],
    idle: dict[tuple[str, str], float] | None,
    many: bool,
) -> None:
    """The run's used joules less the used devices' idle power over its seconds, or why not."""
    if out.used_j is None:
        out.net_reason = out.reason
        return
    if idle is None:
        out.net_reason = "no idle.json (idle power not measured before the matrix)"
        return
    idle_j = 0.0
    for host, dev in devices:
        if not dev.get("used"):
            continue
        watts = idle.get((host, str(dev["name"])))
        if watts is None:
            out.net_reason = (
                f"idle.json has no idle power of {_where(host, str(dev['name']), many)}"
            )
            return
        idle_j += watts * out.seconds
    out.net_j = out.used_j - idle_j


def idle_watts(idle: IdleDocument | None) -> dict[tuple[str, str], float] | None:
    """(host, device) -> idle watts, from ``idle.json``; None where it was not measured."""
    if idle is None:
        return None
    return {
        (str(d.get("host", "?")), str(d.get("name"))): float(d["watts"])
        for d in idle["devices"]
        if isinstance(d, dict) and is_number(d.get("watts"))
    }


def _empty_energy_block() -> EnergyBlock:
    """A configuration's energy block with nothing known yet."""
    return {
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


def energy_block(runs: list[Run], idle: dict[tuple[str, str], float] | None) -> EnergyBlock:
    """A configuration's energy over its completed energy runs: joules on the devices used, with
    the idle devices and net of idle power, per sample, EDP and ED²P, per kind of device, and
    the sources; each None with the reason where a device could not be read."""
    block = _empty_energy_block()
    if not runs:
        block["reason"] = block["with_idle_reason"] = block["net_reason"] = (
            "no completed energy runs"
        )
        return block
    per_run = [_run_energy(r, idle) for r in runs]
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
) -> KindEnergy:
    """Each energy run's joules as used_j, per_sample_j (when every run knows its samples), and
    EDP and ED²P: each run's joules with its own duration (the time they were spent in), the
    median over the runs."""
    out: KindEnergy = {"used_j": stats.summarise(joules), "per_sample_j": None}
    if all(e.samples for e in per_run):
        out["per_sample_j"] = stats.summarise(
            [j / e.samples for j, e in zip(joules, per_run, strict=True) if e.samples]
        )
    out["edp"] = float(np.median([t * j for t, j in zip(seconds, joules, strict=True)]))
    out["ed2p"] = float(np.median([t * t * j for t, j in zip(seconds, joules, strict=True)]))
    return out


KIND_NAMES = {"gpu": "GPU", "cpu": "CPU packages", "dram": "DRAM"}


def kind_name(kind: str) -> str:
    """The words for a kind of device (gpu -> GPU)."""
    return KIND_NAMES.get(kind, kind)


def _kinds_block(per_run: list[_RunEnergy], seconds: list[float]) -> dict[str, KindEnergy]:
    """Per kind of used device (gpu, cpu, dram): its joules, per sample, EDP and ED²P over the
    energy runs, or None with the reason where a device of that kind could not be read in one
    of them. A kind that was read is reported even when another kind was not."""
    kinds = sorted({k for e in per_run for k in e.kind_j}, key=lambda k: (k not in KIND_NAMES, k))
    out: dict[str, KindEnergy] = {}
    for kind in kinds:
        entry: KindEnergy = {"available": False, "reason": ""}
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


def _partial_sentence(by_kind: dict[str, KindEnergy]) -> str:
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


def normalise_energy(configs: list[ConfigAnalysis], base: str | None) -> None:
    """Each configuration's EDP and ED²P (also per kind) as a multiple of ``base``'s."""
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


def energy_sources(results: Results) -> list[list[str]]:
    """Every device any completed energy run sampled or could not: config, host, device, kind,
    method, period, used, reason (one row per distinct device and method)."""
    rows: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for run in results.runs:
        if run.kind != "energy" or run.status != "completed":
            continue
        energy = run.energy
        if not isinstance(energy, dict):
            row = [
                run.config,
                "–",
                "–",
                "–",
                "unavailable",
                "–",
                "–",
                f"no energy.json in {run.record.get('run_dir')}",
            ]
        else:
            for node in energy.get("nodes") or []:
                for dev in node.get("devices") or []:
                    period = dev.get("interval_s", energy.get("interval_s"))
                    row = [
                        run.config,
                        str(node.get("host")),
                        str(dev.get("name")),
                        str(dev.get("kind")),
                        str(dev.get("method")),
                        f"{period:g}\u00a0s" if isinstance(period, (int, float)) else "–",
                        "yes" if dev.get("used") else "no",
                        str(dev.get("reason") or ""),
                    ]
                    if tuple(row) not in seen:
                        seen.add(tuple(row))
                        rows.append(row)
            continue
        if tuple(row) not in seen:
            seen.add(tuple(row))
            rows.append(row)
    return rows
