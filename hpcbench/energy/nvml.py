"""NVIDIA GPUs through NVML (``pynvml``, from the nvidia-ml-py package, imported only here and
only when asked): every GPU of this node, and which of them the run computes on.

Per GPU: ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded; Volta and
newer) gives method ``nvml_counter``; where it answers NOT_SUPPORTED, ``nvmlDeviceGetPowerUsage``
(milliwatts) is sampled and integrated with the trapezoid rule: method ``nvml_power``. A GPU in
MIG mode, or named by a ``MIG-…`` UUID, is reported unavailable with reason ``MIG``: NVML's
figures are the whole GPU's, shared with the other instances.

CUDA_VISIBLE_DEVICES maps CUDA's ordinals to NVML's GPUs: indices (NVML enumerates by PCI bus;
CUDA's default order can differ on mixed GPUs unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), ``GPU-…``
UUIDs or unique prefixes of them, ``MIG-…`` UUIDs; as in CUDA, the list ends at the first entry
that names no GPU. Unset: every GPU, in NVML's order.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hpcbench.energy.devices import Device, Source, Unavailable

INSTALL_HINT = "pynvml not installed (pip install nvidia-ml-py)"


def load_pynvml() -> ModuleType:
    return importlib.import_module("pynvml")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCounter(Device):
    """The GPU's energy counter (millijoules, 64 bits: no wrap-around in practice)."""

    method = "nvml_counter"

    def __init__(self, nvml: ModuleType, handle: Any, name: str, used: bool) -> None:
        super().__init__(name, "gpu", used)
        self.nvml, self.handle = nvml, handle
        self._first: int | None = None

    def read(self, now: float) -> float:
        mj = int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        if self._first is None:
            self._first = mj
        return (mj - self._first) / 1000


class NvmlPower(Device):
    """The GPU's power (milliwatts), integrated between reads with the trapezoid rule."""

    method = "nvml_power"

    def __init__(self, nvml: ModuleType, handle: Any, name: str, used: bool) -> None:
        super().__init__(name, "gpu", used)
        self.nvml, self.handle = nvml, handle
        self._last: tuple[float, float] | None = None  # (unix time, milliwatts)
        self._total_mj = 0.0

    def read(self, now: float) -> float:
        mw = float(self.nvml.nvmlDeviceGetPowerUsage(self.handle))
        if self._last is not None:
            t0, mw0 = self._last
            self._total_mj += (mw0 + mw) / 2 * (now - t0)
        self._last = (now, mw)
        return self._total_mj / 1000


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's
    uuid: str
    handle: Any
    mig: bool  # MIG mode enabled


def list_gpus(nvml: ModuleType) -> list[Gpu]:
    """Every GPU NVML (started) sees, in its index order."""
    gpus = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        gpus.append(Gpu(i, _text(nvml.nvmlDeviceGetUUID(handle)), handle, _mig_mode(nvml, handle)))
    return gpus


def _mig_mode(nvml: ModuleType, handle: Any) -> bool:
    try:
        current = nvml.nvmlDeviceGetMigMode(handle)[0]
    except Exception:  # not supported (pre-Ampere) or an old pynvml: no MIG
        return False
    return current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _mig_parent(nvml: ModuleType, token: str) -> int | None:
    """NVML's index of the GPU a MIG instance's UUID belongs to, or None."""
    try:
        mig = nvml.nvmlDeviceGetHandleByUUID(token)
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return int(nvml.nvmlDeviceGetIndex(parent))
    except Exception:
        return None


def visible(spec: str | None, gpus: list[Gpu], nvml: ModuleType) -> list[tuple[int | None, bool]]:
    """CUDA ordinal -> (NVML index or None when unknown, named by a MIG UUID), as
    CUDA_VISIBLE_DEVICES ``spec`` selects them (None: all)."""
    if spec is None:
        return [(g.index, False) for g in gpus]
    out: list[tuple[int | None, bool]] = []
    for raw in spec.split(","):
        token = raw.strip()
        if token.isdigit():
            match = [g.index for g in gpus if g.index == int(token)]
        elif token.startswith("MIG-"):
            out.append((_mig_parent(nvml, token), True))
            continue
        elif token.startswith("GPU-"):
            match = [g.index for g in gpus if g.uuid.startswith(token)]
        else:
            match = []
        if len(match) != 1:
            break  # CUDA ignores this entry and every one after it
        out.append((match[0], False))
    return out


