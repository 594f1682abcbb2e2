"""One background sampler per node: every ``interval_s`` it reads each device of the node and
records ``[unix time, joules since the sampler started]`` (cumulative, wrap-around resolved).

The trainer runs it on local rank 0 of each node only (never one per rank: a node's counters are
the node's, and four readers would count them four times). From the samples and the run's phase
windows (``[{"phase", "start", "end"}]``, unix seconds) come each phase's joules: the cumulative
counter interpolated linearly at the window's bounds, summed over the phase's windows; a bound
outside the sampled span (or a device without samples) gives null, never 0.

:func:`measure_idle` is the same sampler on an idle node, for the benchmark runner: watts per
device before a matrix (``idle.json``).

``energy.json`` is typed :class:`~hpcbench.run_documents.EnergyDocument` (beside its writer,
:func:`hpcbench.run_documents.write_energy`); ``idle.json`` is typed here, :class:`IdleDocument`
of :class:`IdleDevice`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TypedDict

from hpcbench.energy import nvml, rapl
from hpcbench.energy.devices import Device, Source
from hpcbench.run_documents import EnergyDevice, EnergyDocument, EnergyNode, PhaseWindow

PHASES = ("setup", "train", "val", "test")
FORMAT = "hpcbench-energy/1"
DEFAULT_INTERVAL_S = 0.5
Sample = list[float]  # [unix seconds, cumulative joules]
Window = PhaseWindow  # {"phase": str, "start": unix s, "end": unix s}


class IdleDevice(TypedDict):
    """One device of ``idle.json``: its mean watts while idle (None: unreadable, ``reason``)."""

    host: str
    name: str
    kind: str
    method: str
    reason: str
    watts: float | None


class IdleDocument(TypedDict):
    """``idle.json``: each device's watts over ``seconds`` of an idle node."""

    seconds: float
    interval_s: float
    devices: list[IdleDevice]


def discover(
    cuda_visible: str | None = None,
    used_gpu_ordinals: Iterable[int] = (),
    powercap_root: Path | None = None,
) -> tuple[list[Source], ModuleType | None]:
    """This node's GPUs (NVML) then its CPU packages and DRAM (RAPL); and the pynvml module to
    shut down after sampling (None when NVML did not start)."""
    gpus, started = nvml.discover(cuda_visible, used_gpu_ordinals)
    return gpus + rapl.discover(powercap_root), started


class Sampler:
    """Reads ``sources`` every ``interval_s`` on a daemon thread between :meth:`start` and
    :meth:`stop` (one read at each end); :meth:`sample` reads once (tests drive it directly
    with an explicit time)."""

    def __init__(
        self,
        sources: Sequence[Source],
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        host: str | None = None,
        clock: Callable[[], float] = time.time,
        nvml_module: ModuleType | None = None,
    ) -> None:
        self.sources = list(sources)
        self.interval_s = interval_s
        self.host = host or socket.gethostname()
        self.clock = clock
        self.samples: dict[str, list[Sample]] = {s.name: [] for s in self.sources}
        self.errors: dict[str, str] = {}
        self._nvml = nvml_module
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self, now: float | None = None) -> None:
        """Read every measurable device once (at ``now``, else the clock at each read); a
        failed read is skipped and remembered."""
        with self._lock:
            for source in self.sources:
                if not isinstance(source, Device):
                    continue
                at = self.clock() if now is None else now
                try:
                    joules = source.read(at)
                except Exception as err:  # OSError, NVMLError: this reading only
                    self.errors[source.name] = f"{type(err).__name__}: {err}"
                    continue
                self.samples[source.name].append([at, joules])

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="hpcbench-energy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, take the last reading, release NVML. Safe to call twice."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.sample()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def devices(self) -> list[EnergyDevice]:
        """This node's DEVICE records, without phases (:func:`add_phases` fills them)."""
        out = []
        for s in self.sources:
            samples = self.samples[s.name]
            method, reason = s.method, s.reason
            if isinstance(s, Device) and not samples:
                method = "unavailable"
                reason = f"no reading succeeded ({self.errors.get(s.name, 'never sampled')})"
            out.append(
                {
                    "name": s.name,
                    "kind": s.kind,
                    "method": method,
                    "reason": reason,
                    "used": s.used,
                    "interval_s": self.interval_s,
                    "samples": samples if method != "unavailable" else [],
                    "phases": dict.fromkeys(PHASES),
                    "total_j": None,
                }
            )
        return out

    def node(self) -> EnergyNode:
        return {"host": self.host, "devices": self.devices()}


