"""The doctor's findings as a few lines: one per step, then each finding."""

from __future__ import annotations

from typing import Any


def _step_detail(name: str, step: dict[str, Any]) -> str:
    if name == "launch" and "nodes" in step:
        nodes = step["nodes"]
        return f"{sum(len(r) for r in nodes.values())} rank(s) on {len(nodes)} node(s)"
    if name == "placement" and "ranks" in step:
        bound = {r["bound_by"] for r in step["ranks"]}
        return f"cores {', '.join(r['cpus'] for r in step['ranks'][:8])}; bound by {', '.join(sorted(bound))}"
    if name == "compute" and "nodes" in step:
        return f"median {step['median_gflops']:.1f} GFLOP/s per node"
    if name == "communication" and "sweeps" in step:
        peaks = {}
        for s in step["sweeps"]:
            kind = s["group"].split()[0]
            peaks[kind] = min(peaks.get(kind, s["peak_gbps"]), s["peak_gbps"])
        shown = ", ".join(f"{k} {v:.2f} GB/s" for k, v in peaks.items())
        return f"{step['backend']}: {shown or 'one rank: nothing to measure'}"
    if name == "filesystem" and "alone_mbps" in step:
        alone = step["alone_mbps"]
        together = step["together_mbps"]
        return (
            f"read alone {', '.join(f'{v:.0f}' for v in alone.values())} MB/s, together "
            f"{', '.join(f'{v:.0f}' for v in together.values() if v is not None)} MB/s"
        )
    return ""


def summary_lines(document: dict[str, Any]) -> list[str]:
    nodes = document["nodes"]
    verdict = "healthy" if document["healthy"] else f"{len(document['findings'])} finding(s)"
    lines = [
        f"hpcbench doctor: {document['world_size']} rank(s) on {len(nodes)} node(s), "
        f"job {document['job_id'] or '-'}: {verdict}"
    ]
    for name, step in document["steps"].items():
        seconds = f"{step['seconds']:5.1f} s" if "seconds" in step else "      "
        lines.append(f"  {name:<14}{step['status']:<11}{seconds}  {_step_detail(name, step)}")
    lines += [f"  - {line}" for line in document["findings"]]
    if not document["baseline"]:
        lines.append(f"  (no baseline for {document['cluster']} yet: a healthy run becomes it)")
    return lines
