"""Preflight: refuse a SLURM request the partition can never satisfy, before anything is queued.

sbatch accepts many impossible requests and leaves them PENDING forever (PartitionNodeLimit,
"Requested node configuration is not available" only for some). This reads the partition once
(``scontrol show partition -o``) and its nodes once (``scontrol show node -o``) and compares the
job's nodes, GPUs per node, CPUs per node, memory per node and time with the limits, quoting the
limit in the error. A partition that does not exist is refused the same way.
"""

from __future__ import annotations

import re

from hpcbench.schedulers.base import SchedulerError, SchedulerUnreachable, run_command
from hpcbench.spec import JobSpec, format_time_slurm


class PreflightError(SchedulerError):
    """The request exceeds what the partition allows (the message quotes the limit)."""


class ControllerUnreachable(PreflightError, SchedulerUnreachable):
    """SLURM's commands are installed but no slurmctld answers them."""


def _records(text: str) -> list[dict[str, str]]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        rec = {}
        for m in re.finditer(r"(\S+?)=(\S*)", line):
            rec.setdefault(m.group(1), m.group(2))
        out.append(rec)
    return out


def _slurm_seconds(text: str) -> int | None:
    """SLURM time limit text -> seconds (None for UNLIMITED/INFINITE)."""
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def _gpus(gres: str) -> int:
    total = 0
    for item in gres.split(","):
        m = re.match(r"gpu(?::[^:(]+)?:(\d+)", item)
        if m:
            total += int(m.group(1))
    return total


def check_slurm(spec: JobSpec) -> str:
    """Raise PreflightError if the partition cannot run ``spec``; return the partition name."""
    r = spec.resources
    try:
        shown = run_command(["scontrol", "show", "partition", "-o"], "scontrol show partition")
    except SchedulerError as err:
        if "contact slurm controller" not in str(err):
            raise
        raise ControllerUnreachable(
            f"{err}: SLURM is installed here but no controller answers; to run on this machine "
            "instead, add --scheduler local"
        ) from None
    parts = _records(shown)
    if not parts:
        raise PreflightError("scontrol show partition: no partitions on this cluster")
    if r.partition:
        matching = [p for p in parts if p.get("PartitionName") == r.partition]
        if not matching:
            names = ", ".join(p.get("PartitionName", "?") for p in parts)
            raise PreflightError(f"partition {r.partition!r} does not exist (partitions: {names})")
        part = matching[0]
    else:
        part = next((p for p in parts if p.get("Default") == "YES"), parts[0])
    name = part.get("PartitionName", "?")
    if part.get("State", "UP") not in ("UP",):
        raise PreflightError(f"partition {name} is {part.get('State')}")
    nodes = _records(
        run_command(["scontrol", "show", "node", "-o", part.get("Nodes", "")], "scontrol show node")
    )
    total = int(part.get("TotalNodes", len(nodes)) or len(nodes))
    max_nodes = part.get("MaxNodes", "UNLIMITED")
    limit_nodes = total if not max_nodes.isdigit() else min(total, int(max_nodes))
    if r.nodes > limit_nodes:
        why = (
            f"MaxNodes={max_nodes}"
            if max_nodes.isdigit() and int(max_nodes) < total
            else f"TotalNodes={total}"
        )
        raise PreflightError(
            f"--nodes {r.nodes}: partition {name} allows at most {limit_nodes} ({why})"
        )
    cpus_needed = r.ranks_per_node * r.cpus_per_task

    # the request must fit on r.nodes nodes: compare with the r.nodes-th largest node
    def kth(values: list[int]) -> int:
        values = sorted(values, reverse=True)
        return values[min(r.nodes, len(values)) - 1] if values else 0

    gpus = kth([_gpus(n.get("Gres", "")) for n in nodes])
    if r.gpus_per_node > gpus:
        raise PreflightError(
            f"--gpus-per-node {r.gpus_per_node}: the nodes of partition {name} have at most {gpus} GPU(s) (Gres)"
        )
    cpus = kth([int(n.get("CPUTot", "0") or 0) for n in nodes])
    max_cpn = part.get("MaxCPUsPerNode", "UNLIMITED")
    if max_cpn.isdigit():
        cpus = min(cpus, int(max_cpn))
    if cpus and cpus_needed > cpus:
        raise PreflightError(
            f"{r.ranks_per_node} rank(s) x {r.cpus_per_task} CPU(s) = {cpus_needed} CPUs per node: partition {name}'s nodes have {cpus} (CPUTot)"
        )
    if r.memory_mb:
        mem = kth([int(n.get("RealMemory", "0") or 0) for n in nodes])
        max_mem = part.get("MaxMemPerNode", "UNLIMITED")
        if max_mem.isdigit():
            mem = min(mem, int(max_mem))
        if mem and r.memory_mb > mem:
            raise PreflightError(
                f"--mem {r.memory_mb}M: partition {name}'s nodes have {mem}M (RealMemory)"
            )
    max_time = _slurm_seconds(part.get("MaxTime", "UNLIMITED"))
    if max_time is not None and r.time_s > max_time:
        raise PreflightError(
            f"--time {format_time_slurm(r.time_s)}: partition {name} allows at most {part.get('MaxTime')} (MaxTime)"
        )
    return name
