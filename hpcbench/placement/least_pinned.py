"""``python -m hpcbench.placement.least_pinned``: where on this machine a job whose nodes all
share it should start binding its ranks, printed as the turn of its core order (0 … cores−1).

The local scheduler's ranks are bound by hpcbench's rank start, and several jobs may run on the
machine at once (a sweep's tasks, two users, a test suite): each pinned process keeps its cores,
so two jobs that both start at the first core take turns on it while another core idles (two
single-rank jobs started together ran 1.4 times as long as unbound). The batch script asks this
once, before its ranks start: the cores are counted by the processes already pinned to them (a
user process whose affinity is a strict part of the machine's CPUs; kernel threads, each CPU's
own, are not counted), and the job starts at the core the fewest hold. A tie goes to a turn of
this process's id, so jobs started in the same instant (whose ranks are not pinned yet) still
spread, whatever their job ids. Reads ``/proc/*/status`` only (bounded, a vanished process
skipped); where this cannot run, the rank start turns by the job id instead."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from hpcbench.placement.choice import ordered_cores
from hpcbench.placement.topology import TopologyError, parse_cpulist, read_topology

MAX_STATUS_BYTES = 8192


def pinned_counts(proc: Path, machine: frozenset[int]) -> dict[int, int]:
    """CPU -> how many processes are pinned to it (their affinity a strict part of ``machine``)."""
    counts = dict.fromkeys(machine, 0)
    for status in proc.glob("[0-9]*/status"):
        try:
            with status.open("rb") as f:
                text = f.read(MAX_STATUS_BYTES).decode("ascii", "replace")
        except OSError:
            continue  # ended between the glob and the read, or not ours to read
        m = re.search(r"^Cpus_allowed_list:\s*(\S+)", text, re.MULTILINE)
        if not m or "\nVmSize:" not in text:
            continue  # a kernel thread (no memory of its own): every CPU has its own
        try:
            allowed = parse_cpulist(m.group(1)) & machine
        except TopologyError:
            continue
        if allowed and allowed != machine:
            for cpu in allowed:
                counts[cpu] += 1
    return counts


def least_pinned_turn(cores: list[tuple[int, ...]], counts: dict[int, int], tie: int) -> int:
    """The turn of ``cores`` that starts at the core the fewest pinned processes hold."""
    if not cores:
        return 0
    load = [sum(counts.get(cpu, 0) for cpu in core) for core in cores]
    n = len(cores)
    return (min(range(n), key=lambda i: (load[(i + tie) % n], i)) + tie) % n


def main() -> int:
    machine = frozenset(os.sched_getaffinity(0))
    topology = read_topology()
    cores = ordered_cores(topology, machine)
    tie = os.getpid() % max(1, len(cores))  # jobs of one id (two state directories) too
    print(least_pinned_turn(cores, pinned_counts(Path("/proc"), machine), tie))
    return 0


if __name__ == "__main__":
    sys.exit(main())
