"""The doctor's steps, each run on every rank: what a rank measures, and on rank 0 what the
ranks' results say (findings: one line each, naming the node, link or rank)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.doctor import communication, compute, filesystem, nccl_log
from hpcbench.doctor.drills import Drills
from hpcbench.doctor.meeting import Meeting
from hpcbench.placement.checks import placement_warnings
from hpcbench.probe import check_world, describe
from hpcbench.this_rank import LaunchInfo, node_name

STEPS = ("launch", "placement", "compute", "communication", "filesystem")
SLOW = 0.5  # a figure below this share of its peers' median, or of the baseline, is named
# a filesystem's read bandwidth swings with the other users of it (and of the page cache): 0.47
# of its baseline measured on a healthy, busy test machine
SLOW_FILESYSTEM = 0.25


@dataclass
class Context:
    info: LaunchInfo
    meeting: Meeting
    drills: Drills
    timeout: float
    baseline: dict[str, float]
    options: Any  # the parsed arguments
    nodes: list[tuple[str, list[int]]] = field(default_factory=list)  # name, its ranks
    figures: dict[str, float] = field(default_factory=dict)  # what the baseline keeps
    placement: list[Any] | None = None  # every rank's placement record, on rank 0

    @property
    def node_index(self) -> int:
        return next(i for i, (_, ranks) in enumerate(self.nodes) if self.info.rank in ranks)

    def exchange(self, step: str, mine: Any) -> list[Any] | None:
        self.drills.stays_away(step, self.info.rank, self.timeout)
        return self.meeting.gather(step, mine, self.timeout)


def launch_step(c: Context) -> tuple[list[str], dict]:
    """Every rank once, one world; the GPUs each rank sees; the nodes and their ranks."""
    me = {**describe(c.info), "node": node_name()}
    records = c.exchange("launch", me)
    found: list[str] = []
    detail: dict = {}
    nodes: list[tuple[str, list[int]]] | None = None
    if records is not None:
        found = [f"launch: {p}" for p in check_world(records, c.info.world_size)]
        by_node: dict[str, list[int]] = {}
        for r in sorted(records, key=lambda r: r["rank"]):
            by_node.setdefault(r["node"], []).append(r["rank"])
        nodes = list(by_node.items())
        seen = {r["rank"]: (r["gpus"] or "") for r in records}
        with_gpus = [r for r, g in seen.items() if g]
        if with_gpus and len(with_gpus) < len(seen):
            blind = sorted(set(seen) - set(with_gpus))
            found.append(
                f"launch: ranks {','.join(map(str, blind))} see no GPU while others do "
                "(CUDA_VISIBLE_DEVICES): tasks and GPUs per node do not match"
            )
        sizes = {len(ranks) for _, ranks in nodes}
        detail = {"nodes": {n: r for n, r in nodes}, "ranks_per_node": sorted(sizes)}
        if len(sizes) > 1:
            found.append(f"launch: nodes run different numbers of ranks: {sorted(sizes)}")
        c.placement = [r["placement"] for r in records]
    c.nodes = [tuple(n) for n in c.meeting.share("nodes", nodes, c.timeout)]  # type: ignore[misc]
    return found, detail


def placement_step(c: Context) -> tuple[list[str], dict]:
    c.exchange("placement", None)  # every rank still here
    records = c.placement
    if records is None:  # a rank other than 0
        return [], {}
    return placement_warnings(records), {"ranks": records}


def compute_step(c: Context) -> tuple[list[str], dict]:
    mine = compute.measure(
        c.info.rank, c.nodes[c.node_index][0], c.node_index, c.drills, c.options.compute_seconds
    )
    results = c.exchange("compute", mine)
    if results is None:
        return [], {}
    lines, detail = compute.findings(results, SLOW)
    c.figures["compute"] = detail["median_gflops"]
    return lines, {**detail, "ranks": results}


def _device(c: Context) -> Any:
    import torch

    if torch.cuda.is_available():
        device = torch.device("cuda", c.info.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def communication_step(c: Context) -> tuple[list[str], dict]:
    import os

    device = _device(c)
    backend = (
        c.options.backend
        if c.options.backend != "auto"
        else ("nccl" if device.type == "cuda" else "gloo")
    )
    if backend == "mpi":  # MPI reduces host memory here (as the trainer's mpi strategy does)
        import torch

        device = torch.device("cpu")
    if backend == "nccl" and "NCCL_DEBUG_FILE" not in os.environ:
        os.environ.setdefault("NCCL_DEBUG", "INFO")
        os.environ["NCCL_DEBUG_FILE"] = str(c.meeting.folder / "nccl.%h.%p.log")
    mine_rdzv = communication.free_rendezvous() if c.info.rank == 0 else None
    rdzv = c.meeting.share("rendezvous", mine_rdzv, c.timeout)
    c.drills.stays_away("communication", c.info.rank, c.timeout)
    dist = communication.init_group(backend, c.info.rank, c.info.world_size, tuple(rdzv), c.timeout)
    default_max = (
        communication.GPU_MAX_BYTES if device.type == "cuda" else communication.CPU_MAX_BYTES
    )
    max_bytes = c.options.max_bytes or default_max
    sweeps = communication.run_sweeps(dist, c.info.rank, c.nodes, max_bytes, device, c.drills)
    transports = None
    if backend == "nccl":
        logs = sorted(c.meeting.folder.glob(f"nccl.*.{os.getpid()}.log"))
        transports = nccl_log.parse_nccl_log(nccl_log.read_nccl_logs(logs))
    mine = {"sweeps": sweeps, "nccl": transports, "fabric": nccl_log.fabric_devices()}
    gathered = c.meeting.gather("communication-results", mine, c.timeout)
    dist.destroy_process_group()
    if gathered is None:
        return [], {}
    every = [s for g in gathered for s in g["sweeps"]]
    lines, figures = communication.findings(every, c.baseline, SLOW, backend)
    for g in gathered:
        if g["nccl"]:
            lines += nccl_log.transport_findings(g["nccl"], g["fabric"], len(c.nodes))
            break
    c.figures.update(figures)
    return lines, {"backend": backend, "sweeps": every, "nccl": [g["nccl"] for g in gathered]}


def filesystem_step(c: Context) -> tuple[list[str], dict]:
    leaders = [ranks[0] for _, ranks in c.nodes]
    size = c.options.fs_bytes
    target: list[Path] | None = None
    if c.info.rank in leaders:
        if c.options.path:
            target = filesystem.data_files(Path(c.options.path), size)
    if c.info.rank == 0 and target is None:
        filesystem.write_probe_file(c.meeting.folder, size)
    c.meeting.gather("filesystem-ready", None, c.timeout)
    files = target or [c.meeting.folder / "doctor-read.bin"]
    alone: dict[str, float] = {}
    for i, leader in enumerate(leaders):  # each node alone, in turn
        mine = filesystem.read_bandwidth(files, size) if c.info.rank == leader else None
        got = c.exchange(f"filesystem-alone-{i}", mine)
        if got is not None:
            alone[c.nodes[i][0]] = got[leader]
    mine_all = filesystem.read_bandwidth(files, size) if c.info.rank in leaders else None
    staging = filesystem.staging_bandwidth(min(size, 16 << 20)) if c.info.rank in leaders else None
    together = c.exchange("filesystem-together", {"read": mine_all, "staging": staging})
    if together is None:
        return [], {}
    median = statistics.median(alone.values()) if alone else 0.0
    lines = [
        f"filesystem: node {node} reads {value:.0f} MB/s alone, {value / median:.2f} of the "
        f"nodes' median {median:.0f}"
        for node, value in alone.items()
        if len(alone) > 1 and value < SLOW * median
    ]
    known = c.baseline.get("filesystem")
    if known and median < SLOW_FILESYSTEM * known:
        lines.append(
            f"filesystem: {median:.0f} MB/s read per node alone, {median / known:.2f} of this "
            f"cluster's baseline {known:.0f}"
        )
    c.figures["filesystem"] = median
    return lines, {
        "path": str(files[0].parent if len(files) > 1 else files[0]),
        "alone_mbps": alone,
        "together_mbps": {c.nodes[i][0]: together[r]["read"] for i, r in enumerate(leaders)},
        "staging": {c.nodes[i][0]: together[r]["staging"] for i, r in enumerate(leaders)},
    }


RUNNERS = {
    "launch": launch_step,
    "placement": placement_step,
    "compute": compute_step,
    "communication": communication_step,
    "filesystem": filesystem_step,
}


def run_step(c: Context, name: str) -> tuple[list[str], dict, float]:
    t0 = time.perf_counter()
    lines, detail = RUNNERS[name](c)
    return lines, detail, time.perf_counter() - t0
