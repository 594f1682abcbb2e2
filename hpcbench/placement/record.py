"""Where this rank runs: host, cores (its affinity mask), NUMA nodes, GPU, threads, and who bound it.

:func:`placement_record` is what the trainer, ``hpcbench.measure`` and the probe put in each
rank's record; :func:`rank_gpu` is the GPU a rank uses (the job's GPUs on the node, in order, by
local rank: the trainer's ``cuda:LOCAL_RANK``). Never imports torch: where the program already
did and CUDA is initialised, it asks it which GPU is current.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from typing import TypedDict

from hpcbench.environments import environments
from hpcbench.placement.topology import Gpu, Topology, format_cpulist, read_topology
from hpcbench.this_rank import LaunchInfo, detect_launch, node_name

#: the variables the batch script sets for the rank start and the records
PLACEMENT_VARIABLE = "HPCBENCH_PLACEMENT"  # auto, none, or an explicit placement
BOUND_BY_VARIABLE = "HPCBENCH_BOUND_BY"  # who bound the ranks: srun, mpiexec, torchrun, hpcbench
CPUS_PER_RANK_VARIABLE = "HPCBENCH_CPUS_PER_RANK"  # the spec's cpus_per_task


class GpuPlace(TypedDict):
    index: int  # on the node, in PCI bus order
    bus_id: str
    numa_node: int | None


class PlacementRecord(TypedDict):
    """One rank's place, as it ran."""

    rank: int
    local_rank: int
    host: str  # the machine (the local scheduler's emulated nodes share one)
    node: str  # the node as the batch system names it (host:nodeN on emulated nodes)
    cpus: str  # its affinity mask as a CPU list (0-3,8)
    cores: int  # the cores those CPUs span (hardware threads counted once)
    numa_nodes: list[int]
    gpu: GpuPlace | None
    threads: int  # the compute threads it runs (torch's intra-op threads, else OMP_NUM_THREADS)
    os_threads: int  # the process's threads now
    bound_by: str  # srun, mpiexec, torchrun, hpcbench, or none


def _visible(env: Mapping[str, str]) -> list[int] | None:
    """The node's GPU numbers the job may use, in the order its ranks take them (None: all)."""
    names = [v for e in environments() for v in e.gpu_ids_variables]
    for name in (*names, "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        value = env.get(name, "").strip()
        if not value:
            continue
        parts = [p.strip() for p in value.split(",")]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts]
        if name not in names:
            return None  # UUIDs or MIG names: every GPU, in order
    return None


def job_gpus(topology: Topology, env: Mapping[str, str] | None = None) -> list[Gpu]:
    """The GPUs of this node the job's ranks use, in the order of their local ranks."""
    env = os.environ if env is None else env
    if env.get("CUDA_VISIBLE_DEVICES", None) == "" or env.get("CUDA_VISIBLE_DEVICES") == "-1":
        return []
    visible = _visible(env)
    if visible is None:
        return list(topology.gpus)
    by_index = {g.index: g for g in topology.gpus}
    return [by_index[i] for i in visible if i in by_index]


def rank_gpu(
    topology: Topology, local_rank: int, env: Mapping[str, str] | None = None
) -> Gpu | None:
    gpus = job_gpus(topology, env)
    torch = sys.modules.get("torch")
    if torch is not None and gpus:
        try:
            if torch.cuda.is_initialized():
                props = torch.cuda.get_device_properties(torch.cuda.current_device())
                bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
                found = next((g for g in topology.gpus if g.bus_id.lower().startswith(bus)), None)
                if found is not None:
                    return found
        except Exception:  # noqa: BLE001 - an old torch, a broken driver: fall back to the order
            pass
    return gpus[local_rank] if local_rank < len(gpus) else None


def _threads() -> int:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.get_num_threads())
        except Exception:  # noqa: BLE001 - a torch being torn down
            pass
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else len(os.sched_getaffinity(0))


def _os_threads() -> int:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f.read(64 * 1024).decode("ascii", "replace").splitlines():
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 1


def placement_record(
    info: LaunchInfo | None = None, topology: Topology | None = None
) -> PlacementRecord:
    """This rank's place now."""
    info = info or detect_launch()
    topology = topology or read_topology()
    cpus = frozenset(os.sched_getaffinity(0))
    gpu = rank_gpu(topology, info.local_rank)
    return {
        "rank": info.rank,
        "local_rank": info.local_rank,
        "host": socket.gethostname(),
        "node": node_name(),
        "cpus": format_cpulist(cpus),
        "cores": topology.cores(cpus),
        "numa_nodes": topology.numa_of(cpus),
        "gpu": None
        if gpu is None
        else {"index": gpu.index, "bus_id": gpu.bus_id, "numa_node": gpu.numa_node},
        "threads": _threads(),
        "os_threads": _os_threads(),
        "bound_by": os.environ.get(BOUND_BY_VARIABLE, "") or "none",
    }
