"""What the benchmark scripts share: the environment their child processes run in."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def environment() -> dict[str, str]:
    """This environment with one thread per rank, this interpreter's directory first on PATH
    (its mpiexec and torchrun), the repository importable, and output buffered as in a job."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    env.pop("PYTHONUNBUFFERED", None)
    return env