def _measurable(nvml: ModuleType, gpu: Gpu, name: str, used: bool) -> Source:
    """The GPU's counter, else its power where the counter is NOT_SUPPORTED, else why not."""
    try:
        nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)
        return NvmlCounter(nvml, gpu.handle, name, used)
    except Exception as err:
        if getattr(err, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
            return Unavailable(name, "gpu", f"NVML energy counter: {err}", used)
    try:
        nvml.nvmlDeviceGetPowerUsage(gpu.handle)
        return NvmlPower(nvml, gpu.handle, name, used)
    except Exception as err:
        return Unavailable(name, "gpu", f"NVML power: {err}", used)


def _no_driver(err: Exception) -> bool:
    """NVML's library itself is missing: the node has no NVIDIA driver, hence no NVIDIA GPU."""
    return type(err).__name__ == "NVMLError_LibraryNotFound" or "Library Not Found" in str(err)


def discover(
    cuda_visible: str | None, used_ordinals: Iterable[int]
) -> tuple[list[Source], ModuleType | None]:
    """Every GPU of this node (``gpuN``, N being NVML's index), marked used when one of
    ``used_ordinals`` (CUDA ordinals as ``cuda_visible`` maps them) is on it; and the pynvml
    module to shut down at the end (None when NVML did not start). One unavailable ``gpu``
    entry, with the reason, when NVML cannot be used."""
    used_ordinals = list(used_ordinals)
    computing = bool(used_ordinals)  # the ranks of this node compute on GPUs

    def unknown(reason: str, nvml: ModuleType | None) -> tuple[list[Source], ModuleType | None]:
        # The GPUs the run computes on cannot be measured: their energy is unknown, and so is
        # the run's. Without GPUs in use it only says that idle GPUs, if any, are not counted.
        return [Unavailable("gpu", "gpu", reason, used=computing)], nvml

    try:
        nvml = load_pynvml()
    except ImportError:
        return unknown(INSTALL_HINT, None)
    try:
        nvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, …
        if not computing and _no_driver(err):
            return [], None  # no NVIDIA driver on this node: it has no NVIDIA GPU to count
        return unknown(f"NVML cannot start: {err}", None)
    try:
        gpus = list_gpus(nvml)
    except Exception as err:
        return unknown(f"NVML cannot list the GPUs: {err}", nvml)
    if not gpus:
        if not computing:
            return [], nvml  # NVML itself says there is none
        return unknown("NVML sees no GPU on this node", nvml)
    mapping = visible(cuda_visible, gpus, nvml)
    chosen = [mapping[k] for k in used_ordinals if 0 <= k < len(mapping)]
    used = {index for index, _ in chosen if index is not None}
    by_mig = {index for index, mig in mapping if mig and index is not None}
    found: list[Source] = []
    for g in gpus:
        name = f"gpu{g.index}"
        if g.mig or g.index in by_mig:
            found.append(Unavailable(name, "gpu", "MIG", used=g.index in used))
        else:
            found.append(_measurable(nvml, g, name, g.index in used))
    unknown = sum(1 for index, mig in chosen if index is None and mig)
    found += [Unavailable(f"mig{k}", "gpu", "MIG", used=True) for k in range(unknown)]
    return found, nvml


def visible_uuids(cuda_visible: str | None) -> list[str] | None:
    """The UUIDs of the GPUs this process may use (as ``cuda_visible``, the value of
    CUDA_VISIBLE_DEVICES, selects them), without starting CUDA; None when NVML cannot say."""
    try:
        nvml = load_pynvml()
        nvml.nvmlInit()
    except Exception:  # not installed, no driver: nothing to say
        return None
    try:
        gpus = list_gpus(nvml)
        by_index = {g.index: g.uuid for g in gpus}
        return [by_index[i] for i, _ in visible(cuda_visible, gpus, nvml) if i in by_index]
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
