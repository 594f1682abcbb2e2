"""The report's sections on what the scheduler recorded (its accounting of every run's job) and
on the carbon and cost estimates from the configured factors."""

from __future__ import annotations

from typing import Any

from hpcbench.bench.analysis_types import AccountingBlock, Analysis, ConfigAnalysis, Factors
from hpcbench.bench.reading.results_documents import EstimateFactors
from hpcbench.bench.reporting.document import Block, Bullets, Para, Table
from hpcbench.bench.reporting.formatting import fmt_joules, fmt_stat, num


def _pct(stat: Any) -> str:
    return fmt_stat(stat, "%", 100.0)


def _mib(stat: Any) -> str:
    return fmt_stat(stat, "MiB", 1.0 / (1 << 20))


def accounting_blocks(analysis: Analysis) -> list[Block]:
    """Per configuration: queue wait, elapsed time, CPU efficiency, memory high-water marks and
    the scheduler's energy beside hpcbench's; one line where there is no accounting."""
    configs = analysis.get("configs", [])
    found = [c for c in configs if (c.get("accounting") or {}).get("available")]
    missing = [c for c in configs if not (c.get("accounting") or {}).get("available")]
    blocks: list[Block] = []
    if found:
        sources = sorted({str(c["accounting"]["source"]) for c in found})
        energy = sorted({str(c["accounting"].get("energy_source") or "") for c in found} - {""})
        energy_sources = f" ({', '.join(energy)})" if energy else ""
        blocks.append(
            Para(
                f"From the scheduler's own accounting ({', '.join(sources)}), read when each "
                "run's job ended and kept as accounting.json in its run directory; median over the "
                "configuration's runs with its 95 % interval. Queue wait = submit to start (what "
                "many small jobs cost on a busy cluster); elapsed = the scheduler's start to end; "
                "CPU efficiency = CPU time ÷ (elapsed × allocated CPUs), as seff computes it, "
                "and CPUs used of asked = CPU time ÷ elapsed of those allocated; "
                "MaxRSS = the resident memory high-water mark of the largest rank; all ranks = the "
                "largest step's sum of its ranks' peaks (seff's memory utilised). Scheduler energy "
                "is what the cluster's own counters recorded for the job's nodes"
                f"{energy_sources}, hpcbench's the devices a run used (energy runs): they measure "
                "different things, so their ratio is a cross-check, not a correction."
            )
        )
        blocks.append(_accounting_table(found))
    # each reason once, under the configurations it holds for
    said = _by_reason(missing, "reason", "no scheduler accounting")
    said += _by_reason(
        [c for c in found if not c["accounting"].get("scheduler_energy_j")],
        "energy_reason",
        "no scheduler energy",
    )
    said += [f"{c['name']}: hint: {h}" for c in found for h in c["accounting"].get("hints") or []]
    if said:
        blocks.append(Bullets(said))
    return blocks


def _accounting_table(found: list[ConfigAnalysis]) -> Table:
    """The accounting of each configuration that has one, a row each."""
    rows = []
    for c in found:
        a = c["accounting"]
        energy = c.get("energy") or {}
        rows.append(
            [
                str(c["name"]),
                str(a["runs"]),
                ", ".join(f"{k} {v}" for k, v in (a.get("states") or {}).items()) or "–",
                fmt_stat(a.get("queue_wait_s"), "s"),
                fmt_stat(a.get("elapsed_s"), "s"),
                _pct(a.get("cpu_efficiency")),
                _cpus(a),
                _mib(a.get("max_rss_bytes")),
                _mib(a.get("memory_used_bytes")),
                fmt_joules(a.get("scheduler_energy_j")),
                fmt_joules(energy.get("used_j")) if energy.get("available") else "–",
                num(a.get("energy_ratio")),
            ]
        )
    return Table(
        [
            "configuration",
            "runs",
            "states",
            "queue wait",
            "elapsed",
            "CPU efficiency",
            "CPUs used of asked",
            "MaxRSS (largest rank)",
            "memory, all ranks",
            "scheduler energy",
            "hpcbench energy (used)",
            "scheduler / hpcbench",
        ],
        rows,
        numeric={1, *range(3, 12)},
    )


def _cpus(block: AccountingBlock) -> str:
    """ "1.9 of 8": the CPUs kept busy on average (median over the runs) of those allocated."""
    used, cpus = block.get("cpus_used"), block.get("cpus")
    if not used or not cpus:
        return "–"
    return f"{used['median']:.1f} of {cpus}"


def _by_reason(configs: list[ConfigAnalysis], key: str, what: str) -> list[str]:
    reasons: dict[str, list[str]] = {}
    for c in configs:
        reason = (c.get("accounting") or {}).get(key) or "not recorded"
        reasons.setdefault(reason, []).append(str(c["name"]))
    return [f"{', '.join(names)}: {what}: {why}" for why, names in reasons.items()]


def _factor_words(factors: EstimateFactors, sources: dict[str, str]) -> list[str]:
    names = {
        "carbon_intensity": ("carbon intensity", "gCO2e/kWh"),
        "pue": ("PUE", ""),
        "price_per_kwh": ("price per kWh", ""),
        "price_per_node_hour": ("price per node-hour", ""),
        "price_per_gpu_hour": ("price per GPU-hour", ""),
        "currency": ("currency", ""),
    }
    return [
        f"{names[k][0]} {v:g}{' ' + names[k][1] if names[k][1] else ''} "
        f"(from {sources.get(k, '?')})"
        if not isinstance(v, str)
        else f"{names[k][0]} {v} (from {sources.get(k, '?')})"
        for k, v in factors.items()
        if k in names
    ]


def estimate_blocks(analysis: Analysis, factors: Factors) -> list[Block]:
    """Estimated CO2e and cost per run and per configuration, labelled as estimates."""
    configs = [c for c in analysis.get("configs", []) if c.get("estimates")]
    if not configs:
        return []
    currency = configs[0]["estimates"].get("currency") or ""
    blocks: list[Block] = [
        Para(
            "Estimates, not measurements: the energy hpcbench measured on the devices a run used, "
            "× the data centre's PUE, × the factors below; the allocation's cost from node- and "
            "GPU-hours (the scheduler's elapsed time where its accounting says, else the run's "
            "set-up and work). Per configuration = per run (median) × its completed runs. A "
            "figure resting on energy is – where the energy is not known (no energy runs, or "
            "not measured)."
        ),
        Bullets(_factor_words(factors.get("values") or {}, factors.get("sources") or {})),
    ]
    rows = []
    for c in configs:
        e = c["estimates"]
        one, every = e["per_run"], e["per_config"]
        rows.append(
            [
                str(c["name"]),
                num(one["facility_kwh"] * 1000) if one["facility_kwh"] is not None else "–",
                num(one["co2e_g"]),
                num(one["energy_cost"]),
                num(one["allocation_cost"]),
                str(e["runs"]),
                num(every["co2e_g"]),
                num(_sum(every["energy_cost"], every["allocation_cost"])),
            ]
        )
    cur = f" ({currency})" if currency else ""
    blocks.append(
        Table(
            [
                "configuration",
                "facility Wh / run",
                "gCO2e / run (est.)",
                f"energy cost / run{cur} (est.)",
                f"allocation cost / run{cur} (est.)",
                "runs",
                "gCO2e, all runs (est.)",
                f"cost, all runs{cur} (est.)",
            ],
            rows,
            numeric=set(range(1, 8)),
        )
    )
    return blocks


def _sum(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
