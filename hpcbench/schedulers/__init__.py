"""Schedulers behind one protocol (:mod:`.base`): slurm, pbs, sge and the local one.

:func:`detect` picks the scheduler of the machine it runs on: ``sbatch`` means SLURM, ``qsub``
means PBS or Grid Engine (told apart by what ``qsub`` says about itself), anything else means local.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from hpcbench.schedulers.base import Job, JobStatus, Scheduler, SchedulerError
from hpcbench.schedulers.local import LocalScheduler
from hpcbench.schedulers.pbs import PbsScheduler
from hpcbench.schedulers.sge import SgeScheduler
from hpcbench.schedulers.slurm import SlurmScheduler

SCHEDULER_CLASSES: dict[str, type[Scheduler]] = {
    "slurm": SlurmScheduler,
    "pbs": PbsScheduler,
    "sge": SgeScheduler,
    "local": LocalScheduler,
}

__all__ = ["SCHEDULER_CLASSES", "Job", "JobStatus", "Scheduler", "SchedulerError", "detect", "get"]


def _qsub_is_grid_engine(qsub: str) -> bool:
    if os.environ.get("SGE_ROOT"):
        return True
    try:
        proc = subprocess.run(
            [qsub, "-help"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    first = (proc.stdout or proc.stderr).strip().splitlines()[:1]
    return bool(first) and first[0].split()[0] in ("SGE", "GE", "UGE", "OGS", "SoGE", "AGE")


def detect() -> tuple[str, str]:
    """(scheduler name, why): the batch system of this machine, or local when there is none."""
    if sbatch := shutil.which("sbatch"):
        return "slurm", f"sbatch found at {sbatch}"
    if qsub := shutil.which("qsub"):
        if _qsub_is_grid_engine(qsub):
            return "sge", f"qsub at {qsub} is Grid Engine's"
        return "pbs", f"qsub found at {qsub}"
    return "local", "no sbatch or qsub on PATH"


def get(name: str) -> Scheduler:
    """An instance of the named scheduler."""
    try:
        return SCHEDULER_CLASSES[name]()
    except KeyError:
        raise SchedulerError(
            f"scheduler: unknown {name!r} (known: {', '.join(SCHEDULER_CLASSES)})"
        ) from None
