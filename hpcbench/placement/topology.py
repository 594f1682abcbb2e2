"""A node's CPUs, NUMA nodes and GPUs, as its sysfs says.

Read from ``/sys`` (or from a recorded tree under another root, for tests): the online CPUs, each
CPU's core (``thread_siblings_list``), each NUMA node's CPUs, and each GPU's PCI device (NVIDIA's
and AMD's display controllers): its bus id, ``numa_node`` and ``local_cpulist``. GPUs are indexed
in PCI bus order, which is ``nvidia-smi``'s order and CUDA's with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
Where the firmware publishes no NUMA node for a GPU (``numa_node`` is -1), ``nvidia-smi topo -m``'s
NUMA Affinity column says it (:func:`parse_topo_matrix`). Every file read is bounded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd"}
_MAX_READ = 64 * 1024
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class TopologyError(ValueError):
    """A CPU list that is not one (``0-3,8-11``): one line naming it."""


def parse_cpulist(text: str) -> frozenset[int]:
    """``"0-3,8,10-11"`` as the set of CPUs it names (sysfs's and taskset's list format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = _RANGE.match(part)
        if not m:
            raise TopologyError(f"{text.strip()!r} is not a CPU list like 0-3,8-11")
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if last < first or last - first > 65536:
            raise TopologyError(f"{part!r} is not a range of CPUs")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The set of CPUs in sysfs's list format, ranges collapsed (``0-3,8``)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class Gpu:
    index: int  # in PCI bus order
    bus_id: str  # 0000:07:00.0
    vendor: str  # nvidia, amd
    numa_node: int | None  # None: the firmware does not say
    cpus: frozenset[int] = frozenset()  # its local_cpulist


@dataclass(frozen=True)
class Topology:
    cpus: frozenset[int]  # online
    numa_nodes: dict[int, frozenset[int]]
    core_of: dict[int, int] = field(default_factory=dict)  # CPU -> its core's first CPU
    gpus: tuple[Gpu, ...] = ()

    def numa_of(self, cpus: Iterable[int]) -> list[int]:
        """The NUMA nodes that hold any of ``cpus``."""
        wanted = set(cpus)
        return sorted(n for n, held in self.numa_nodes.items() if held & wanted)

    def cores(self, cpus: Iterable[int]) -> int:
        """How many cores (not hardware threads) ``cpus`` span."""
        return len({self.core_of.get(c, c) for c in cpus})


def _read(path: Path) -> str | None:
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            return f.read(_MAX_READ).decode("ascii", "replace").strip()
    except OSError:
        return None


def _cpulist(path: Path) -> frozenset[int]:
    text = _read(path)
    try:
        return parse_cpulist(text) if text else frozenset()
    except TopologyError:
        return frozenset()


def _gpus(root: Path) -> list[Gpu]:
    found = []
    devices = root / "sys/bus/pci/devices"
    for device in sorted(devices.iterdir()) if devices.is_dir() else []:
        vendor = GPU_VENDORS.get((_read(device / "vendor") or "").lower())
        if vendor is None or not (_read(device / "class") or "").startswith("0x03"):
            continue
        numa = _read(device / "numa_node")
        node = int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None
        found.append(Gpu(len(found), device.name, vendor, node, _cpulist(device / "local_cpulist")))
    return found


def read_topology(root: Path | str = "/", topo_matrix: str | None = None) -> Topology:
    """This node's topology (a recorded tree under ``root``). ``topo_matrix``: the text of
    ``nvidia-smi topo -m``, read for the GPUs whose NUMA node sysfs does not say."""
    root = Path(root)
    system = root / "sys/devices/system"
    cpus = _cpulist(system / "cpu/online")
    numa: dict[int, frozenset[int]] = {}
    for node in sorted(system.glob("node/node[0-9]*")):
        held = _cpulist(node / "cpulist")
        if held:
            numa[int(node.name[4:])] = held
    if not cpus:
        cpus = frozenset().union(*numa.values()) if numa else frozenset()
    if not numa and cpus:
        numa = {0: cpus}
    core_of = {}
    for cpu in cpus:
        siblings = _cpulist(system / f"cpu/cpu{cpu}/topology/thread_siblings_list")
        core_of[cpu] = min(siblings) if siblings else cpu
    gpus = _gpus(root)
    if any(g.numa_node is None for g in gpus):
        matrix = parse_topo_matrix(topo_matrix if topo_matrix is not None else _nvidia_topo())
        gpus = [
            g
            if g.numa_node is not None or g.index not in matrix
            else Gpu(g.index, g.bus_id, g.vendor, matrix[g.index][1], g.cpus or matrix[g.index][0])
            for g in gpus
        ]
    return Topology(cpus, numa, core_of, tuple(gpus))


def _nvidia_topo() -> str:
    """``nvidia-smi topo -m``'s text, or '' where there is none (bounded to 10 s)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ""
    try:
        done = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout[:_MAX_READ] if done.returncode == 0 else ""


def parse_topo_matrix(text: str) -> dict[int, tuple[frozenset[int], int | None]]:
    """GPU index -> (its CPU Affinity, its NUMA Affinity) from ``nvidia-smi topo -m``'s matrix
    (NUMA None where the column is missing or N/A)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if "CPU Affinity" in line), None)
    if header is None:
        return {}
    devices = header.split("CPU Affinity")[0].split()
    has_numa = "NUMA Affinity" in header
    out: dict[int, tuple[frozenset[int], int | None]] = {}
    for line in lines:
        words = line.split()
        if not words or not re.fullmatch(r"GPU\d+", words[0]) or len(words) < len(devices) + 2:
            continue
        rest = words[1 + len(devices) :]
        try:
            cpus = parse_cpulist(rest[0]) if rest[0] != "N/A" else frozenset()
        except TopologyError:
            continue
        numa = rest[1] if has_numa and len(rest) > 1 else ""
        out[int(words[0][3:])] = (cpus, int(numa) if numa.isdigit() else None)
    return out
