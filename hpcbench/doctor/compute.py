"""The doctor's compute step: a short matrix multiply on every rank, its throughput compared
across the job's nodes.

On a GPU a bf16 and an fp32 GEMM (4096 x 4096), on a CPU an fp32 one (512 x 512, on the rank's
own threads), repeated for about ``seconds``. A node is the median of its ranks; a node slower
than ``threshold`` times the median of the nodes is named (one node: its ranks are compared the
same way). The threshold, 0.5: on the shared 2-core machine the tests run on, a healthy rank
measured 0.58 of its peer while other tests loaded the machine (``benchmarks/doctor.py
--calibrate`` prints the spread).
"""

from __future__ import annotations

import statistics
import time
from typing import TypedDict

from hpcbench.doctor.drills import Drills

THRESHOLD = 0.5


class ComputeResult(TypedDict):
    rank: int
    node: str
    device: str
    dtype: str
    gflops: float


def measure(rank: int, node: str, node_index: int, drills: Drills, seconds: float) -> ComputeResult:
    import torch

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    n = 4096 if cuda else 512
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    (a @ b).sum().item()  # warm up
    flops, busy = 0.0, 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        c = a @ b
        if cuda:
            torch.cuda.synchronize(device)
        took = time.perf_counter() - t0
        busy += took
        flops += 2.0 * n**3
        drills.compute_pause(node_index, took)
        del c
    elapsed = time.perf_counter() - start
    return {
        "rank": rank,
        "node": node,
        "device": device.type,
        "dtype": str(dtype).replace("torch.", ""),
        "gflops": flops / elapsed / 1e9,
    }


def findings(results: list[ComputeResult], threshold: float = THRESHOLD) -> tuple[list[str], dict]:
    """The slow nodes (or ranks, on one node) as lines, and each node's figure."""
    by_node: dict[str, list[float]] = {}
    for r in results:
        by_node.setdefault(r["node"], []).append(r["gflops"])
    nodes = {node: statistics.median(v) for node, v in by_node.items()}
    lines = []
    if len(nodes) > 1:
        median = statistics.median(nodes.values())
        for node, value in sorted(nodes.items()):
            if value < threshold * median:
                lines.append(
                    f"compute: node {node} is slow: {value:.1f} GFLOP/s, {value / median:.2f} "
                    f"of the nodes' median {median:.1f}"
                )
    else:
        median = statistics.median(r["gflops"] for r in results)
        for r in results:
            if r["gflops"] < threshold * median:
                lines.append(
                    f"compute: rank {r['rank']} on {r['node']} is slow: {r['gflops']:.1f} "
                    f"GFLOP/s, {r['gflops'] / median:.2f} of the ranks' median {median:.1f}"
                )
    return lines, {"nodes": nodes, "median_gflops": median, "threshold": threshold}
