"""What NCCL chose, read from its own log (``NCCL_DEBUG=INFO``).

The transports of its channels (``… via NET/IB/0/GDRDMA``, ``via NET/Socket/1``, ``via
P2P/IPC``, ``via SHM/direct/direct``), the network it loaded (``Using network IB`` or
``Socket``) and the devices it found (``NET/IB : Using [0]mlx5_0:1/IB``, ``…/RoCE``,
``NET/Socket : Using [0]eth0:…``, ``NET/IB : No device found``). :func:`transport_findings`
names NCCL over sockets between nodes that have InfiniBand or RoCE devices: the all-reduce then
runs many times slower than the fabric allows, and nothing else says so.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TypedDict

_VIA = re.compile(r"\bvia (NET/[A-Za-z]+|P2P/[A-Za-z ]+?|SHM|COLLNET[A-Za-z/]*)(?:/|\s|$)")
_NET_IB = re.compile(r"NET/IB\s*:\s*Using\s+(.*?)\s*(?:;|$)")
_NET_SOCKET = re.compile(r"NET/Socket\s*:\s*Using\s+(.*?)\s*$")
_NETWORK = re.compile(r"Using network (\w+)")
MAX_LOG_BYTES = 8 << 20


class NcclTransports(TypedDict):
    network: str | None  # IB, Socket, or a plugin's name
    inter_node: dict[str, int]  # channel count per transport between nodes: NET/IB, NET/Socket
    intra_node: dict[str, int]  # P2P/IPC, P2P/direct pointer, SHM …
    ib_devices: list[str]  # mlx5_0:1/IB, mlx5_6:1/RoCE
    socket_devices: list[str]  # eth0:10.0.0.1<0>
    ib_missing: bool  # NET/IB : No device found (or IB disabled)


def parse_nccl_log(text: str) -> NcclTransports:
    inter: Counter[str] = Counter()
    intra: Counter[str] = Counter()
    network = None
    ib: list[str] = []
    sockets: list[str] = []
    missing = False
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        if (m := _VIA.search(line)) is not None:
            kind = m.group(1).strip()
            (inter if kind.startswith(("NET/", "COLLNET")) else intra)[kind] += 1
        elif (m := _NET_IB.search(line)) is not None:
            ib.extend(d for d in m.group(1).split() if d not in ib)
        elif (m := _NET_SOCKET.search(line)) is not None:
            sockets.extend(d for d in m.group(1).split() if d not in sockets)
        elif (m := _NETWORK.search(line)) is not None:
            network = m.group(1)
        if "NET/IB : No device found" in line or "NCCL_IB_DISABLE set by environment to 1" in line:
            missing = True
    return {
        "network": network,
        "inter_node": dict(inter),
        "intra_node": dict(intra),
        "ib_devices": [d.split("]", 1)[-1] for d in ib],
        "socket_devices": [d.split("]", 1)[-1] for d in sockets],
        "ib_missing": missing,
    }


def read_nccl_logs(paths: list[Path]) -> str:
    """The text of NCCL's log files (regular files only, each bounded)."""
    out = []
    for path in paths:
        try:
            if path.is_file() and not path.is_symlink():
                with path.open("rb") as f:
                    out.append(f.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
        except OSError:
            continue
    return "\n".join(out)


def fabric_devices(root: Path = Path("/")) -> list[str]:
    """This node's InfiniBand/RoCE devices (``/sys/class/infiniband``)."""
    folder = root / "sys/class/infiniband"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def transport_findings(found: NcclTransports, fabric: list[str], nodes: int) -> list[str]:
    """NCCL over sockets between nodes that have a fabric, as one line with what to check."""
    sockets = found["inter_node"].get("NET/Socket", 0) or found["network"] == "Socket"
    if nodes < 2 or not sockets or not fabric:
        return []
    why = (
        "NCCL found no usable InfiniBand device (libibverbs missing in the container, or "
        "NCCL_IB_DISABLE=1)"
        if found["ib_missing"]
        else "NCCL chose sockets"
    )
    return [
        f"communication: NCCL runs over sockets ({', '.join(found['socket_devices'][:2]) or 'TCP'}) "
        f"between nodes that have {', '.join(fabric[:4])}: {why}; check NCCL_IB_DISABLE, "
        "NCCL_IB_HCA, NCCL_SOCKET_IFNAME and that the container sees /dev/infiniband"
    ]
