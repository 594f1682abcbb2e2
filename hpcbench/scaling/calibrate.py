"""The scaling model's calibration, run inside an allocation under ``mpiexec`` or ``srun``:
``mpiexec -n P python -m hpcbench.scaling --model resnet18 --out calibration.json``.

Two measurements on the user's own nodes (:mod:`hpcbench.scaling.model` turns them into
predictions):

1. **Compute**: the trainer's own step (:func:`hpcbench.train.loop.train_step`: forward, loss,
   backward, finite check, fused optimiser) of the model on random inputs of the given shape, at
   each per-rank batch, timed ``--steps`` times after two warm-ups, on as many ranks per node as
   the node has cores for (``cores ÷ threads``; the cores the job was given) at once, so that
   they share memory bandwidth as training does; the others wait, asleep. Every step starts on
   all of them together and counts as long as the slowest rank's (as a synchronous step does:
   ranks that drift apart by noise wait for each other). Kept: each batch's median step; and
   the share of it that is backward.
2. **All-reduce**: float32 sums through MPI (mpi4py, the mpi strategy's library) and through
   torch.distributed's gloo (DDP on CPUs; nccl on GPU nodes), for message sizes from 4 bytes to
   the model's gradient size, over 2, 3, … P ranks (beyond 8, powers of two and P). The ranks
   of each size are taken across nodes first (one per node, then a second per node, …), so with
   several nodes the links between them are measured. Kept: each (ranks, bytes)'s median, the
   slowest rank's.

Rank 0 writes the JSON atomically: the model, its parameter sizes (from which the buckets
follow), the machine (nodes, ranks per node, cores, threads, device), the compute timings and
the all-reduce timings per backend.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SIZES = [4, 64, 1024, 16 << 10, 128 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


@dataclass
class Options:
    model: str
    shape: tuple[int, int, int]
    classes: int
    batches: list[int]
    steps: int
    backends: list[str]
    out: Path
    device: str
    threads: int | None


def ranks_per_count(world: int) -> list[int]:
    """The rank counts measured: 2..P, or beyond 8 the powers of two and P."""
    if world <= 8:
        return list(range(2, world + 1))
    counts = [2**k for k in range(1, world.bit_length()) if 2**k < world]
    return counts + [world]


def spread_order(node_of: list[int]) -> list[int]:
    """Ranks ordered across nodes first: each node's first rank, then each node's second, …"""
    seen: dict[int, int] = {}
    keyed = []
    for rank, node in enumerate(node_of):
        keyed.append((seen.get(node, 0), node, rank))
        seen[node] = seen.get(node, 0) + 1
    return [rank for _, _, rank in sorted(keyed)]


def sizes_up_to(limit: int) -> list[int]:
    sizes = [s for s in SIZES if s < limit]
    return sizes + [limit]


def time_compute(options: Options, runtime: Any, together: Any) -> dict[int, tuple[float, float]]:
    """{batch: (median step seconds, backward share)}: each step's time is the slowest
    computing rank's (``together``: their communicator; they start every step together), as in
    synchronous training, where every step waits for the slowest rank."""
    import torch
    from torch import nn

    from hpcbench.train.breakdown import StepBreakdown
    from hpcbench.train.config import TrainConfig
    from hpcbench.train.loop import train_step
    from hpcbench.train.models import build_model
    from hpcbench.train.optim import make_optimizer
    from hpcbench.train.strategies.base import Strategy

    torch.manual_seed(0)
    config = TrainConfig(model=options.model, strategy="single")
    strategy = Strategy(config, runtime)
    model = strategy.setup(build_model(options.model, options.shape, options.classes), 1.0)
    criterion = nn.CrossEntropyLoss()
    found = {}
    for batch in options.batches:
        optimizer = make_optimizer(config, model, batch)
        x = torch.randn(batch, *options.shape, device=runtime.device)
        y = torch.randint(0, options.classes, (batch,), device=runtime.device)
        strategy.breakdown = StepBreakdown(runtime.synchronize)
        steps = []
        for i in range(options.steps + 2):
            if i == 2:
                strategy.breakdown.reset()
            runtime.synchronize()
            t0 = time.perf_counter()
            train_step(strategy, optimizer, x, y, criterion)
            runtime.synchronize()
            took = together.allreduce(time.perf_counter() - t0, op=max_op())
            if i >= 2:
                steps.append(took)
        parts = strategy.breakdown.seconds
        share = parts["backward"] / max(sum(parts.values()), 1e-12)
        found[batch] = (statistics.median(steps), share)
    return found


def max_op() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def job_cores() -> int:
    """The cores this rank's job may use on its node: its CPU affinity, and no more than the
    batch system gave the job there (SLURM's ``SLURM_CPUS_ON_NODE``; a cluster without CPU
    binding would otherwise show every core of the node)."""
    from hpcbench.this_rank import cpus_on_node, usable_cores

    cores = usable_cores()
    given = cpus_on_node()
    return min(cores, given) if given else cores


def repeats_for(size: int) -> int:
    return 20 if size <= 1 << 20 else 7


def _parameter_bytes(options: Options) -> list[int]:
    """The bytes of each trained parameter of the model (fp32), in the model's order."""
    from hpcbench.train.models import build_model

    model = build_model(options.model, options.shape, options.classes)
    return [int(p.numel()) * 4 for p in model.parameters() if p.requires_grad]


