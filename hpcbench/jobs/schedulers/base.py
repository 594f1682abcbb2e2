"""The scheduler protocol, the job handle and the polling loop every scheduler shares.

A scheduler knows four things: how to submit a script (returning a job id), how to ask the state of
many jobs in one call, how to cancel, and where a job's logs go. Everything else (waiting with
back-off, failure reports) is written once here.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hpcbench.jobs.launchers import Launcher, launcher_for
from hpcbench.jobs.schedulers.errors import JobIdError, SchedulerError
from hpcbench.jobs.schedulers.polling import backoff_intervals, poll_ceiling, sleep_ticking
from hpcbench.jobs.shell import ShellVar, Word, quote_word
from hpcbench.jobs.spec import JobSpec, OwnOption, own_value
from hpcbench.plugins import registered

# States, named as SLURM names them; every scheduler maps its own onto these.
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, UNKNOWN = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "UNKNOWN",
)
# Ended by the scheduler for a job of higher priority (SLURM's PREEMPTED): not the user's cancel.
# A job SLURM requeues on preemption shows PENDING again under its own id instead.
PREEMPTED = "PREEMPTED"
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED})


@dataclass
class JobStatus:
    state: str
    exit_code: int | None = None
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


def array_status(tasks: Sequence[JobStatus]) -> JobStatus:
    """One state for an array from its tasks': running while any runs, pending while any waits,
    else completed when all completed, else how the first that did not ended, counted."""
    if not tasks:
        return JobStatus(UNKNOWN, None, "an array without tasks")
    for state in (RUNNING, PENDING, UNKNOWN):
        if any(t.state == state for t in tasks):
            count = sum(t.state == state for t in tasks)
            return JobStatus(state, None, f"{count} of {len(tasks)} tasks {state.lower()}")
    ended = [t for t in tasks if t.state != COMPLETED]
    if not ended:
        return JobStatus(COMPLETED, 0, f"{len(tasks)} tasks completed")
    first = ended[0]
    return JobStatus(
        first.state, first.exit_code, f"{len(ended)} of {len(tasks)} tasks did not complete"
    )


@dataclass(frozen=True)
class JobRecord:
    """Where a submitted job's files are: what :mod:`hpcbench.jobs.registry` remembers of it, and
    what :class:`hpcbench.jobs.job.Job` reads."""

    job_id: str
    scheduler: str
    script_path: Path
    stdout_path: Path
    stderr_path: Path
    run_dir: Path
    #: an array job's tasks (their ids; each has a record of its own), empty for a plain job
    tasks: tuple[str, ...] = ()
    #: the login node it was submitted to over SSH ('' for this machine's scheduler), the
    #: working directory there, and the local directory it mirrors
    host: str = ""
    remote_dir: str = ""
    local_dir: str = ""


class Scheduler(ABC):
    """One batch system. A subclass, in its own package of :mod:`hpcbench.jobs.schedulers` with
    its template beside the others, declares everything that differs between systems; the rest of hpcbench learns the
    list of schedulers from these classes (:data:`hpcbench.jobs.schedulers.SCHEDULER_CLASSES`)."""

    #: the name users give (``--scheduler NAME``, ``scheduler.name``)
    name: ClassVar[str] = ""
    #: the Jinja template (built-in, or the user's of the same name) and the script copy's suffix
    template: ClassVar[str] = ""
    #: the directory holding :attr:`template` when it is not one of hpcbench's own (a plug-in's)
    template_dir: ClassVar[Path | None] = None
    script_suffix: ClassVar[str] = ".sh"
    #: the prefix of its directive lines (``#SBATCH``); '' for a scheduler that reads none
    directive_prefix: ClassVar[str] = ""
    #: the command that queues a job (what :meth:`detect` looks for on PATH)
    submit_command: ClassVar[str] = ""
    #: a scheduler that plays every batch system on this machine: a launcher that only another
    #: batch system has (srun) is replaced by its stand-in (mpiexec)
    plays_every_system: ClassVar[bool] = False
    #: the order in which :func:`hpcbench.jobs.schedulers.detect` asks (lowest first)
    detect_order: ClassVar[int] = 50
    #: first poll interval and ceiling in seconds for ``wait`` (clusters: gentle on the
    #: controller, one call every 10 s at most; a job's end is seen within 10 s of it)
    poll_start: ClassVar[float] = 1.0
    poll_ceiling: ClassVar[float] = 10.0
    #: ``wait`` gives up on a job whose state is UNKNOWN this many polls in a row
    unknown_polls: ClassVar[int] = 10
    #: the ids this scheduler hands out, and how to say so when one does not match
    id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"[0-9]{1,18}")
    id_form: ClassVar[str] = "a number"
    #: The one definition of where a job's files go, under ``resources.output_dir``: the batch
    #: script's stdout and stderr, and the run directory. ``{name}`` is the job's file name,
    #: ``{letter_name}`` the same starting with a letter, ``{id}`` the job id and ``{seq}`` its
    #: part before the first dot. Python reads them (:meth:`log_paths`, :meth:`run_dir`) and the
    #: template writes them (``log_directives``, ``run_dir_shell`` in its context).
    log_names: ClassVar[tuple[str, str]] = ("{name}-{id}.out", "{name}-{id}.err")
    run_dir_name: ClassVar[str] = "{name}-{id}"
    #: What the scheduler substitutes with the job id in its log directives (``%j``); None when
    #: it names the files itself from the job name and id, given only a directory.
    log_id_token: ClassVar[str | None] = None

    #: Job arrays (a sweep's tasks): the variable holding a task's index (1, 2, …) in its
    #: script ('A|B': A, else B), the shell words that make the task's own job id there (what :meth:`task_id`
    #: gives), and the token in the log directives that the scheduler replaces with it.
    array_index_var: ClassVar[str] = ""
    array_job_id_shell: ClassVar[str] = ""
    array_log_token: ClassVar[str | None] = None

    #: how the scheduler warns a job before it ends it (the script's comment on requeueing;
    #: `lead` is replaced by the spec's requeue.lead)
    stop_warning: ClassVar[str] = "the scheduler's warning signal"
    #: the most ranks a job may have ('' reason: no limit of hpcbench's own)
    #: the job spec fields only this scheduler reads (:class:`~hpcbench.jobs.spec.OwnOption`)
    options: ClassVar[tuple[OwnOption, ...]] = ()
    #: the ways of requeueing a job it adds to ``requeue.method``'s "auto" and "resubmit"
    requeue_methods: ClassVar[tuple[str, ...]] = ()
    #: facts a cluster profile may record about it: key -> (what it says, its type)
    profile_notes: ClassVar[dict[str, tuple[str, type]]] = {}

    @classmethod
    def option(cls, spec: JobSpec, key: str) -> Any:
        """The value of its own option ``key`` in ``spec`` (the declared default if unset)."""
        return own_value(cls.options, spec, key)

    max_ranks: ClassVar[int | None] = None
    max_ranks_reason: ClassVar[str] = ""

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

    #: the batch system's name in messages (SLURM, Grid Engine)
    label: ClassVar[str] = ""
    #: characters its log directives interpret, refused in ``resources.output_dir``:
    #: (character, its name, how it reads it)
    log_path_refusals: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    @classmethod
    def other_submit_commands(cls) -> list[str]:
        """The submit commands of every other scheduler, in the order they are detected."""
        found: list[str] = []
        for other in defined_schedulers():
            if other is not cls and other.submit_command and other.submit_command not in found:
                found.append(other.submit_command)
        return found

    @classmethod
    def submitit_parameters(cls, spec: JobSpec, setup: list[str]) -> dict[str, Any]:
        """submitit's executor parameters only this batch system has (its
        :attr:`submitit_cluster`), for ``spec`` and the shell lines of its ``setup``."""
        return {}

    @classmethod
    def submitit_array_parameters(cls, max_parallel: int) -> dict[str, Any]:
        """submitit's parameters that cap how many tasks of an array run at once."""
        return {}

    @classmethod
    def task_id(cls, array_id: str, index: int) -> str:
        """The id of task ``index`` of the array job ``array_id`` (SLURM's ``1234_7``)."""
        return f"{array_id}_{index}"

    def task_log_paths(
        self, spec: JobSpec, task_id: str, index: int, cwd: Path
    ) -> tuple[Path, Path]:
        """Where an array task's stdout and stderr go."""
        return self.log_paths(spec, task_id, cwd)

    @classmethod
    def detect(cls) -> str | None:
        """Why this machine's batch system is this one ('' or None when it is not)."""
        return None

    #: the name submitit gives its executor for this batch system ('' where it has none)
    submitit_cluster: ClassVar[str] = ""
    #: whether :meth:`describe` reads the cluster's description
    describes_cluster: ClassVar[bool] = False
    #: the commands :meth:`describe` asks, as ``--help`` names them
    describe_commands: ClassVar[str] = ""
    #: the command its accounting reader asks, as ``--help`` names it ('' for none)
    accounting_command: ClassVar[str] = ""
    #: how its dependencies (``scheduler.after``) differ from "start after JOB succeeded"
    after_note: ClassVar[str] = ""

    def describe(self, partition: str | None = None) -> tuple[dict[str, Any], list[str]]:
        """What the cluster says of itself, as a profile's values (``hpcbench profile init``),
        and lines of notes for the profile's comments."""
        readers = [c.label for c in defined_schedulers() if c.describes_cluster]
        raise SchedulerError(
            f"profile init: hpcbench reads a cluster's description from {' and '.join(readers)} "
            f"only, not {self.name}; write the profile by hand (docs/cluster-guide.md)"
        )

    def preflight(self, spec: JobSpec) -> None:
        """Check ``spec`` against what the scheduler allows before submitting (default: none)."""
        return None

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        """The words that start one torchrun agent on each node of the allocation: by default
        ``mpiexec`` with one process per node (the MPI found at run time), none on one node."""
        if spec.resources.nodes == 1:
            return []
        return ["mpiexec", "-n", str(spec.resources.nodes), ShellVar('"${mpi_per_node[@]}"')]

    @classmethod
    def launch_words(cls, spec: JobSpec) -> list[Word]:
        """The launch line of a batch script: ``launcher.kind``'s launcher (or its stand-in, see
        :func:`~hpcbench.jobs.launchers.launcher_for`), given :meth:`node_agents`."""
        return cls.launcher(spec).words(spec, cls)

    @classmethod
    def launcher(cls, spec: JobSpec) -> type[Launcher]:
        """The launcher that starts ``spec``'s ranks under this scheduler."""
        labels = {c.name: c.label for c in defined_schedulers()}
        return launcher_for(spec.launcher.kind, cls.name, cls.plays_every_system, labels)

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        """The variables this scheduler sets in a job's batch script (writing any file they
        name into ``folder``): what a script rendered for it reads. Used to run scripts outside
        the scheduler, as the tests do."""
        return {}

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        """Values only this scheduler's template uses (formatted times, memory units…)."""
        return {}

    # ---------------------------------------------------------------------- where files go

    @staticmethod
    def _fields(spec: JobSpec, job_id: str) -> dict[str, str]:
        r = spec.resources
        return {
            "name": r.file_name,
            "letter_name": r.letter_first_name,
            "id": job_id,
            "seq": job_id.split(".", 1)[0],
        }

    def log_paths(self, spec: JobSpec, job_id: str, cwd: Path) -> tuple[Path, Path]:
        """Where the batch script's stdout and stderr go (as the template's directives say)."""
        base = cwd / spec.resources.output_dir
        fields = self._fields(spec, job_id)
        out, err = (name.format(**fields) for name in self.log_names)
        return base / out, base / err

    def run_dir(self, spec: JobSpec, job_id: str, cwd: Path) -> Path:
        fields = self._fields(spec, job_id)
        return cwd / spec.resources.output_dir / self.run_dir_name.format(**fields)

    @classmethod
    def escape_log_path(cls, path: str) -> str:
        """``path`` as the scheduler's log directive reads it literally (SLURM doubles ``%``)."""
        return path

    @classmethod
    def log_directives(cls, spec: JobSpec) -> tuple[str, str]:
        """The stdout and stderr paths the template writes in its directives: the file names of
        :attr:`log_names` with the scheduler's id token, or the directory alone (with a slash)
        when the scheduler names the files itself."""
        out_dir = cls.escape_log_path(spec.resources.output_dir)
        token = cls.array_log_token if spec.array is not None else cls.log_id_token
        if token is None:
            return f"{out_dir}/", f"{out_dir}/"
        fields = {**cls._fields(spec, token), "seq": token}
        out, err = (name.format(**fields) for name in cls.log_names)
        return f"{out_dir}/{out}", f"{out_dir}/{err}"

    @classmethod
    def run_dir_shell(cls, spec: JobSpec) -> str:
        """The run directory as a shell word for the script, the id read from ``$job_id``."""
        marker = "\x00"
        fields = {**cls._fields(spec, marker), "seq": marker}
        before, _, after = cls.run_dir_name.format(**fields).partition(marker)
        word = quote_word(f"{spec.resources.output_dir}/{before}") + '"$job_id"'
        return word + (quote_word(after) if after else "")

    # -------------------------------------------------------------------------- the system

    def check_ids(self, job_ids: Sequence[str]) -> None:
        """Refuse any id that is not of this scheduler's form (ids reach commands and paths)."""
        for job_id in job_ids:
            if not self.id_pattern.fullmatch(job_id):
                raise JobIdError(
                    f"job id {job_id!r} is not a {self.name} job id (expected {self.id_form})"
                )

    @abstractmethod
    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        """Queue the script; return the job id."""

    @abstractmethod
    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """The state of every job in ``job_ids``, from one scheduler call."""

    @abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs."""

    def poll_intervals(self) -> Iterator[float]:
        """The waits between polls of this scheduler: :func:`backoff_intervals` from
        ``poll_start`` to :func:`poll_ceiling` of its ``poll_ceiling``."""
        ceiling = poll_ceiling(self.poll_ceiling)
        return backoff_intervals(min(self.poll_start, ceiling), ceiling)

    def wait(
        self,
        jobs: Sequence[str | JobRecord],
        timeout: float | None = None,
        on_tick: Callable[[], None] | None = None,
        on_status: Callable[[str, JobStatus], None] | None = None,
    ) -> dict[str, JobStatus]:
        """Poll until every job has finished; one scheduler call per poll, backing off.
        ``on_tick`` is called about once a second meanwhile (to show the job's progress),
        ``on_status`` with each job's status at each poll.

        A job whose state stays UNKNOWN for ``unknown_polls`` polls in a row (the scheduler has
        forgotten it, or its answer cannot be read) ends the wait with a SchedulerError, so that
        a wait without a timeout still ends."""
        pending = {j if isinstance(j, str) else j.job_id for j in jobs}
        final: dict[str, JobStatus] = {}
        unknown: dict[str, int] = {}
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        for delay in self.poll_intervals():
            for job_id, status in self.statuses(sorted(pending)).items():
                if job_id not in pending:
                    continue
                if on_status is not None:
                    on_status(job_id, status)
                if status.finished:
                    final[job_id] = status
                    pending.discard(job_id)
                unknown[job_id] = unknown.get(job_id, 0) + 1 if status.state == UNKNOWN else 0
                if unknown[job_id] >= self.unknown_polls:
                    why = f" ({status.reason})" if status.reason else ""
                    raise SchedulerError(
                        f"job {job_id}: state unknown{why} in {self.unknown_polls} polls in a row "
                        f"over {time.monotonic() - started:.0f} s; stopped waiting "
                        f"(hpcbench status {job_id} asks again)"
                    )
            if not pending:
                return final
            if deadline is not None and time.monotonic() + delay > deadline:
                raise TimeoutError(
                    f"jobs still running after {timeout:.0f} s: {', '.join(sorted(pending))}"
                )
            sleep_ticking(delay, on_tick)
        raise AssertionError("unreachable")


def defined_schedulers() -> list[type[Scheduler]]:
    """Every scheduler class defined so far, in the order they are detected."""
    return sorted(registered(Scheduler), key=lambda c: (c.detect_order, c.name))
