"""The report's placement: where each configuration's ranks ran (its first completed run's
ranks: node, CPUs, cores, NUMA nodes, GPU, threads, who bound them), and every run's placement
warnings (ranks sharing cores, far from their GPU, with more threads than cores), naming the
runs and the ranks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpcbench.bench.reporting.document import Block, Bullets, Heading, Para, Table
from hpcbench.files import printable

#: the ranks shown per configuration, at most (the rest are in each run's metrics.json)
MAX_RANKS = 16


def _row(p: dict[str, Any]) -> list[str]:
    gpu = p.get("gpu")
    return [
        str(p.get("rank")),
        printable(str(p.get("node") or p.get("host")))[:64],
        printable(str(p.get("cpus")))[:64],
        str(p.get("cores")),
        ",".join(str(n) for n in p.get("numa_nodes") or []) or "–",
        "–" if not gpu else f"{gpu.get('index')} (NUMA {gpu.get('numa_node')})",
        str(p.get("threads")),
        printable(str(p.get("bound_by")))[:16],
    ]


def placement_blocks(runs: Sequence[Any]) -> list[Block]:
    """The placement subsection (nothing where no run recorded one)."""
    shown: dict[str, list[dict[str, Any]]] = {}
    warnings: list[str] = []
    for run in runs:
        prov = (run.metrics or {}).get("provenance") or {}
        placed = prov.get("placement")
        if not isinstance(placed, list) or not placed:
            continue
        if run.status == "completed" and run.config not in shown:
            shown[run.config] = [p for p in placed if isinstance(p, dict)][:MAX_RANKS]
        for line in prov.get("placement_warnings") or []:
            warnings.append(f"{run.config}, {run.kind} run {run.rep}: {printable(str(line))[:300]}")
    if not shown:
        return []
    blocks: list[Block] = [Heading(3, "Placement", "placement")]
    if warnings:
        blocks += [Para(f"{len(warnings)} placement warning(s):", "warn"), Bullets(warnings)]
    else:
        blocks.append(Para("Every rank ran on cores of its own, near its GPU where it had one."))
    header = ["rank", "node", "CPUs", "cores", "NUMA", "GPU", "threads", "bound by"]
    for config, placed in shown.items():
        blocks += [Para(f"{config}:"), Table(header, [_row(p) for p in placed], numeric={0, 3, 6})]
    return blocks