def calibrate(options: Options) -> dict[str, Any] | None:
    """Run both measurements on every rank; rank 0 returns the record, the others None."""
    from mpi4py import MPI

    from hpcbench.predict.links import sleepy_barrier
    from hpcbench.this_rank import detect_launch
    from hpcbench.train.runtime import make_runtime

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    launch = detect_launch()
    runtime = make_runtime(options.device, options.threads)
    import torch

    torch.set_num_threads(runtime.threads)
    cores = job_cores() if runtime.device.type == "cpu" else launch.local_world_size
    host = platform.node()
    hosts = comm.allgather(host)
    node_of = [sorted(set(hosts)).index(h) for h in hosts]
    local = [node_of[:r].count(node_of[r]) for r in range(world)]
    per_node = max(node_of.count(n) for n in set(node_of))
    busy = max(1, cores // runtime.threads) if runtime.device.type == "cpu" else per_node

    computing = local[rank] < busy
    together = comm.Split(0 if computing else MPI.UNDEFINED, rank)
    sleepy_barrier(comm)
    mine = time_compute(options, runtime, together) if computing else {}
    sleepy_barrier(comm)
    if together != MPI.COMM_NULL:
        together.Free()
    computed = comm.gather(mine, root=0)

    parameters = _parameter_bytes(options)
    timings = _time_allreduce(options, comm, MPI, runtime, node_of, sum(parameters))
    if rank != 0:
        return None
    compute = _compute_record(options, computed)
    return {
        "format": 1,
        "model": options.model,
        "input_shape": list(options.shape),
        "classes": options.classes,
        "parameter_bytes": parameters,
        "machine": {
            "nodes": len(set(node_of)),
            "ranks": world,
            "ranks_per_node": per_node,
            "cores_per_node": cores,
            "threads_per_rank": runtime.threads,
            "computing_ranks_per_node": min(busy, per_node),
            "device": runtime.device.type,
            "hosts": sorted(set(hosts)),
            "mpi": MPI.Get_library_version().splitlines()[0].strip(),
            "torch": torch.__version__,
        },
        "compute": compute,
        "allreduce": timings,
        "measured_at": time.time(),
    }


def _time_allreduce(
    options: Options, comm: Any, MPI: Any, runtime: Any, node_of: list[int], model_bytes: int
) -> dict[str, list[list[float]]]:
    """Per backend, rows of (ranks, bytes, the slowest rank's seconds) of an all-reduce among
    the first p ranks of a spread order (nodes taken in turn), for every p and size up to the
    model's; rank 0 holds the rows."""
    import torch.distributed as dist

    from hpcbench.predict.links import sleepy_barrier

    rank, world = comm.Get_rank(), comm.Get_size()
    sizes = sizes_up_to(model_bytes)
    order = spread_order(node_of)
    timings: dict[str, list[list[float]]] = {}
    torch_ready = False
    for backend in options.backends:
        rows: list[list[float]] = []
        if backend != "mpi" and not torch_ready:
            _torch_init(backend, runtime)
            torch_ready = True
        for p in ranks_per_count(world):
            members = order[:p]
            sub_group = None
            if backend != "mpi":
                sub_group = dist.new_group(ranks=sorted(members))  # every rank creates it
            got: dict[int, float] = {}
            if rank in members and backend == "mpi":
                got = time_mpi(comm, MPI, members, sizes)
            elif rank in members:
                got = {s: time_torch(sub_group, s, runtime.device) for s in sizes}
            sleepy_barrier(comm)
            everyone = comm.gather(got, root=0)
            if rank == 0:
                for size in sizes:
                    values = [g[size] for g in everyone if size in g]
                    rows.append([p, size, max(values)])
        timings[backend] = rows
    if torch_ready:
        dist.destroy_process_group()
    return timings


def _compute_record(options: Options, computed: list[dict[int, Any]]) -> dict[str, Any]:
    """The slowest computing rank's step time per batch size, and the median backward share."""
    compute: dict[str, Any] = {"batches": options.batches, "step_s": [], "backward_share": 0.0}
    shares = []
    for batch in options.batches:
        compute["step_s"].append(max(c[batch][0] for c in computed if c))
        shares += [c[batch][1] for c in computed if c]
    compute["backward_share"] = statistics.median(shares)
    return compute


def time_mpi(comm: Any, mpi: Any, members: list[int], sizes: list[int]) -> dict[int, float]:
    """{bytes: median seconds on this rank} of ``Allreduce`` over ``members``."""
    group = comm.Get_group().Incl(members)
    sub = comm.Create_group(group)
    found = {}
    for size in sizes:
        buf = np.ones(max(1, size // 4), dtype=np.float32)
        times = []
        for i in range(repeats_for(size) + 2):
            sub.Barrier()
            t0 = time.perf_counter()
            sub.Allreduce(mpi.IN_PLACE, [buf, mpi.FLOAT], op=mpi.SUM)
            if i >= 2:
                times.append(time.perf_counter() - t0)
        found[size] = statistics.median(times)
    sub.Free()
    group.Free()
    return found


def time_torch(group: Any, size: int, device: Any) -> float:
    """Median seconds on this rank of torch.distributed's ``all_reduce`` of ``size`` bytes."""
    import torch
    import torch.distributed as dist

    buf = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
    times = []
    for i in range(repeats_for(size) + 2):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=group)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _torch_init(backend: str, runtime: Any) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from hpcbench.train.runtime import rendezvous

    addr, port = rendezvous(runtime.launch)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=runtime.rank,
        world_size=runtime.world_size,
        timeout=timedelta(minutes=5),
    )


def write(record: dict[str, Any], out: Path) -> None:
    from hpcbench.atomic import write_json_atomically

    write_json_atomically(out, record)
