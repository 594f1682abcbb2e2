"""One handle on a submitted job, however it was submitted: ``hpcbench submit``, ``api.submit``,
``api.job(ID)`` for an earlier one, or ``api.submit_training`` through submitit.

It answers as submitit's ``Job`` does: ``job_id``, ``state``, ``done()``, ``wait()``,
``cancel()``, ``stdout()``, ``stderr()``, ``result()`` and ``results()``. For a script job,
``result()`` waits for the job and returns rank 0's ``metrics.json`` from the job's run directory
(what the trainer writes there), or raises :class:`JobFailed` whose message holds the first
failing rank's traceback. Nothing here imports torch: it runs on login nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcbench.files import read_tail
from hpcbench.jobs import job_store
from hpcbench.jobs.cancel_mark import cancel_marks
from hpcbench.jobs.follow import LogFollower
from hpcbench.jobs.logs import RankError, error_tail, first_rank_error, preflight_line
from hpcbench.jobs.remote import RemoteHost, login_for, using
from hpcbench.jobs.schedulers import for_submitit_cluster
from hpcbench.jobs.schedulers import get as get_scheduler
from hpcbench.jobs.schedulers.base import (
    JobRecord,
    JobStatus,
    Scheduler,
    SchedulerError,
    array_status,
)
from hpcbench.jobs.schedulers.commands import tail
from hpcbench.jsonfile import JsonFileError, read_json

METRICS_FILE = "metrics.json"  # what rank 0 of the trainer writes into the run directory


class JobFailed(RuntimeError):
    """The job did not complete, or completed without results; the message says how it ended
    and holds the first failing rank's traceback (or the tail of its error log)."""

    def __init__(self, report: str, status: JobStatus | None = None) -> None:
        super().__init__(report)
        self.status = status


