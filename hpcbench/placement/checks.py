"""What is wrong with where a job's ranks ran: one warning line per kind of problem, naming ranks.

Three problems, each a cost a researcher would not see otherwise: ranks of one machine that share
cores (they slow each other down), a rank whose cores are on another NUMA node than its GPU (every
copy to the GPU crosses the sockets), a rank that runs more compute threads than it has cores
(its threads take turns).
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcbench.placement.record import PlacementRecord
from hpcbench.placement.topology import format_cpulist, parse_cpulist


def _ranks(ranks: Sequence[int]) -> str:
    ordered = sorted(set(ranks))
    return ("rank " if len(ordered) == 1 else "ranks ") + ",".join(map(str, ordered))


def _shared(records: Sequence[PlacementRecord]) -> str | None:
    by_host: dict[str, list[tuple[int, frozenset[int]]]] = {}
    for r in records:
        # one machine: its host (the local scheduler's emulated nodes share it); the nodes of a
        # batch system by their names
        where = r["host"] if ":node" in r.get("node", "") else r.get("node") or r["host"]
        by_host.setdefault(where, []).append((r["rank"], parse_cpulist(r["cpus"])))
    ranks: set[int] = set()
    cores: set[int] = set()
    hosts: list[str] = []
    for host, placed in sorted(by_host.items()):
        found = False
        for i, (rank_a, cpus_a) in enumerate(placed):
            for rank_b, cpus_b in placed[i + 1 :]:
                if cpus_a & cpus_b:
                    ranks.update((rank_a, rank_b))
                    cores.update(cpus_a & cpus_b)
                    found = True
        if found:
            hosts.append(host)
    if not ranks:
        return None
    crowded = len(ranks) > len(cores)  # more ranks than the cores they run on: binding cannot help
    hint = (
        f"{len(ranks)} ranks on {len(cores)} core(s): ask for fewer ranks per node"
        if crowded
        else 'bind each rank to its own cores (launcher.placement = "auto")'
    )
    return (
        f"placement: {_ranks(sorted(ranks))} share cores ({format_cpulist(cores)} on "
        f"{', '.join(hosts)}) with another rank of the job: {hint}"
    )


def _far_from_gpu(records: Sequence[PlacementRecord]) -> str | None:
    far = [
        r
        for r in records
        if r["gpu"] is not None
        and r["gpu"]["numa_node"] is not None
        and r["numa_nodes"]
        and r["gpu"]["numa_node"] not in r["numa_nodes"]
    ]
    if not far:
        return None
    detail = "; ".join(
        f"rank {r['rank']} on NUMA {','.join(map(str, r['numa_nodes']))}, its GPU "
        f"{r['gpu']['index']} on NUMA {r['gpu']['numa_node']}"
        for r in far[:8]
        if r["gpu"] is not None
    )
    return (
        f"placement: {_ranks([r['rank'] for r in far])} run on cores of another NUMA node than "
        f"their GPU ({detail}{'; …' if len(far) > 8 else ''})"
    )


def _too_many_threads(records: Sequence[PlacementRecord]) -> str | None:
    over = [r for r in records if r["threads"] > max(1, r["cores"])]
    if not over:
        return None
    detail = ", ".join(f"rank {r['rank']}: {r['threads']} on {r['cores']}" for r in over[:8])
    return (
        f"placement: {_ranks([r['rank'] for r in over])} run more threads than they have cores "
        f"({detail}{', …' if len(over) > 8 else ''}): set OMP_NUM_THREADS to the cores, or give "
        "each rank more (cpus_per_task)"
    )


def placement_warnings(records: Sequence[PlacementRecord]) -> list[str]:
    """One line per problem found in the ranks' records (none: an empty list)."""
    found = (_shared(records), _far_from_gpu(records), _too_many_threads(records))
    return [line for line in found if line]
