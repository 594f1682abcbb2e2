"""What a SLURM cluster says of itself: its description for ``hpcbench profile init``
(``sinfo``, ``scontrol``) and the preflight of a job against its partition's limits
(:func:`check_slurm`), with SLURM's time format."""

from __future__ import annotations

import re
from typing import Any

from hpcbench.jobs.schedulers.base import (
    SchedulerError,
)
from hpcbench.jobs.schedulers.commands import run_command, run_process
from hpcbench.jobs.schedulers.errors import RequestRefused, SchedulerUnreachable
from hpcbench.jobs.spec import JobSpec
from hpcbench.jobs.units import format_time_hms


def format_time_slurm(seconds: int) -> str:
    """Seconds as SLURM's ``D-HH:MM:SS`` (or ``HH:MM:SS`` under a day)."""
    days, rest = divmod(seconds, 86400)
    hms = format_time_hms(rest)
    return f"{days}-{hms}" if days else hms


def describe_slurm(partition: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """A profile of this cluster from ``scontrol show partition`` and its nodes: the partition
    (the default one unless named), its nodes' GPUs and cores, the time limit it allows (one
    hour if longer), and whether ``sacct`` answers; notes list every partition's limits."""
    parts = _records(
        run_command(["scontrol", "show", "partition", "-o"], "scontrol show partition")
    )
    if not parts:
        raise SchedulerError("scontrol show partition: no partitions on this cluster")
    names = [p.get("PartitionName", "?") for p in parts]
    if partition is not None and partition not in names:
        raise SchedulerError(
            f"partition {partition!r} does not exist (partitions: {', '.join(names)})"
        )
    chosen = next(
        (p for p in parts if p.get("PartitionName") == partition)
        if partition
        else (p for p in parts if p.get("Default") == "YES"),
        parts[0],
    )
    nodes = _records(
        run_command(
            ["scontrol", "show", "node", "-o", chosen.get("Nodes", "")], "scontrol show node"
        )
    )
    gpus = min((_gpus(n.get("Gres", "")) for n in nodes), default=0)
    cores = min((int(n.get("CPUTot", "0") or 0) for n in nodes), default=0)
    limit = _slurm_seconds(chosen.get("MaxTime", "UNLIMITED"))
    values: dict[str, Any] = {
        "scheduler": "slurm",
        "partition": chosen.get("PartitionName", "?"),
        "gpus_per_node": gpus,
        "time": format_time_slurm(min(limit, 3600) if limit else 3600),
        "sacct": _sacct_answers(),
    }
    if cores:
        values["cores_per_node"] = cores
    notes = [
        f"partition {p.get('PartitionName', '?')}: {p.get('TotalNodes', '?')} node(s), "
        f"MaxNodes={p.get('MaxNodes', '?')}, MaxTime={p.get('MaxTime', '?')}"
        + (" (the default)" if p.get("Default") == "YES" else "")
        for p in parts
    ]
    return values, notes


def _sacct_answers() -> bool:
    """Whether SLURM accounting answers here (a missing sacct is a no)."""
    try:
        return run_process(["sacct", "--noheader", "-X", "-S", "now"], "sacct").returncode == 0
    except SchedulerError:
        return False


# ------------------------------------------------------------------------------ preflight


class PreflightError(RequestRefused):
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


def check_array_size(size: int) -> None:
    """Refuse an array larger than the cluster allows (``MaxArraySize``: indexes up to it less
    one; 1001 by default), before anything is queued."""
    shown = run_command(["scontrol", "show", "config"], "scontrol show config")
    found = re.search(r"^MaxArraySize\s*=\s*(\d+)", shown, re.M)
    if found and size > int(found.group(1)) - 1:
        raise PreflightError(
            f"job array of {size} tasks: this cluster allows at most {int(found.group(1)) - 1} "
            "(MaxArraySize); split the sweep (fewer settings, or --axis) or ask for a larger limit"
        )


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
    part = _partition(_records(shown), r.partition)
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
    _check_nodes_fit(spec, name, part, nodes)
    max_time = _slurm_seconds(part.get("MaxTime", "UNLIMITED"))
    if max_time is not None and r.time_s > max_time:
        raise PreflightError(
            f"--time {format_time_slurm(r.time_s)}: partition {name} allows at most {part.get('MaxTime')} (MaxTime)"
        )
    return name


def _partition(parts: list[dict[str, str]], wanted: str | None) -> dict[str, str]:
    """The partition a job asks for, else the cluster's default one."""
    if not parts:
        raise PreflightError("scontrol show partition: no partitions on this cluster")
    if wanted:
        matching = [p for p in parts if p.get("PartitionName") == wanted]
        if not matching:
            names = ", ".join(p.get("PartitionName", "?") for p in parts)
            raise PreflightError(f"partition {wanted!r} does not exist (partitions: {names})")
        return matching[0]
    return next((p for p in parts if p.get("Default") == "YES"), parts[0])


def _check_nodes_fit(
    spec: JobSpec, name: str, part: dict[str, str], nodes: list[dict[str, str]]
) -> None:
    """The GPUs, CPUs and memory a node of the job asks for fit on as many of the partition's
    nodes as it asks for (compared with the r.nodes-th largest node)."""
    r = spec.resources
    cpus_needed = r.ranks_per_node * r.cpus_per_task

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
