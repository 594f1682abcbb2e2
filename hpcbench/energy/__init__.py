"""Energy measured while a job runs: one sampler per node reading NVML and RAPL counters.

- :mod:`.devices`: a measurable device (cumulative joules) or an unavailable one with its reason;
- :mod:`.rapl`: CPU packages and DRAM from Linux powercap (wrap-around, permission);
- :mod:`.nvml`: NVIDIA GPUs through pynvml (energy counter, else integrated power; MIG);
- :mod:`.sampler`: the per-node background sampler, phase energies from phase windows, the
  ``energy.json`` document and idle power (:func:`measure_idle`).

Nothing here imports torch; pynvml is imported only when GPUs are looked for. Unavailable
figures are null, never 0. docs/energy.md describes the methods and their limits.
"""

from hpcbench.energy.sampler import (
    DEFAULT_INTERVAL_S,
    FORMAT,
    PHASES,
    Sampler,
    discover,
    energy_document,
    measure_idle,
)

__all__ = [
    "DEFAULT_INTERVAL_S",
    "FORMAT",
    "PHASES",
    "Sampler",
    "discover",
    "energy_document",
    "measure_idle",
]
