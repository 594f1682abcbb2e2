"""Requeueing a job before the batch system ends it (``requeue.enabled``): how the batch system
warns a job before its time limit or a preemption, and the ways of requeueing it has of its own.

Every batch system says how it warns a job: ``stop_warning`` is the rendered script's comment on
requeueing (by default a generic phrase). One with a requeue command of its own (a job that
requeues itself and keeps its id) names it in ``requeue_methods``, which adds it to
``requeue.method``'s choices; without it a job is resubmitted.
"""

from __future__ import annotations

from typing import ClassVar


class Requeueing:
    """The batch system's stop signals and its own ways of requeueing."""

    #: how the scheduler warns a job before it ends it (the script's comment on requeueing;
    #: `lead` is replaced by the spec's requeue.lead)
    stop_warning: ClassVar[str] = "the scheduler's warning signal"
    #: the ways of requeueing a job it adds to ``requeue.method``'s "auto" and "resubmit"
    requeue_methods: ClassVar[tuple[str, ...]] = ()