# ---- from samples to joules -------------------------------------------------------------------
def interpolate(samples: Sequence[Sample], t: float) -> float | None:
    """The cumulative joules at ``t``, linear between the readings around it; None outside
    the sampled span."""
    if not samples or t < samples[0][0] or t > samples[-1][0]:
        return None
    lo, hi = 0, len(samples) - 1
    while hi - lo > 1:  # bisect: samples are in time order
        mid = (lo + hi) // 2
        if samples[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, j0), (t1, j1) = samples[lo], samples[hi]
    if t <= t0 or t1 == t0:
        return j0 if t <= t0 else j1
    if t >= t1:
        return j1
    return j0 + (j1 - j0) * (t - t0) / (t1 - t0)


def window_energy(samples: Sequence[Sample], start: float, end: float) -> float | None:
    a, b = interpolate(samples, start), interpolate(samples, end)
    return None if a is None or b is None else b - a


def phase_energies(samples: Sequence[Sample], windows: Sequence[Window]) -> dict[str, float | None]:
    """Joules per phase, summed over its windows; None for a phase without windows or with a
    bound outside the samples."""
    out: dict[str, float | None] = {}
    for phase in PHASES:
        mine = [w for w in windows if w["phase"] == phase]
        parts = [window_energy(samples, w["start"], w["end"]) for w in mine]
        out[phase] = None if not parts or None in parts else sum(parts)  # type: ignore[arg-type]
    return out


def add_phases(node: EnergyNode, windows: Sequence[Window]) -> EnergyNode:
    """Fill each device's ``phases`` and ``total_j`` (from the first window's start to the last
    one's end: the run's set-up, training, validation and test) from ``windows``."""
    for device in node["devices"]:
        samples = device["samples"]
        if device["method"] == "unavailable" or not samples:
            continue
        device["phases"] = phase_energies(samples, windows)
        if windows:
            start = min(w["start"] for w in windows)
            device["total_j"] = window_energy(samples, start, max(w["end"] for w in windows))
        else:
            device["total_j"] = samples[-1][1] - samples[0][1]
    return node


def energy_document(
    nodes: Iterable[EnergyNode], interval_s: float, windows: Sequence[Window]
) -> EnergyDocument:
    """energy.json: one entry per host (a second sampler on the same host, e.g. emulated nodes,
    is dropped: the host's counters are counted once), phases filled from ``windows``."""
    seen: dict[str, EnergyNode] = {}
    for node in nodes:
        seen.setdefault(node["host"], node)
    return {
        "format": FORMAT,
        "interval_s": interval_s,
        "nodes": [add_phases(node, windows) for node in seen.values()],
    }


# ---- idle power ---------------------------------------------------------------------------------
def idle_devices(sampler: Sampler) -> list[IdleDevice]:
    """Each device's mean watts over the sampler's readings (None when unavailable or fewer
    than two readings), as idle.json lists them."""
    out = []
    for d in sampler.devices():
        samples, watts = d["samples"], None
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            watts = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
        reason = d["reason"]
        if watts is None and not reason:
            reason = "fewer than two readings"
        out.append(
            {
                "host": sampler.host,
                "name": d["name"],
                "kind": d["kind"],
                "method": d["method"] if watts is not None else "unavailable",
                "reason": reason,
                "watts": watts,
            }
        )
    return out


def measure_idle(seconds: float, interval_s: float = DEFAULT_INTERVAL_S) -> IdleDocument:
    """Sample this node for ``seconds`` while nothing else is meant to run: idle.json's
    ``{"seconds", "interval_s", "devices"}`` (watts per device). No GPU counts as used."""
    sources, started = discover()
    sampler = Sampler(sources, interval_s, nvml_module=started)
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return {"seconds": seconds, "interval_s": interval_s, "devices": idle_devices(sampler)}
