"""Which cores each rank of a node gets: its own share, on its GPU's NUMA node.

:func:`plan_node` splits the cores a node's ranks may use (their affinity: the job's cgroup or
cpuset) into one share per rank. Ranks with a GPU share out the cores of their GPU's NUMA node
among themselves (two GPUs on one NUMA node: its cores halved between their ranks); ranks with no
GPU, or whose GPU's NUMA node holds none of the allowed cores, share what is left. Each share is a
run of whole cores (a core's hardware threads stay together), at most ``per_rank`` cores (the
spec's ``cpus_per_task``) where the node has that many for every rank. More ranks than cores: each
rank gets one core, round the cores, and the overlap is left for :mod:`.checks` to name.
:func:`parse_explicit` reads an explicit placement (``"0-3;4-7"``: one CPU list per local rank).
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcbench.placement.topology import Gpu, Topology, TopologyError, parse_cpulist

#: the placement keywords; anything else is an explicit placement
KEYWORDS = ("auto", "none")
MAX_EXPLICIT = 4096


def ordered_cores(topology: Topology, allowed: frozenset[int]) -> list[tuple[int, ...]]:
    """The allowed CPUs grouped by core (its hardware threads together), in NUMA then CPU order."""
    by_core: dict[int, list[int]] = {}
    for cpu in sorted(allowed):
        by_core.setdefault(topology.core_of.get(cpu, cpu), []).append(cpu)
    numa_of_cpu = {c: n for n, held in topology.numa_nodes.items() for c in held}
    return sorted(
        (tuple(cpus) for cpus in by_core.values()),
        key=lambda cpus: (numa_of_cpu.get(cpus[0], 0), cpus[0]),
    )


def _split(cores: list[tuple[int, ...]], ranks: int, per_rank: int | None) -> list[frozenset[int]]:
    if not cores:
        return [frozenset() for _ in range(ranks)]
    if len(cores) < ranks:  # more ranks than cores: one core each, round the cores
        return [frozenset(cores[i % len(cores)]) for i in range(ranks)]
    size = len(cores) // ranks
    if per_rank:
        size = min(size, per_rank)
    return [
        frozenset(c for core in cores[i * size : (i + 1) * size] for c in core)
        for i in range(ranks)
    ]


def plan_node(
    topology: Topology,
    allowed: frozenset[int],
    gpus: Sequence[Gpu | None],
    per_rank: int | None = None,
    offset: int = 0,
) -> list[frozenset[int]]:
    """One share of ``allowed`` per rank of the node (``gpus[i]``: local rank i's GPU, or None).
    ``offset`` turns the order of the cores (a machine shared by several jobs, none bound to
    anything: their ranks spread out instead of all starting at core 0)."""
    ranks = len(gpus)
    cores = ordered_cores(topology, allowed)
    if offset and cores:
        k = offset % len(cores)
        cores = cores[k:] + cores[:k]
    shares: list[frozenset[int] | None] = [None] * ranks
    used: set[int] = set()
    by_numa: dict[int, list[int]] = {}
    for i, gpu in enumerate(gpus):
        if gpu is not None and gpu.numa_node is not None:
            by_numa.setdefault(gpu.numa_node, []).append(i)
    for node, ranks_there in sorted(by_numa.items()):
        held = topology.numa_nodes.get(node, frozenset())
        near = [core for core in cores if core[0] in held]
        if not near:
            continue  # its NUMA node holds none of the allowed cores: the rest below
        for i, share in zip(ranks_there, _split(near, len(ranks_there), per_rank), strict=True):
            shares[i] = share
            used.update(share)
    rest = [i for i in range(ranks) if shares[i] is None]
    if rest:
        free = [core for core in cores if core[0] not in used] or cores
        for i, share in zip(rest, _split(free, len(rest), per_rank), strict=True):
            shares[i] = share
    return [s or frozenset() for s in shares]


def parse_explicit(value: str) -> list[frozenset[int]]:
    """An explicit placement: one CPU list per local rank, separated by ``;`` (``"0-3;4-7"``)."""
    lists = [part.strip() for part in value.split(";")]
    if not lists or any(not part for part in lists):
        raise TopologyError(
            f"{value!r}: expected auto, none, or one CPU list per rank of a node, "
            "separated by ';' (e.g. 0-3;4-7)"
        )
    shares = [parse_cpulist(part) for part in lists]
    if any(max(s) >= MAX_EXPLICIT for s in shares):
        raise TopologyError(f"{value!r} names a CPU above {MAX_EXPLICIT - 1}")
    return shares
