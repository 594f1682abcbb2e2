"""``python -m hpcbench.placement.rank_start [--] PROGRAM [ARGS…]``: bind this rank, then become
its program.

The rank start of launchers that bind nothing themselves (torchrun without ``--numa-binding``, a
direct launch, and every launcher on the local scheduler, whose emulated nodes share one
machine): it reads the placement the batch script asks for (``HPCBENCH_PLACEMENT``: ``auto``, or
one CPU list per local rank), chooses this rank's share of the cores it may use
(:func:`hpcbench.placement.choice.plan_node`; on CPU-only nodes each node's shares start one
node's worth of cores further, so nodes that share a machine do not pile onto its first cores),
binds itself there and sets
``OMP_NUM_THREADS`` to the cores it got, then ``exec``s the program: affinity and environment
carry over, and the program starts its first thread already bound. A placement that cannot be
had (a CPU outside the job's) is one line naming ``launcher.placement`` and exit status 2,
before the program starts.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from hpcbench.environments.base import read_int
from hpcbench.placement.choice import KEYWORDS, parse_explicit, plan_node
from hpcbench.placement.record import (
    BOUND_BY_VARIABLE,
    CPUS_PER_RANK_VARIABLE,
    PLACEMENT_VARIABLE,
    job_gpus,
)
from hpcbench.placement.topology import Topology, TopologyError, format_cpulist, read_topology
from hpcbench.this_rank import detect_launch, job_id

CORE_TURN_VARIABLE = "HPCBENCH_CORE_TURN"


class PlacementError(ValueError):
    """A placement this node cannot give: one line naming the field."""


def _one_machine(env: Mapping[str, str]) -> bool:
    """Every rank of the job on this machine (the local scheduler plays every node here)."""
    return env.get("HPCBENCH_SCHEDULER") == "local"


def choose_cpus(
    env: Mapping[str, str], allowed: frozenset[int], topology: Topology
) -> frozenset[int] | None:
    """This rank's CPUs under the placement ``env`` asks for (None: leave it unbound)."""
    value = env.get(PLACEMENT_VARIABLE, "auto").strip() or "auto"
    if value == "none":
        return None
    info = detect_launch(env)
    if value not in KEYWORDS:
        try:
            shares = parse_explicit(value)
        except TopologyError as err:
            raise PlacementError(f"launcher.placement: {err}") from None
        if info.local_rank >= len(shares):
            raise PlacementError(
                f"launcher.placement names {len(shares)} CPU list(s) and this node runs "
                f"local rank {info.local_rank}: give one list per rank of a node"
            )
        share = shares[info.local_rank]
        outside = share - allowed
        if outside:
            raise PlacementError(
                f"launcher.placement: CPU {format_cpulist(outside)} of local rank "
                f"{info.local_rank} is not among the CPUs this job has on {os.uname().nodename} "
                f"({format_cpulist(allowed)})"
            )
        return share
    one_machine = _one_machine(env)
    slot, slots = (
        (info.rank, info.world_size) if one_machine else (info.local_rank, info.local_world_size)
    )
    gpus = job_gpus(topology, env)
    per_node = max(1, info.local_world_size)
    slot_gpus = [gpus[(s % per_node)] if (s % per_node) < len(gpus) else None for s in range(slots)]
    cores = topology.cores(allowed)
    if slots > cores:
        return None  # more ranks than cores: pinned, they could only take turns on fixed cores
    per_rank = read_int(env, CPUS_PER_RANK_VARIABLE)
    offset = 0
    if not gpus and one_machine:  # jobs sharing a machine that binds nothing for them
        # the turn the batch script chose (hpcbench.placement.least_pinned), else the job id's
        digits = re.sub(r"\D", "", env.get(CORE_TURN_VARIABLE) or job_id(env) or "")
        offset = int(digits[-6:]) if digits else 0
    elif not gpus and info.node_rank:
        # nodes that share one machine (several slurmd on a host, containers as nodes) start at
        # different cores; on a node of its own, a turn by whole shares changes nothing
        size = min(cores // slots, per_rank or cores)
        offset = info.node_rank * slots * max(1, size)
    return plan_node(topology, allowed, slot_gpus, per_rank, offset)[min(slot, slots - 1)]


def bind_this_process(env: dict[str, str] | os._Environ[str]) -> frozenset[int] | None:
    """Bind this process as the placement asks, and set its thread count (the CPUs, or None)."""
    allowed = frozenset(os.sched_getaffinity(0))
    topology = read_topology()
    cpus = choose_cpus(env, allowed, topology)
    if not cpus:
        return None
    os.sched_setaffinity(0, cpus)
    env["OMP_NUM_THREADS"] = str(max(1, topology.cores(cpus)))
    env[BOUND_BY_VARIABLE] = "hpcbench"
    return cpus


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(
            "usage: python -m hpcbench.placement.rank_start [--] PROGRAM [ARGS...]", file=sys.stderr
        )
        return 2
    try:
        bind_this_process(os.environ)
    except PlacementError as err:
        print(f"hpcbench: {err}", file=sys.stderr)
        return 2
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        print(f"hpcbench: cannot start {argv[0]}: {err.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
