"""The values accounting commands print, read into numbers: memory sizes (``123456K``,
``1.630GB``, ``2048kb``), durations (SLURM's ``1-02:03:04`` and ``03:04.123``, Grid Engine's
``5.790s``, PBS's ``00:01:05``), dates (``2026-11-26T16:22:59``, ``Thu Nov 26 15:59:56 2026``,
epoch seconds) and SLURM's TRES lists (``cpu=2,mem=1G,energy=120``). Each reader returns None for
what it cannot read: an accounting field a site leaves empty is common, never an error; so is an
absurd one (a number over 1e308 or of thousands of digits, a date beyond what a clock holds),
which every reader and every figure computed from them gives as None, never a crash.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime

# The largest figure believed (bytes, seconds, counts): far beyond any machine, far below where
# arithmetic on it overflows.
LARGEST = 1e18
# The latest date believed: the last second of the year 9999, as dates are printed.
LATEST = 253402300799.0

# Binary multiples, as every one of these commands means them (SLURM's 1G is 1024M).
_MULTIPLES = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgtp]?)(?:i?b|bytes?)?\s*", re.I)


def size_bytes(text: str | None, unit: str = "") -> int | None:
    """``123456K``, ``1.630GB``, ``2048kb``, ``2 Mbytes`` as bytes; a bare number is in
    ``unit`` (``""``: bytes, ``"m"``: megabytes, as the mem of SLURM's AllocTRES)."""
    if not text:
        return None
    m = _SIZE.fullmatch(text.rstrip("nc"))  # SLURM's older ReqMem: 4000Mn (per node), Mc (per cpu)
    if not m:
        return None
    suffix = (m.group(2) or unit).lower()
    value = float(m.group(1)) * _MULTIPLES[suffix]
    return int(round(value)) if value <= LARGEST else None


_CLOCK = re.compile(r"(?:([0-9]+)-)?(?:([0-9]+):)?([0-9]+):([0-9]+(?:\.[0-9]+)?)")
_SECONDS = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*s?")


def duration_s(text: str | None) -> float | None:
    """``1-02:03:04``, ``02:03:04``, ``03:04.123`` (SLURM's TotalCPU is MM:SS.mmm under an hour),
    ``5.790s`` or ``65`` as seconds."""
    if not text:
        return None
    text = text.strip()
    m = _CLOCK.fullmatch(text)
    if m:
        days, hours, minutes, seconds = (float(g or 0) for g in m.groups())
        value = days * 86400 + hours * 3600 + minutes * 60 + seconds
    else:
        m = _SECONDS.fullmatch(text)
        value = float(m.group(1)) if m else math.inf
    return value if value <= LARGEST else None


def iso_time(text: str | None) -> float | None:
    """SLURM's ``2026-11-26T16:22:59`` (the local time of the machine asking) as epoch
    seconds; ``Unknown``, ``None`` and empty are None."""
    if not text or not text[:1].isdigit():
        return None
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def ctime_time(text: str | None, year: int | None = None) -> float | None:
    """``Thu Nov 26 15:59:56 2026`` (Grid Engine, PBS) as epoch seconds; LSF's
    ``Thu Nov 26 15:59:56`` without a year takes ``year`` (else the latest year that does not
    put it in the future)."""
    if not text:
        return None
    words = text.split()
    try:
        if len(words) == 5:
            return time.mktime(time.strptime(" ".join(words), "%a %b %d %H:%M:%S %Y"))
        if len(words) == 4:
            now = datetime.now()
            for y in [year] if year else [now.year, now.year - 1]:
                stamp = time.mktime(time.strptime(f"{' '.join(words)} {y}", "%a %b %d %H:%M:%S %Y"))
                if year or stamp <= time.time() + 86400:
                    return stamp
    except (ValueError, OverflowError):
        return None
    return None


def epoch_time(text: str | None) -> float | None:
    """Torque's ``1764172799`` (epoch seconds) as a number."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if 0 < value <= LATEST else None


def tres(text: str | None) -> dict[str, str]:
    """SLURM's ``cpu=2,mem=1G,node=1,billing=2,gres/gpu=2`` as a dict (values as printed)."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key:
            out[key.strip()] = value.strip()
    return out


def number(text: str | None) -> float | None:
    """A plain number, None for text, an empty field or a magnitude beyond :data:`LARGEST`."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if abs(value) <= LARGEST else None


def whole(text: str | None) -> int | None:
    value = number(text)
    return int(value) if value is not None and value == int(value) else None


def span(start: float | None, end: float | None) -> float | None:
    """Seconds from ``start`` to ``end`` where both are known and in order."""
    if start is None or end is None or not start <= end <= start + LARGEST:
        return None
    return float(end - start)


def iso(stamp: float | None) -> str | None:
    """Epoch seconds as local ISO time (what the record shows)."""
    if stamp is None:
        return None
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(stamp))
    except (OverflowError, ValueError, OSError):  # beyond what this machine's clock holds
        return None


def times(
    submit: float | None, start: float | None, end: float | None, eligible: float | None = None
) -> dict[str, str | float | None]:
    """A job's dates as the record shows them, and the waits they give: ``queue_wait_s``
    (submit to start) and ``eligible_wait_s`` (eligible to start)."""
    return {
        "submit": iso(submit),
        "eligible": iso(eligible),
        "start": iso(start),
        "end": iso(end),
        "queue_wait_s": span(submit, start),
        "eligible_wait_s": span(eligible, start),
    }


def efficiency(used: float | None, available: float | None) -> float | None:
    """``used / available`` where both are known and ``available`` is positive (seff's
    arithmetic: CPU time over elapsed time × allocated CPUs)."""
    if used is None or not available or available <= 0:
        return None
    value = used / available
    return value if math.isfinite(value) else None
