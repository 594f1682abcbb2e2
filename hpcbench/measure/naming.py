"""What a measurement (:mod:`.recorder`) accepts of the program's calls: phase names (with the
aliases users give them), the names and numbers of epoch and final values, and where a run
writes when it is not told (:func:`default_run_dir`)."""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from hpcbench.this_rank import LaunchInfo, job_id

#: the names users give phases, as the documents name them
PHASE_ALIASES = {
    "validate": "val",
    "validation": "val",
    "eval": "val",
    "training": "train",
    "testing": "test",
    "set_up": "setup",
    "set-up": "setup",
}
_PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_VALUE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: what hpcbench computes itself: a phase or an epoch value of these names is refused
RESERVED_PHASES = frozenset({"compute"})
RESERVED_VALUES = frozenset(
    {"epoch", "train_time_s", "val_time_s", "data_time_s", "compute_time_s", "comm_time_s",
     "samples_per_s", "bytes_read", "bytes_read_rank0", "files_opened_rank0",
     "step_breakdown_ms"}
)  # fmt: skip


def phase_name(name: str) -> str:
    """The documents' name of phase ``name``; ValueError naming it when it is none."""
    key = PHASE_ALIASES.get(name, name) if isinstance(name, str) else name
    if not isinstance(key, str) or not _PHASE_NAME.fullmatch(key):
        raise ValueError(f"phase name {shown(name)}: use lower-case letters, digits and _")
    if key in RESERVED_PHASES:
        raise ValueError(f"phase name {name!r}: hpcbench computes it (train - data - comm)")
    return key


def numbers(
    call: str,
    values: dict[str, object],
    reserved: frozenset[str],
    fault: Callable[[Exception], None],
) -> dict[str, float | None]:
    """The values that are named numbers (one that is not finite: None, said to ``fault``);
    each other one is left out, said to ``fault`` (the rest are kept)."""
    out: dict[str, float | None] = {}
    for key, value in values.items():
        if value is None:  # not measured this time (an epoch without validation)
            continue
        if not _VALUE_NAME.fullmatch(key) or key in reserved:
            why = "hpcbench's own" if key in reserved else "not a name"
            fault(ValueError(f"{call}(): {key!r} is {why}: left out"))
            continue
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            fault(ValueError(f"{call}({key}=…): {shown(value)} is not a number"))
            continue
        if not math.isfinite(number):
            fault(ValueError(f"{call}({key}=…): {shown(value)} is not a finite number: null"))
        out[key] = number if math.isfinite(number) else None
    return out


def shown(value: Any) -> str:
    """A value as a warning shows it: its repr, bounded (a huge number's repr may fail)."""
    try:
        return repr(value)[:80]
    except Exception:
        return f"a {type(value).__name__}"


def seconds_from(text: str | None, default: float) -> float:
    """Seconds from a setting's text (0.01 to 60), else ``default``."""
    try:
        value = float(text or "")
    except ValueError:
        return default
    return value if 0.01 <= value <= 60 else default


def default_run_dir(launch: LaunchInfo) -> str:
    """``$HPCBENCH_RUN_DIR`` (the job's), else ``runs/measure-<job id>`` (every rank of a job
    agrees on it), else ``runs/measure-<time>`` for one process."""
    if os.environ.get("HPCBENCH_RUN_DIR"):
        return os.environ["HPCBENCH_RUN_DIR"]
    job = job_id() or os.environ.get("TORCHELASTIC_RUN_ID")
    if job and job != "none":
        return f"runs/measure-{re.sub(r'[^A-Za-z0-9._-]', '_', job)}"
    if launch.world_size > 1:
        if launch.rank == 0:
            print(
                "hpcbench.measure: no run directory: give run_dir= (ranks outside a job cannot "
                "agree on a time-stamped one); using runs/measure",
                file=sys.stderr,
            )
        return "runs/measure"
    return f"runs/measure-{time.strftime('%Y%m%d-%H%M%S')}"