class Job:
    """A submitted job. Build it with :func:`hpcbench.api.submit`, :func:`hpcbench.api.job` or
    :func:`hpcbench.api.submit_training`; ``record`` says where its script, logs and run directory
    are (None for a submitit job, whose files submitit keeps)."""

    def __init__(
        self,
        record: JobRecord | None,
        scheduler: Scheduler | None = None,
        record_error: str = "",
        submitit_job: Any = None,
    ) -> None:
        self.record = record
        self._scheduler = scheduler
        self._submitit = submitit_job
        self._host: RemoteHost | None = None
        #: why the job could not be remembered for ``hpcbench logs`` ('' when it was)
        self.record_error = record_error

    @classmethod
    def from_submitit(cls, submitit_job: Any) -> Job:
        return cls(None, submitit_job=submitit_job)

    @property
    def submitit_job(self) -> Any:
        """The submitit ``Job`` behind this handle (its ``get_info()``, ``paths``, ...); None for
        a job submitted as a script."""
        return self._submitit

    def __repr__(self) -> str:
        return f"Job({self.job_id!r}, scheduler={self.scheduler_name!r})"

    # ------------------------------------------------------------------------ what it is

    @property
    def job_id(self) -> str:
        if self._submitit is not None:
            return str(self._submitit.job_id)
        assert self.record is not None
        return self.record.job_id

    @property
    def scheduler_name(self) -> str:
        if self._submitit is not None:
            return f"submitit ({type(self._submitit).__name__})"
        assert self.record is not None
        return self.record.scheduler

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            assert self.record is not None, "a submitit job has no hpcbench scheduler"
            self._scheduler = get_scheduler(self.record.scheduler)
        return self._scheduler

    # ------------------------------------------------------------------------- its state

    @property
    def tasks(self) -> tuple[str, ...]:
        """An array job's task ids (each a job of its own: ``api.job(task)``); () otherwise."""
        return self.record.tasks if self.record is not None else ()

    # -------------------------------------------------------------- a login node over SSH

    def login_node(self) -> RemoteHost | None:
        """The login node the job was submitted to over SSH (None: this machine's scheduler)."""
        if self._host is None:
            self._host = login_for(self.record)
        return self._host

    def fetch(self, *paths: Path) -> None:
        """Bring the job's files back from the login node (its logs and run directory by
        default; only what changed, with rsync); nothing for a job of this machine."""
        host = self.login_node()
        if host is None or self.record is None:
            return
        r = self.record
        host.pull(list(paths) or [r.stdout_path, r.stderr_path, r.run_dir])

    def status(self) -> JobStatus:
        with using(self.login_node()):
            return self._status()

    def _status(self) -> JobStatus:
        if self._submitit is not None:
            return JobStatus(str(self._submitit.state))
        if self.tasks:
            found = self.scheduler.statuses(list(self.tasks))
            return array_status([found[t] for t in self.tasks])
        return self.scheduler.statuses([self.job_id])[self.job_id]

    @property
    def state(self) -> str:
        return self.status().state

    def done(self) -> bool:
        if self._submitit is not None:
            return bool(self._submitit.done())
        return self.status().finished

    def wait(
        self,
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        on_state: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Poll until the job has finished (backing off); its final status. ``on_line`` is
        given each new line of the job's stdout log as it arrives (about once a second),
        ``on_state`` the job's status each time its state or the scheduler's reason changes
        (pending for Resources, running, ...)."""
        with using(self.login_node()):
            status = self._wait(timeout, on_line, _changes(on_state))
            self.fetch()  # its logs and run directory, from the login node if there is one
        return status

    def _wait(
        self,
        timeout: float | None,
        on_line: Callable[[str], None] | None,
        on_status: Callable[[str, JobStatus], None] | None = None,
    ) -> JobStatus:
        if self._submitit is not None:
            self._submitit.wait()
            return self.status()
        on_tick = None
        if on_line is not None:
            assert self.record is not None
            follower = LogFollower(self.record.stdout_path)
            stdout = self.record.stdout_path

            def on_tick() -> None:
                self.fetch(stdout)  # from the login node, when there is one
                for line in follower.new_lines():
                    on_line(line)

        if self.tasks:
            found = self.scheduler.wait(list(self.tasks), timeout, on_tick)
            status = array_status([found[t] for t in self.tasks])
        else:
            status = self.scheduler.wait([self.job_id], timeout, on_tick, on_status)[self.job_id]
        if on_line is not None:
            self.fetch(stdout)
            for line in follower.rest():  # written since the last look, and an unended last line
                on_line(line)
        return status

    def cancel(self) -> None:
        if self._submitit is not None:
            self._submitit.cancel()
            return
        ids = list(self.tasks) or [self.job_id]
        with cancel_marks(ids, self.scheduler.name), using(self.login_node()):
            self.scheduler.cancel(ids)  # the marks: the script then never requeues the job

    # ------------------------------------------------------------------------- its output

    def stdout(self) -> str:
        if self._submitit is not None:
            return self._submitit.stdout() or ""
        assert self.record is not None
        self.fetch(self.record.stdout_path)
        return _read(self.record.stdout_path)

    def stderr(self) -> str:
        if self._submitit is not None:
            return self._submitit.stderr() or ""
        assert self.record is not None
        self.fetch(self.record.stderr_path)
        return _read(self.record.stderr_path)

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Rank 0's results (the trainer's ``metrics.json``), once the job has finished.

        Raises :class:`JobFailed` when the job did not complete or wrote no results, and
        ``TimeoutError`` when ``timeout`` seconds pass first."""
        if self._submitit is not None:
            return self._submitit.results()[0]
        if self.tasks:
            raise JobFailed(
                f"job {self.job_id} is an array of {len(self.tasks)} tasks: results() gives "
                "each task's, api.job(TASK).result() one task's"
            )
        status = self.wait(timeout)
        if status.state != "COMPLETED":
            raise JobFailed(self.failure_report(status), status)
        assert self.record is not None
        path = self.record.run_dir / METRICS_FILE
        try:
            data = read_json(path)
        except JsonFileError as err:
            if err.missing:
                raise JobFailed(
                    f"job {self.job_id} completed but wrote no {METRICS_FILE} in "
                    f"{self.record.run_dir} (result() reads what the trainer writes; another "
                    f"program's output is in {self.record.stdout_path})",
                    status,
                ) from None
            raise JobFailed(f"job {self.job_id}: {err}", status) from None
        if not isinstance(data, dict):
            raise JobFailed(f"job {self.job_id}: {path} is not a JSON object", status)
        return data

    def results(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every task's results where the program writes them: each task's for a submitit job
        or an array job (a task that wrote none raises :class:`JobFailed`); for a script job
        the trainer writes rank 0's only, so a list of that one."""
        if self._submitit is not None:
            return list(self._submitit.results())
        if self.tasks:  # an array: each task's, in task order (each a job of its own)
            self.wait(timeout)
            found = [job_store.lookup(task, self.scheduler.name) for task in self.tasks]
            return [Job(record, self.scheduler).result() for record in found if record]
        return [self.result(timeout)]

    def accounting(self) -> dict[str, Any]:
        """What the batch system recorded of this job once it has finished (queue wait,
        elapsed and CPU time, memory high-water marks, nodes, energy: the layout in
        :mod:`hpcbench.jobs.accounting`), read once and kept as ``accounting.json`` in its run
        directory. A job still queued or running, or one without accounting, gives a record
        whose ``available`` is false and whose ``reason`` says why."""
        from hpcbench.jobs.accounting.reading import account_finished
        from hpcbench.jobs.accounting.records import unavailable

        if self._submitit is not None:  # submitit keeps the files; the scheduler still answers
            cluster = type(self._submitit).__module__.split(".")[1:2]
            scheduler = for_submitit_cluster(cluster[0] if cluster else "")
            if scheduler is None:
                why = f"not a job of a batch system ({type(self._submitit).__name__})"
                return unavailable(self.scheduler_name, self.job_id, "none", why)
            return account_finished(scheduler, self.job_id, None)
        assert self.record is not None
        if self.tasks:
            return unavailable(
                self.record.scheduler,
                self.job_id,
                "none",
                f"an array of {len(self.tasks)} tasks: api.job(TASK).accounting() gives each task's",
            )
        try:
            status = self.status()
        except SchedulerError as err:
            return unavailable(self.record.scheduler, self.job_id, "none", str(err))
        if not status.finished:
            return unavailable(
                self.record.scheduler, self.job_id, "none", f"the job is {status.state.lower()}"
            )
        with using(self.login_node()):
            return account_finished(self.record.scheduler, self.job_id, self.record.run_dir)

    def failure_report(self, status: JobStatus, lines: int = 30) -> str:
        """How the job ended, the first failing rank's traceback, else the tail of its error log."""
        code = "" if status.exit_code is None else f" with exit code {status.exit_code}"
        why = f" ({status.reason})" if status.reason else ""
        report = [f"job {self.job_id} {status.state.lower()}{code}{why}"]
        # submit --preflight's verdict: the allocation failed, not the program
        if self.record is not None and (said := preflight_line(self.record.stderr_path)):
            report.append(said)
        err = _first_failure((self.stderr(), self.stdout()))
        if err is not None and err.traceback:
            report += [f"first failing {who_failed(err.rank)}:", err.traceback]
        elif self.record is not None and (
            err_tail := error_tail(tail(self.record.stderr_path, 4 * lines), lines)
            or tail(self.record.stdout_path, lines)
        ):
            report += [f"last lines of {self.record.stderr_path}:", err_tail]
        if self.record is not None:
            report.append(f"logs: {self.record.stdout_path} and {self.record.stderr_path}")
        return "\n".join(report)


def _changes(
    on_state: Callable[[JobStatus], None] | None,
) -> Callable[[str, JobStatus], None] | None:
    """``on_state`` called only when a job's (state, reason) differs from its last one."""
    if on_state is None:
        return None
    last: dict[str, tuple[str, str]] = {}

    def seen(job_id: str, status: JobStatus) -> None:
        now = (status.state, status.reason)
        if last.get(job_id) != now:
            last[job_id] = now
            on_state(status)

    return seen


#: how much of a log's end is read (a regular file only: a FIFO or a device is no log)
LOG_READ_LIMIT = 16 * 1024 * 1024


def _read(path: Path) -> str:
    try:
        return read_tail(path, LOG_READ_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""


def who_failed(rank: str | None) -> str:
    """The failing rank as a report names it: "rank 3", "rank (one of 2-3)" where the launcher
    reported several together, "a rank" where the log does not say."""
    if rank is None:
        return "a rank"
    return f"rank (one of {rank})" if any(c in rank for c in "-,") else f"rank {rank}"


def _first_failure(logs: tuple[str, ...]) -> RankError | None:
    """A rank's traceback in any of the logs, else a rank's one-line error in any of them."""
    for one_line_errors in (False, True):
        for text in logs:
            found = first_rank_error(text, one_line_errors)
            if found is not None and found.traceback:
                return found
    return None
