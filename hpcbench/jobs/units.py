"""Time limits and memory sizes: the forms a spec is written in, and the plain forms batch systems
take (``HH:MM:SS``; the largest exact unit of memory). A scheduler with a form of its own (SLURM's
``D-HH:MM:SS``) writes it in its own module from these.
"""

from __future__ import annotations

import re
from typing import Any

_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?$", re.IGNORECASE)
_MEMORY_FACTOR_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}
# The largest limits every batch system takes: a signed 32-bit count of seconds (about 68 years)
# and of megabytes per node (2 PiB, beyond any node); larger values are typos.
MAX_TIME_S = 2**31 - 1
MAX_MEMORY_MB = 2**31 - 1


def parse_time(value: Any) -> int:
    """A SLURM-style time limit to seconds.

    Accepts ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` or an integer
    number of minutes (as sbatch does).
    """
    if isinstance(value, bool):
        raise ValueError("expected a time limit like '01:30:00' or '2-00:00:00'")
    if isinstance(value, int):
        seconds = value * 60
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        days = 0
        with_days = "-" in text
        if with_days:
            day_text, text = text.split("-", 1)
            if not day_text.isdigit():
                raise ValueError("days before '-' must be a whole number")
            days = int(day_text)
        parts = text.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            raise ValueError("expected MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
        nums = [int(p) for p in parts]
        if with_days:
            h, m, s = (nums + [0, 0])[:3]  # D-HH, D-HH:MM, D-HH:MM:SS
        elif len(nums) == 3:
            h, m, s = nums  # HH:MM:SS
        else:
            h, m, s = 0, nums[0], (nums[1] if len(nums) == 2 else 0)  # MM or MM:SS
        if s >= 60 or (m >= 60 and (with_days or len(nums) == 3)):
            raise ValueError("minutes and seconds must be below 60")
        if with_days and h >= 24:
            raise ValueError("hours after 'D-' must be below 24")
        seconds = ((days * 24 + h) * 60 + m) * 60 + s
    else:
        raise ValueError("expected a time limit like '01:30:00' or '2-00:00:00'")
    if seconds <= 0:
        raise ValueError("a time limit must be positive")
    if seconds > MAX_TIME_S:
        raise ValueError(
            f"at most {_max_time_text()} (about 68 years), the longest limit every batch system takes"
        )
    return seconds


def format_time_hms(seconds: int) -> str:
    """Seconds as ``HH:MM:SS`` (hours may exceed 24), the form PBS and Grid Engine take."""
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _max_time_text() -> str:
    """MAX_TIME_S as a spec writes a time limit (D-HH:MM:SS)."""
    days, rest = divmod(MAX_TIME_S, 86400)
    return f"{days}-{format_time_hms(rest)}"


def parse_memory(value: Any) -> int:
    """A memory size to whole megabytes: ``32G``, ``500M``, ``1.5T``, ``64GB`` or an integer (MB)."""
    if isinstance(value, bool):
        raise ValueError("expected a memory size like '32G' or '500M'")
    if isinstance(value, int):
        mb = value
    elif isinstance(value, str) and len(value) <= 40 and (m := _MEMORY.match(value.strip())):
        mb = float(m.group(1)) * _MEMORY_FACTOR_MB[m.group(2).upper()]
    else:
        raise ValueError("expected a memory size like '32G' or '500M'")
    if mb > MAX_MEMORY_MB:
        raise ValueError(f"at most {format_memory(MAX_MEMORY_MB)} per node")
    mb = int(round(mb))
    if mb <= 0:
        raise ValueError("a memory size must be positive")
    return mb


def format_memory(mb: int, unit_suffix: str = "") -> str:
    """Megabytes as the largest exact unit: 32768 -> '32G', 1500 -> '1500M' (+ suffix, e.g. 'b')."""
    if mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T{unit_suffix}"
    if mb % 1024 == 0:
        return f"{mb // 1024}G{unit_suffix}"
    return f"{mb}M{unit_suffix}"
