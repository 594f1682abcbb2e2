"""The scheduler's accounting of a matrix's runs, per configuration: what each run's
``accounting.json`` says (written by the runner when the job ended, see
:mod:`hpcbench.jobs.accounting`), summarised over the configuration's runs.

- queue wait (submit to start): what many small jobs really cost on a busy cluster;
- the scheduler's elapsed time, and CPU efficiency (seff's: CPU time over elapsed × CPUs);
- the memory high-water mark of the largest rank (MaxRSS), and of all ranks together;
- the energy the scheduler recorded (SLURM's ConsumedEnergy, its nodes' own counters), beside
  hpcbench's own joules as a cross-check: they measure different things (whole nodes or CPU
  packages against the devices a run used), so the ratio is shown, never reconciled.

Where no run has accounting the block says why in one line (the first run's reason).
"""

from __future__ import annotations

from hpcbench.bench import stats
from hpcbench.bench.analysis_types import AccountingBlock, ConfigAnalysis
from hpcbench.bench.reading.results_reader import Run, is_number
from hpcbench.jobs.accounting.records import AccountingJob
from hpcbench.jobs.accounting.usage import cpus_used, hints

#: (key in the block, key of the accounting record's job)
FIGURES = (
    ("queue_wait_s", "queue_wait_s"),
    ("elapsed_s", "elapsed_s"),
    ("cpu_efficiency", "cpu_efficiency"),
    ("max_rss_bytes", "max_rss_bytes"),
    ("memory_used_bytes", "memory_used_bytes"),
    ("scheduler_energy_j", "energy_j"),
)


def accounting_block(runs: list[Run], hpcbench_used_j: float | None) -> AccountingBlock:
    """One configuration's accounting over its runs (every run that has a record)."""
    records = [r.accounting for r in runs if r.accounting]
    found = [a for a in records if a.get("available")]
    if not found:
        reason = next((a.get("reason") for a in records if a.get("reason")), None)
        return {
            "available": False,
            "runs": 0,
            "source": records[0].get("source") if records else None,
            "reason": reason
            or "no accounting was recorded for these runs (results from before hpcbench kept "
            "it, or runs that never started)",
        }
    block: AccountingBlock = {
        "available": True,
        "runs": len(found),
        "source": found[0].get("source"),
        "energy_source": next((a["energy_source"] for a in found if a.get("energy_source")), ""),
        "reason": "",
    }
    states: dict[str, int] = {}
    for a in found:
        state = str(a["job"].get("state") or "?").split()[0]
        states[state] = states.get(state, 0) + 1
    block["states"] = states
    for key, field in FIGURES:
        values = [float(a["job"][field]) for a in found if is_number(a["job"].get(field))]
        block[key] = stats.summarise(values)
    _add_usage(block, [a["job"] for a in found])
    if block["scheduler_energy_j"] is None:
        block["energy_reason"] = next(
            (a.get("energy_reason") for a in found if a.get("energy_reason")), "not recorded"
        )
    sched = block["scheduler_energy_j"]
    block["energy_ratio"] = sched["median"] / hpcbench_used_j if sched and hpcbench_used_j else None
    return block


def _add_usage(block: AccountingBlock, jobs: list[AccountingJob]) -> None:
    """What the configuration's jobs used of what they asked for: the CPUs kept busy on
    average (a statistic over its runs) against those allocated, the memory asked for, and the
    hints for the median run (:mod:`hpcbench.jobs.accounting.usage`)."""
    used = [u for u in (cpus_used(j) for j in jobs) if u is not None]
    block["cpus_used"] = stats.summarise(used)
    block["cpus"] = next((j["cpus"] for j in jobs if isinstance(j.get("cpus"), int)), None)
    block["memory_allocated_bytes"] = next(
        (j["memory_allocated_bytes"] for j in jobs if is_number(j.get("memory_allocated_bytes"))),
        None,
    )
    median = {
        "cpus": block["cpus"],
        "cpu_time_s": block["cpus_used"]["median"] if block["cpus_used"] else None,
        "elapsed_s": 1.0,
        "memory_used_bytes": (block.get("memory_used_bytes") or {}).get("median"),
        "memory_allocated_bytes": block["memory_allocated_bytes"],
    }
    block["hints"] = hints(median)


def queue_sentence(configs: list[ConfigAnalysis]) -> str | None:
    """The matrix's queue wait in words: in all, and as a share of the time its jobs ran."""
    waits = [
        (c["accounting"]["queue_wait_s"], c["accounting"]["elapsed_s"])
        for c in configs
        if c.get("accounting", {}).get("available") and c["accounting"].get("queue_wait_s")
    ]
    if not waits:
        return None
    waited = sum(w["median"] * w["n"] for w, _ in waits)
    ran = sum(e["median"] * e["n"] for _, e in waits if e)
    share = f", {100 * waited / (waited + ran):.0f} % of their time in the cluster" if ran else ""
    return f"the matrix's jobs waited {waited:.0f} s in the queue in all{share} (the scheduler's accounting)"
