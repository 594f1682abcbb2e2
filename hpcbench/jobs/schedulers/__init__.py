"""Schedulers behind one protocol (:mod:`.base`), one package each: slurm, lsf, sge, pbs, local.

Every package of this one whose modules define a :class:`~.base.Scheduler` subclass with a
``name`` is a scheduler: :data:`SCHEDULER_CLASSES` is found by importing them (and the modules
other distributions declare under the ``hpcbench.schedulers`` entry point:
:func:`hpcbench.plugins.discover`, as every registry), so adding one is one package here and one
template in ``hpcbench/templates/``. :func:`detect` asks each class, in its ``detect_order``,
whether this machine is its (``sbatch`` means SLURM, ``bsub`` LSF, ``qsub`` Grid Engine or PBS
as ``qsub`` says of itself, anything else the local scheduler).
"""

from __future__ import annotations

from hpcbench.jobs.schedulers.base import (
    JobIdError,
    JobStatus,
    Scheduler,
    SchedulerError,
)
from hpcbench.plugins import SCHEDULER_GROUP, discover

#: every scheduler by name, in the order :func:`detect` asks them
SCHEDULER_CLASSES: dict[str, type[Scheduler]] = {
    cls.name: cls for cls in discover(__name__, Scheduler, SCHEDULER_GROUP, order="detect_order")
}
#: what ``--scheduler`` and ``scheduler.name`` take: "auto" (detect) or a scheduler's name
SCHEDULER_CHOICES: tuple[str, ...] = ("auto", *SCHEDULER_CLASSES)

__all__ = [
    "SCHEDULER_CHOICES",
    "SCHEDULER_CLASSES",
    "JobIdError",
    "JobStatus",
    "Scheduler",
    "SchedulerError",
    "detect",
    "for_job_id",
    "get",
    "scheduler_class",
    "scheduler_names",
    "this_machine",
    "for_submitit_cluster",
]


def scheduler_names() -> tuple[str, ...]:
    return tuple(SCHEDULER_CLASSES)


def scheduler_class(name: str) -> type[Scheduler]:
    try:
        return SCHEDULER_CLASSES[name]
    except KeyError:
        raise SchedulerError(
            f"scheduler: unknown {name!r} (known: {', '.join(SCHEDULER_CLASSES)})"
        ) from None


def detect() -> tuple[str, str]:
    """(scheduler name, why): the batch system of this machine, or local when there is none."""
    for name, cls in SCHEDULER_CLASSES.items():
        if why := cls.detect():
            return name, why
    raise SchedulerError("no scheduler recognised this machine")  # local always does


def this_machine() -> str:
    """The scheduler that runs jobs on this machine itself: what a run that names none used."""
    return next(name for name, cls in SCHEDULER_CLASSES.items() if cls.plays_every_system)


def for_submitit_cluster(cluster: str) -> str | None:
    """The scheduler whose jobs submitit's ``cluster`` submits (None for its local executors)."""
    return next((n for n, c in SCHEDULER_CLASSES.items() if c.submitit_cluster == cluster), None)


def get(name: str) -> Scheduler:
    """An instance of the named scheduler."""
    return scheduler_class(name)()


def for_job_id(job_id: str) -> str:
    """The scheduler a job id with no record belongs to: this machine's own when the id has its
    form (a number on a SLURM machine is a SLURM job), else the first whose form it has
    (``local-7`` is the local scheduler's wherever it is asked)."""
    detected = detect()[0]
    if SCHEDULER_CLASSES[detected].id_pattern.fullmatch(job_id):
        return detected
    for name, cls in SCHEDULER_CLASSES.items():
        if cls.id_pattern.fullmatch(job_id):
            return name
    return detected
