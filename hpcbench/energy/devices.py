"""What the sampler reads: a measurable device (a counter turned into cumulative joules) or an
unavailable one (with the reason), and the record fields the results share.

A :class:`Device` answers :meth:`Device.read` with the joules it used since its first read; the
first read is 0. Methods: ``rapl`` (powercap counters), ``nvml_counter`` (the GPU's energy
counter), ``nvml_power`` (the GPU's power, integrated over time); ``unavailable`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("gpu", "cpu", "dram")
METHODS = ("nvml_counter", "nvml_power", "rapl", "unavailable")


class Device:
    """A device whose energy can be read. Subclasses set ``method`` and implement :meth:`read`."""

    method = "unavailable"

    def __init__(self, name: str, kind: str, used: bool) -> None:
        assert kind in KINDS, kind
        self.name, self.kind, self.used = name, kind, used
        self.reason = ""

    def read(self, now: float) -> float:
        """Joules since the first read (0.0 for the first); ``now`` is the unix time of the
        read (methods that integrate power need it). Raises OSError or the library's error
        when the device cannot be read this time."""
        raise NotImplementedError


@dataclass
class Unavailable:
    """A device that cannot be measured here, and why (its joules are null, never 0)."""

    name: str
    kind: str
    reason: str
    used: bool = False
    method: str = "unavailable"


Source = Device | Unavailable
