"""What a benchmark matrix or a sweep ran with, as far as the submitting machine can tell: the
versions of the packages that matter, Python, the platform, the host, the git revision of the
directory it was started from, and the cluster profile (each run's metrics.json adds what the
ranks themselves saw)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from hpcbench.bench.reading.results_documents import BenchProvenance
from hpcbench.jobs.profiles import PROFILE_VAR

VERSIONED = ("hpcbench", "torch", "torchvision", "mpi4py", "mpich", "numpy", "h5py", "nvidia-ml-py")


def provenance(cwd: Path) -> BenchProvenance:
    """What the matrix ran with, as far as the submitting machine can tell (each run's
    metrics.json adds the versions, hosts and MPI the ranks themselves saw)."""
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        **versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "submit_host": socket.gethostname(),
        "profile": os.environ.get(PROFILE_VAR) or None,
        "git": _git_revision(cwd),
    }


def _git_revision(cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
