"""RAPL energy counters of the CPU packages and their DRAM, read from Linux powercap.

Layout (``/sys/class/powercap``, or ``$HPCBENCH_POWERCAP_ROOT``: a test hook that points the
reader at a fake tree): ``intel-rapl:N/`` is package N (its ``name`` file says ``package-N``),
``intel-rapl:N/intel-rapl:N:M/`` its subdomains, of which the one named ``dram`` is read (``core``
and ``uncore`` are parts of the package and would be counted twice; ``psys`` is skipped).
``energy_uj`` is a counter in microjoules that wraps to 0 after ``max_energy_range_uj``.

Wrap-around: a read lower than the one before means the counter wrapped once, and the range is
added. Several wraps between two reads cannot be told from one: sample faster than the wrap
period, range ÷ power (a range of 262 kJ, common on Intel packages, lasts about 22 minutes at
200 W; the sampler's default 0.5 s is far below any of them).

Permission: since Linux 5.10 (CVE-2020-8694) ``energy_uj`` is readable by root only on most
distributions; a domain that cannot be read is reported unavailable with the reason, not an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hpcbench.energy.devices import Device, Source, Unavailable

DEFAULT_ROOT = "/sys/class/powercap"
ROOT_VARIABLE = "HPCBENCH_POWERCAP_ROOT"
_PACKAGE = re.compile(r"intel-rapl:(\d+)$")
_SUBDOMAIN = re.compile(r"intel-rapl:(\d+):(\d+)$")
PERMISSION_HINT = "root-only since Linux 5.10 (CVE-2020-8694); see docs/energy.md for access"


def powercap_root() -> Path:
    """Where the powercap tree is: ``$HPCBENCH_POWERCAP_ROOT``, else /sys/class/powercap."""
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT)


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


class RaplDomain(Device):
    """One powercap domain's ``energy_uj``, with its wrap-arounds resolved (integer microjoules
    internally, so that sums are exact)."""

    method = "rapl"

    def __init__(self, name: str, kind: str, directory: Path, max_range_uj: int) -> None:
        super().__init__(name, kind, used=True)
        self.counter = directory / "energy_uj"
        self.max_range_uj = max_range_uj
        self._last: int | None = None
        self._total_uj = 0

    def read(self, now: float) -> float:
        raw = _read_int(self.counter)
        if self._last is not None:
            delta = raw - self._last
            if delta < 0:  # wrapped (once: see the module's docstring)
                delta += self.max_range_uj
            self._total_uj += delta
        self._last = raw
        return self._total_uj / 1e6


def _why_unreadable(path: Path, err: Exception) -> str:
    if isinstance(err, PermissionError):
        return f"cannot read {path}: permission denied ({PERMISSION_HINT})"
    if isinstance(err, ValueError):
        return f"cannot read {path}: not a number"
    return f"cannot read {path}: {getattr(err, 'strerror', None) or err}"


def _domain(directory: Path, name: str, kind: str) -> Source:
    """A readable domain, or why not (both files are read once here)."""
    for file in ("max_energy_range_uj", "energy_uj"):
        try:
            value = _read_int(directory / file)
        except (OSError, ValueError) as err:
            return Unavailable(name, kind, _why_unreadable(directory / file, err), used=True)
        if file == "max_energy_range_uj":
            max_range = value
    return RaplDomain(name, kind, directory, max_range)


def _name(directory: Path) -> str:
    try:
        return (directory / "name").read_text().strip()
    except OSError:
        return ""


def discover(root: Path | None = None) -> list[Source]:
    """The packages and their DRAM under ``root`` (default :func:`powercap_root`), named
    ``package-N`` and ``dram-N``; one unavailable ``rapl`` entry when there are none."""
    root = powercap_root() if root is None else Path(root)
    if not root.is_dir():
        return [Unavailable("rapl", "cpu", f"no RAPL powercap readable ({root} absent)", used=True)]
    packages = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _PACKAGE.match(p.name)))
    found: list[Source] = []
    for number, directory in packages:
        name = _name(directory) or f"package-{number}"
        if not name.startswith("package"):
            continue  # psys: the whole platform, overlapping the packages
        index = name.rpartition("-")[2] if name[-1:].isdigit() else str(number)
        found.append(_domain(directory, f"package-{index}", "cpu"))
        subdomains = sorted(
            (int(m.group(2)), p) for p in directory.iterdir() if (m := _SUBDOMAIN.match(p.name))
        )
        for _, sub in subdomains:
            if _name(sub) == "dram":
                found.append(_domain(sub, f"dram-{index}", "dram"))
    if not found:
        reason = f"no RAPL package domains under {root} (is the intel_rapl driver loaded?)"
        return [Unavailable("rapl", "cpu", reason, used=True)]
    return found
