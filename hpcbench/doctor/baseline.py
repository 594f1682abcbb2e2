"""This cluster's own baseline for the doctor: what its healthy runs measured.

Kept per cluster (the profile's name, else the batch system and the first node's name prefix)
in the state directory (``doctor/<cluster>.json``): for each figure (``compute``, the
communication kinds ``world``, ``node``, ``pair``, ``filesystem``) the median of the last healthy
runs. A run that names nothing is added; the next doctor compares with it, as ReFrame's
references do, instead of with a fixed number.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from hpcbench.atomic import write_json_atomically
from hpcbench.jsonfile import JsonFileError, read_json

KEEP = 10


def cluster_key(profile: str | None, scheduler: str | None, first_node: str | None) -> str:
    if profile:
        name = profile
    else:
        prefix = re.sub(r"[0-9].*$", "", first_node or "") or "nodes"
        name = f"{scheduler or 'local'}-{prefix}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80]


def baseline_path(state_dir: Path, key: str) -> Path:
    return state_dir / "doctor" / f"{key}.json"


def load(path: Path) -> dict[str, float]:
    """The baseline: figure -> the median of its kept values (empty when none yet)."""
    try:
        data = read_json(path, max_bytes=1 << 20)
    except JsonFileError:
        return {}
    runs = data.get("runs", []) if isinstance(data, dict) else []
    figures: dict[str, list[float]] = {}
    for run in runs if isinstance(runs, list) else []:
        for name, value in run.items() if isinstance(run, dict) else []:
            if isinstance(value, (int, float)) and value > 0:
                figures.setdefault(name, []).append(float(value))
    return {name: statistics.median(values) for name, values in figures.items()}


def add(path: Path, figures: dict[str, float]) -> None:
    """Keep a healthy run's figures (the last :data:`KEEP` runs)."""
    try:
        data = read_json(path, max_bytes=1 << 20)
        runs = list(data.get("runs", [])) if isinstance(data, dict) else []
    except JsonFileError:
        runs = []
    runs = [*runs, figures][-KEEP:]
    write_json_atomically(path, {"version": 1, "runs": runs})
