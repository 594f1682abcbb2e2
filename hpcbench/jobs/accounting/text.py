"""An accounting record in a few lines, for ``hpcbench status --verbose`` and ``submit --wait``."""

from __future__ import annotations

from hpcbench.jobs.accounting.records import AccountingRecord
from hpcbench.jobs.accounting.usage import hints, usage_lines


def _mib(value: int | None) -> str:
    if value is None:
        return "?"
    if value >= 1 << 30:
        return f"{value / (1 << 30):.2f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


def _secs(value: float | None) -> str:
    if value is None:
        return "?"
    if value < 10 and value != int(value):
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def describe(record: AccountingRecord) -> list[str]:
    """The record in a few lines for ``hpcbench status --verbose``."""
    source = f"(from {record.get('source')})"
    if not record.get("available"):
        return [f"accounting: none {source}: {record.get('reason') or 'not recorded'}"]
    job = record["job"]
    lines = [
        f"accounting {source}: {job.get('state') or '?'}"
        + (f" exit {job['exit_code']}" if job.get("exit_code") is not None else "")
        + f"; queued {_secs(job.get('queue_wait_s'))}, ran {_secs(job.get('elapsed_s'))}"
        + (f" on {job['nodelist']}" if job.get("nodelist") else "")
    ]
    cpu = f"  CPU: {job.get('cpus') or '?'} allocated, {_secs(job.get('cpu_time_s'))} used"
    if job.get("cpu_efficiency") is not None:
        cpu += f", efficiency {100 * job['cpu_efficiency']:.1f} %"
    lines.append(cpu)
    mem = f"  memory: high-water {_mib(job.get('max_rss_bytes'))} per rank (MaxRSS)"
    if job.get("max_vmsize_bytes") is not None:
        mem += f", virtual {_mib(job['max_vmsize_bytes'])}"
    if job.get("memory_efficiency") is not None:
        mem += (
            f"; all ranks {_mib(job.get('memory_used_bytes'))}, "
            f"{100 * job['memory_efficiency']:.1f} % of the {_mib(job.get('memory_allocated_bytes'))}"
            " allocated"
        )
    lines.append(mem)
    lines += [f"  used: {line}" for line in usage_lines(job)]
    lines += [f"  hint: {hint}" for hint in hints(job)]
    if job.get("energy_j") is not None:
        said = record.get("energy_source") or "the scheduler's record"
        lines.append(f"  energy: {job['energy_j']:.0f} J ({said})")
    else:
        lines.append(f"  energy: not known ({record.get('energy_reason') or 'not gathered'})")
    for step in record.get("steps") or []:
        lines.append(
            f"  step {step.get('step')}: {step.get('state') or '?'}, "
            f"{_secs(step.get('elapsed_s'))}, {step.get('tasks') or '?'} task(s), "
            f"MaxRSS {_mib(step.get('max_rss_bytes'))}"
            + (f" (task {step['max_rss_task']})" if step.get("max_rss_task") is not None else "")
        )
    lines += [f"  note: {note}" for note in record.get("notes") or []]
    return lines
