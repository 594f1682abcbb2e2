"""What the benchmark scripts share: the environment their child processes run in."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def environment() -> dict[str, str]:
    """This environment with one thread per rank, this interpreter's directory first on PATH
    (its mpiexec and torchrun), the repository importable, and output buffered as in a job."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
    }
    env.pop("PYTHONUNBUFFERED", None)
    return env


def array_tasks(work: Path, tasks: int, parallel: int | None = None) -> Any:
    """An array of ``tasks`` tasks with empty settings (``tK`` run directories under
    ``work/runs``), ``parallel`` at a time: what a job spec's ``array`` holds."""
    import time

    from hpcbench.jobs.spec import Array

    folder = work / f"tasks-{time.time_ns()}"
    folder.mkdir()
    for k in range(1, tasks + 1):
        (folder / f"{k}.toml").write_text("")
        (folder / f"{k}.run").write_text(f"t{k}\n")
    return Array(tasks, str(folder), str(work / "runs"), max_parallel=parallel or tasks)
