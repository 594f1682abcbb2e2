"""The doctor's communication step: all-reduce bus bandwidth within and across nodes.

Bus bandwidth as nccl-tests defines it: ``bytes x 2(n-1)/n / seconds`` for an all-reduce of n
ranks, over message sizes from 1 KiB up to ``max_bytes`` (256 MiB on GPUs, 16 MiB on CPUs by
default), over the backend the job's strategy uses (NCCL on GPUs, gloo on CPUs, MPI through
mpi4py when asked). Within each node (its ranks, where it has several) and across the job (every
rank). With several nodes, each pair of nodes' first ranks is tested alone too, so that a slow
link or a slow node's network is named: the node in every slow pair, or the pair itself.
Every collective runs under the process group's timeout, the step's.
"""

from __future__ import annotations

import itertools
import os
import socket
import statistics
import time
from datetime import timedelta
from typing import Any, TypedDict

from hpcbench.doctor.drills import Drills

KIB = 1024
CPU_MAX_BYTES = 16 * 1024 * KIB
GPU_MAX_BYTES = 256 * 1024 * KIB
MAX_PAIRS = 36  # nine nodes; beyond, the pairs of the slowest nodes only


class Sweep(TypedDict):
    group: str  # "world", "node <name>", "pair <a> <b>"
    ranks: list[int]
    sizes: list[int]
    busbw_gbps: list[float]  # GB/s at each size
    peak_gbps: float


def sizes_up_to(max_bytes: int) -> list[int]:
    sizes, size = [], KIB
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    return sizes or [KIB]


def _iterations(size: int) -> int:
    return 20 if size <= 1024 * KIB else 5 if size <= 4096 * KIB else 3


def init_group(backend: str, rank: int, world: int, rendezvous: tuple[str, int], timeout: float):
    """torch.distributed's process group of ``backend``, or MPI's world for ``mpi``."""
    if backend == "mpi":
        from hpcbench.doctor.mpi_collectives import MpiCollectives

        return MpiCollectives(rank, world)
    import torch.distributed as dist

    if not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = rendezvous[0], str(rendezvous[1])
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout)
    )
    return dist


def free_rendezvous() -> tuple[str, int]:
    """Rank 0's host and a port free on it now, for the other ranks (through the meeting)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return socket.gethostname(), s.getsockname()[1]


def sweep(
    dist: Any,
    group: Any,
    label: str,
    ranks: list[int],
    sizes: list[int],
    device: Any,
    delay: Any,
) -> Sweep:
    """One group's all-reduce sweep (every member calls it; ``delay(seconds)`` after each call,
    with the time the call took)."""
    import torch

    n = len(ranks)
    figures = []
    for size in sizes:
        buf = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        dist.all_reduce(buf, group=group)  # warm up: connections made
        iters = _iterations(size)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        took = 0.0
        for _ in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(buf, group=group)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            once = time.perf_counter() - t0
            took += once
            delay(once)
        seconds = took / iters
        factor = 2 * (n - 1) / n if n > 1 else 1.0
        figures.append(size * factor / seconds / 1e9 if seconds > 0 else 0.0)
    return {
        "group": label,
        "ranks": ranks,
        "sizes": sizes,
        "busbw_gbps": figures,
        "peak_gbps": max(figures) if figures else 0.0,
    }


def run_sweeps(
    dist: Any,
    rank: int,
    nodes: list[tuple[str, list[int]]],
    max_bytes: int,
    device: Any,
    drills: Drills,
) -> list[Sweep]:
    """Every sweep this rank takes part in (rank 0 gets the world's and every group's figures
    from the members that measured them: each sweep's first rank reports it)."""
    sizes = sizes_up_to(max_bytes)
    node_of = {r: i for i, (_, members) in enumerate(nodes) for r in members}
    mine = node_of[rank]
    out: list[Sweep] = []
    world = [r for _, members in nodes for r in members]

    def delay_for(crosses: bool):
        return lambda took: drills.link_pause(mine, crosses, took)

    for name, members in nodes:  # within each node: every rank makes every group, in order
        group = dist.new_group(members) if len(members) > 1 else None
        if group is not None and rank in members:
            out.append(sweep(dist, group, f"node {name}", members, sizes, device, delay_for(False)))
    if len(world) > 1:
        out.append(sweep(dist, None, "world", world, sizes, device, delay_for(len(nodes) > 1)))
    leaders = [members[0] for _, members in nodes]
    for a, b in list(itertools.combinations(range(len(nodes)), 2))[:MAX_PAIRS]:
        pair = [leaders[a], leaders[b]]
        group = dist.new_group(pair)
        if rank in pair:
            label = f"pair {nodes[a][0]} {nodes[b][0]}"
            out.append(sweep(dist, group, label, pair, sizes[-1:], device, delay_for(True)))
    return [s for s in out if s["ranks"][0] == rank]


def node_names(sweeps: list[Sweep]) -> list[str]:
    """The nodes the pairs name, in order."""
    names: list[str] = []
    for s in sweeps:
        if s["group"].startswith("pair "):
            names += [n for n in s["group"].split()[1:] if n not in names]
    return names


def findings(
    sweeps: list[Sweep], baseline: dict[str, float], threshold: float, backend: str = ""
) -> tuple[list[str], dict[str, float]]:
    """Lines naming what is slow against this cluster's baseline (by group kind), and the figure
    of each kind this run measured (what the baseline keeps). MPI's figures are kept apart
    (``mpi-world``…): the same fabric gives MPI and gloo different bandwidths."""
    figures: dict[str, float] = {}
    prefix = "mpi-" if backend == "mpi" else ""
    for s in sweeps:
        kind = prefix + s["group"].split()[0]
        figures.setdefault(kind, s["peak_gbps"])
        figures[kind] = min(figures[kind], s["peak_gbps"])
    lines = []
    pairs = [s for s in sweeps if s["group"].startswith("pair ")]
    if pairs and len(pairs) >= 3:
        median = statistics.median(p["peak_gbps"] for p in pairs)
        slow = [p for p in pairs if p["peak_gbps"] < threshold * median]
        counts: dict[str, int] = {}
        for p in slow:
            for node in p["group"].split()[1:]:
                counts[node] = counts.get(node, 0) + 1
        for node, count in sorted(counts.items()):
            if count >= 2:
                lines.append(
                    f"communication: node {node}'s links are slow: {count} of its pairs below "
                    f"{threshold:.2f} of the pairs' median {median:.2f} GB/s"
                )
    for s in sweeps:
        kind = s["group"].split()[0]
        known = baseline.get(prefix + kind)
        if (
            known
            and s["peak_gbps"] < threshold * known
            and not any(
                s["group"].split()[1:] and n in line
                for line in lines
                for n in s["group"].split()[1:]
            )
        ):
            members = s["group"].split()[1:]
            if kind == "world":
                names = [name for name in node_names(sweeps)]
                where = (
                    f"the link between {names[0]} and {names[1]}"
                    if len(names) == 2
                    else "across the job's nodes"
                )
            else:
                where = (
                    f"within node {members[0]}"
                    if kind == "node"
                    else (f"the link between {members[0]} and {members[1]}")
                )
            lines.append(
                f"communication: {where}: {s['peak_gbps']:.2f} GB/s bus bandwidth, "
                f"{s['peak_gbps'] / known:.2f} of this cluster's baseline {known:.2f}"
            )
    return lines, figures
