"""The scheduler protocol: the small core every batch system defines (:class:`Scheduler`), and
the names the rest of hpcbench imports from here (the job states, :class:`JobStatus`,
:class:`JobRecord`, :func:`defined_schedulers`).

The core is how to submit a script, read many jobs' states in one call and cancel, the template
and how its directives are written. Every other concern is a part of its own module, each a
small mixin with the defaults of a batch system that has nothing to say of it; the
:class:`Scheduler` base includes every part, so that the rest of hpcbench may ask any batch
system any part's question, and a batch system sets what differs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from hpcbench.jobs.schedulers.accounting import Accounting
from hpcbench.jobs.schedulers.arrays import JobArrays
from hpcbench.jobs.schedulers.dependencies import Dependencies
from hpcbench.jobs.schedulers.describing import ClusterDescription
from hpcbench.jobs.schedulers.detection import Detection, defined_schedulers
from hpcbench.jobs.schedulers.errors import JobIdError, SchedulerError
from hpcbench.jobs.schedulers.ids import JobIds
from hpcbench.jobs.schedulers.job_status import (
    CANCELLED,
    COMPLETED,
    FAILED,
    FINISHED,
    PENDING,
    PREEMPTED,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobRecord,
    JobStatus,
    array_status,
)
from hpcbench.jobs.schedulers.launching import Launching
from hpcbench.jobs.schedulers.limits import Limits
from hpcbench.jobs.schedulers.logs import LogLayout
from hpcbench.jobs.schedulers.own_options import OwnOptions
from hpcbench.jobs.schedulers.requeueing import Requeueing
from hpcbench.jobs.schedulers.script_values import ScriptValues
from hpcbench.jobs.schedulers.submitit_support import SubmititSupport
from hpcbench.jobs.schedulers.waiting import Waiting
from hpcbench.jobs.spec import JobSpec

__all__ = [
    "CANCELLED",
    "COMPLETED",
    "FAILED",
    "FINISHED",
    "PENDING",
    "PREEMPTED",
    "RUNNING",
    "TIMEOUT",
    "UNKNOWN",
    "JobIdError",
    "JobRecord",
    "JobStatus",
    "Scheduler",
    "SchedulerError",
    "array_status",
    "defined_schedulers",
]


class Scheduler(
    JobIds,
    LogLayout,
    Waiting,
    Launching,
    Detection,
    ScriptValues,
    JobArrays,
    Requeueing,
    Limits,
    OwnOptions,
    Accounting,
    Dependencies,
    ClusterDescription,
    SubmititSupport,
    ABC,
):
    """One batch system. A subclass, in its own package of :mod:`hpcbench.jobs.schedulers` with
    its template beside the others, declares everything that differs between systems; the rest
    of hpcbench learns the list of schedulers from these classes
    (:data:`hpcbench.jobs.schedulers.SCHEDULER_CLASSES`).

    A new batch system defines, in this order:

    1. ``name`` (``--scheduler NAME``) and ``label`` (its name in messages);
    2. ``template`` (and ``template_dir`` for a plug-in's own), ``script_suffix``;
    3. ``directive_prefix`` and, where its directives read quoted values otherwise,
       :meth:`quote_directive`;
    4. ``submit_command`` and :meth:`submit`, :meth:`statuses` (many jobs in one call) and
       :meth:`cancel`.

    Then, from the parts this base includes, what differs for it:

    - its job ids' form: ``id_pattern``, ``id_form`` (:mod:`.ids`);
    - where its logs and run directories go: ``log_id_token``, ``log_names``... (:mod:`.logs`);
    - recognising this machine: ``detect``, ``detect_order`` (:mod:`.detection`);
    - starting one launcher agent per node: ``node_agents`` (:mod:`.launching`);
    - its template's own values and a job's variables: ``template_context``,
      ``job_environment`` (:mod:`.script_values`);
    - job arrays: ``array_index_var``, ``array_job_id_shell``, ``task_id``... (:mod:`.arrays`);
    - its stop signals and requeueing: ``stop_warning``, ``requeue_methods``
      (:mod:`.requeueing`);
    - refusals before submitting: ``max_ranks``, ``preflight`` (:mod:`.limits`);
    - its own spec fields and profile facts: ``options``, ``profile_notes``
      (:mod:`.own_options`);
    - its accounting and cancel marks: ``accounting_command``, ``cancel_marks``
      (:mod:`hpcbench.jobs.schedulers.accounting`);
    - its dependencies' note: ``after_note`` (:mod:`.dependencies`);
    - ``hpcbench profile init``: ``describe``, ``describes_cluster`` (:mod:`.describing`);
    - submitit's executor: ``submitit_cluster``, ``submitit_parameters``
      (:mod:`.submitit_support`);
    - polling while it waits: ``poll_start``, ``poll_ceiling`` (:mod:`.waiting`).
    """

    #: the name users give (``--scheduler NAME``, ``scheduler.name``)
    name: ClassVar[str] = ""
    #: the batch system's name in messages (SLURM, Grid Engine)
    label: ClassVar[str] = ""
    #: the Jinja template (built-in, or the user's of the same name) and the script copy's suffix
    template: ClassVar[str] = ""
    #: the directory holding :attr:`template` when it is not one of hpcbench's own (a plug-in's)
    template_dir: ClassVar[Path | None] = None
    script_suffix: ClassVar[str] = ".sh"
    #: the prefix of its directive lines (``#SBATCH``); '' for a scheduler that reads none
    directive_prefix: ClassVar[str] = ""
    #: the command that queues a job (what :meth:`detect` looks for on PATH)
    submit_command: ClassVar[str] = ""

    @classmethod
    def quote_directive(cls, text: str) -> str:
        r"""A directive value that needs quotes (it is not a bare word): double-quoted. A qsub
        reads no escapes inside quotes (a ``"`` ends the value, a ``\`` stays), so by default a
        value holding either is refused."""
        if '"' in text or "\\" in text:
            raise SchedulerError(
                f"{text!r}: a {cls.name} directive value cannot hold '\"' or '\\' (its "
                f"{cls.submit_command or 'submit command'} reads no escapes inside quotes)"
            )
        return '"' + text + '"'

    @abstractmethod
    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        """Queue the script; return the job id."""

    @abstractmethod
    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """The state of every job in ``job_ids``, from one scheduler call."""

    @abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs."""
