"""What this rank uses of its node, read between two telemetry records: CPU cores busy (the
process's CPU time over the wall time, from ``os.times``), resident memory (``/proc/self/statm``),
and on a GPU its utilisation and memory (NVML, through :mod:`hpcbench.energy.nvml`'s mapping of
``CUDA_VISIBLE_DEVICES``). Nothing here touches the device's stream: no host–device
synchronisation. A reading that cannot be made is ``None``, never 0.
"""

from __future__ import annotations

import os
import time
from typing import Any

_PAGE_MB = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) / 2**20


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def rss_mb() -> float | None:
    """This process's resident memory in MB (None where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return round(int(f.read(256).split()[1]) * _PAGE_MB, 1)
    except (OSError, ValueError, IndexError):
        return None


class DeviceUse:
    """Readings since the last :meth:`read` (the first one: since construction). ``cuda_index``:
    the CUDA ordinal this rank computes on (None on a CPU)."""

    def __init__(self, cuda_index: int | None = None) -> None:
        self._cpu, self._wall = _cpu_seconds(), time.monotonic()
        self._gpu: Any = None
        self._nvml: Any = None
        if cuda_index is not None:
            self._gpu = self._gpu_handle(cuda_index)

    def _gpu_handle(self, cuda_index: int) -> Any:
        try:
            from hpcbench.energy.nvml import list_gpus, load_pynvml, visible

            nvml = load_pynvml()
            nvml.nvmlInit()
            gpus = list_gpus(nvml)
            order = visible(os.environ.get("CUDA_VISIBLE_DEVICES"), gpus, nvml)
            index, mig = order[cuda_index]
            if index is None or mig:  # a MIG slice: NVML's figures are the whole GPU's
                return None
            self._nvml = nvml
            return next(g.handle for g in gpus if g.index == index)
        except Exception:
            return None

    def read(self) -> dict[str, float | None]:
        cpu, wall = _cpu_seconds(), time.monotonic()
        span = wall - self._wall
        cores = (cpu - self._cpu) / span if span > 0 else None
        self._cpu, self._wall = cpu, wall
        out: dict[str, float | None] = {
            "cpu_cores": None if cores is None else round(cores, 2),
            "rss_mb": rss_mb(),
            "gpu_util": None,
            "gpu_mem_mb": None,
        }
        if self._gpu is not None:
            try:
                out["gpu_util"] = float(self._nvml.nvmlDeviceGetUtilizationRates(self._gpu).gpu)
                used = self._nvml.nvmlDeviceGetMemoryInfo(self._gpu).used
                out["gpu_mem_mb"] = round(used / 2**20, 1)
            except Exception:
                pass
        return out
