"""What a job used of what it asked for, from its accounting record (seff's figures, in words):
the CPUs it kept busy on average against those allocated, the memory its ranks held at their
peak against the memory allocated, and a hint where it asked for far more than it used.

Read by ``hpcbench status --verbose`` (:mod:`.text`) and the benchmark report's accounting
section. Where the batch system does not say a figure, nothing is guessed."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcbench.jobs.accounting.records import AccountingJob

#: below these shares of what was asked a job gets a hint (seff's own report flags such jobs)
LOW_CPU_SHARE = 0.5
LOW_MEMORY_SHARE = 0.25
#: jobs this small are not worth a hint: one or two CPUs, under a GiB
HINT_MIN_CPUS = 3
HINT_MIN_MEMORY_BYTES = 1 << 30


def _number(value: Any) -> bool:
    """A finite number (never a bool, NaN or infinity from a record)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def cpus_used(job: AccountingJob) -> float | None:
    """The CPUs the job kept busy on average: its CPU time over its elapsed time."""
    cpu, elapsed = job.get("cpu_time_s"), job.get("elapsed_s")
    if not _number(cpu) or not _number(elapsed) or elapsed <= 0:
        return None
    return float(cpu) / float(elapsed)


def _size(value: float) -> str:
    if value >= 1 << 30:
        return f"{value / (1 << 30):.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


def usage_lines(job: AccountingJob) -> list[str]:
    """One line for the CPUs, one for the memory, where the record says them: "asked for 8
    CPUs, used 1.9 on average (24 %)"."""
    lines = []
    used, cpus = cpus_used(job), job.get("cpus")
    if used is not None and isinstance(cpus, int) and cpus > 0:
        lines.append(
            f"asked for {cpus} CPUs, used {used:.1f} on average ({100 * used / cpus:.0f} %)"
        )
    held, asked = job.get("memory_used_bytes"), job.get("memory_allocated_bytes")
    if _number(held) and _number(asked) and asked > 0:
        lines.append(
            f"asked for {_size(asked)} of memory, the ranks held {_size(held)} at their peak "
            f"({100 * held / asked:.0f} %)"
        )
    return lines


def hints(job: AccountingJob) -> list[str]:
    """What to ask for instead, where the job asked for far more than it used."""
    found = []
    used, cpus = cpus_used(job), job.get("cpus")
    if (
        used is not None
        and isinstance(cpus, int)
        and cpus >= HINT_MIN_CPUS
        and used < LOW_CPU_SHARE * cpus
    ):
        found.append(
            f"it kept {used:.1f} of its {cpus} CPUs busy: ask for fewer (--cpus-per-task), or "
            "give each rank the threads it was given (OMP_NUM_THREADS, the trainer's --threads)"
        )
    held, asked = job.get("memory_used_bytes"), job.get("memory_allocated_bytes")
    if (
        _number(held)
        and _number(asked)
        and asked >= HINT_MIN_MEMORY_BYTES
        and held < LOW_MEMORY_SHARE * asked
    ):
        found.append(
            f"its ranks held {_size(held)} of the {_size(asked)} asked for: ask for less "
            "memory (--mem), leaving the rest to other jobs"
        )
    return found
