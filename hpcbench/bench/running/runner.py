"""Running a matrix: every run a job of its own, one after another, through any scheduler.

The order interleaves configurations (round 1 of every configuration, then round 2 …), so that a
machine that slows down during the matrix slows every configuration alike; energy runs are runs of
their own (the sampler never perturbs a timing run), interleaved the same way after each round's
timing runs. Each run is the trainer as a job: the matrix's job spec (or the defaults) with the
configuration's nodes, ranks, launcher, strategy and device; its run directory is
``RESULTS/runs/<config>/<job name>-<job id>``.

``RESULTS/runs.json`` is rewritten (atomically) before and after every run, so a matrix that was
interrupted continues where it stopped: completed runs are kept, a run that was under way is
waited for (or found finished), failed runs stay failed with their error unless asked to retry.
Nothing here imports torch: it runs on a login node.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpcbench.atomic import lock_directory, write_json_atomically
from hpcbench.bench.analysing.estimates import chosen_factors
from hpcbench.bench.reading.results_documents import BenchDocument, RunsDocument
from hpcbench.bench.reading.results_reader import (
    BENCH_FORMAT,
    RUNS_FORMAT,
    AnalysisError,
    read_document,
)
from hpcbench.bench.reading.run_lines import epoch_line, outcome, time_left
from hpcbench.bench.running.machine_load import other_work
from hpcbench.bench.running.matrix import Matrix, MatrixError
from hpcbench.bench.running.provenance import provenance
from hpcbench.bench.running.run_plan import Run, plan
from hpcbench.bench.running.run_side import record_run_side
from hpcbench.bench.running.run_specs import ENERGY, idle_spec, run_spec
from hpcbench.jobs import schedulers, submission
from hpcbench.jobs.accounting.reading import account_finished, keeps_accounting
from hpcbench.jobs.job import Job
from hpcbench.jobs.remote import RemoteHost, using
from hpcbench.jobs.schedulers.base import JobRecord, SchedulerError
from hpcbench.jobs.schedulers.errors import SchedulerUnreachable

FINISHED = ("completed", "failed")
SUBMIT_RETRIES = (10.0, 30.0)  # seconds before asking a refusing scheduler again
# the trainer's line at the end of each epoch, after any launcher's rank label


class BenchError(RuntimeError):
    """The matrix cannot go on (one line naming the file or the run)."""


class Bench:
    """A matrix and its results directory; :meth:`run` runs what is left of it."""

    def __init__(
        self,
        matrix: Matrix,
        results: str | Path,
        scheduler: str | None = None,
        cwd: str | Path | None = None,
        echo: Callable[[str], None] = print,
        host: str | None = None,
        remote_dir: str | None = None,
    ) -> None:
        self.matrix = matrix
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.results = (self.cwd / results).resolve()
        self.scheduler = scheduler
        self.echo = echo
        self.runs: list[Run] = []
        self._said_no_accounting = False
        # the login node every run goes to over SSH, over the job spec's (checked here)
        self.where = submission.login_fields(host, remote_dir)
        self._login: tuple[RemoteHost | None] | None = None

    @property
    def login(self) -> RemoteHost | None:
        """The login node the runs go to over SSH (None: this machine's scheduler)."""
        if self._login is None:
            spec = self._placed(submission.load_spec(self.matrix.job, smoke=self.matrix.smoke))
            self._login = (submission.remote_host(spec, self.cwd),)
        return self._login[0]

    def _placed(self, spec: Any) -> Any:
        """``spec`` sent to the login node given to the bench, if one was."""
        for key, value in self.where.items():
            setattr(spec.scheduler, key, value)
        return spec

    # ----------------------------------------------------------------------- the directory

    @property
    def runs_file(self) -> Path:
        return self.results / "runs.json"

    def open(self) -> bool:
        """Create the results directory, or reopen it for the same matrix; True when resumed."""
        bench_file = self.results / "bench.json"
        if self.results.exists() and not self.results.is_dir():
            raise BenchError(f"--results {self.results}: is a file, not a directory")
        if (
            not bench_file.exists()
            and self.results.is_dir()
            and any(p.name != ".lock" for p in self.results.iterdir())
        ):
            raise BenchError(
                f"--results {self.results}: exists and is not a matrix's results directory "
                "(no bench.json); give a new directory"
            )
        recorded = _read_json(bench_file, BENCH_FORMAT) if bench_file.exists() else None
        self.where = submission.recorded_login(
            bench_file, recorded, self.where, self.results, self.cwd
        )
        self._login = None
        self._lock()
        if recorded is not None:
            if _identity(recorded.get("matrix")) != _identity(self.matrix.to_dict()):
                raise BenchError(
                    f"{bench_file}: holds another matrix; resume it with the matrix it was started "
                    "with, or give a new --results directory"
                )
            if recorded.get("matrix") != self.matrix.to_dict():  # new references or factors
                recorded["matrix"] = self.matrix.to_dict()
                recorded["estimates"] = chosen_factors(self.matrix.estimates)
                write_json_atomically(bench_file, recorded)
            data = _read_json(self.runs_file, RUNS_FORMAT)
            try:
                self.runs = [Run(**r) for r in data["runs"]]
            except (KeyError, TypeError) as err:
                raise BenchError(f"{self.runs_file}: not a runs file of hpcbench ({err})") from None
            # a run the matrix plans but the file lost (edited, an older version) is run again
            recorded = {(r.config, r.kind, r.rep) for r in self.runs}
            lost = [r for r in plan(self.matrix) if (r.config, r.kind, r.rep) not in recorded]
            if lost:
                self.runs += lost
                self._save()
            return True
        write_json_atomically(
            bench_file,
            {
                "format": BENCH_FORMAT,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "matrix": self.matrix.to_dict(),
                "provenance": provenance(self.cwd),
                "estimates": chosen_factors(self.matrix.estimates),
                **({"login": self.where} if self.where else {}),
            },
        )
        self.runs = plan(self.matrix)
        self._save()
        return False

    def _lock(self) -> None:
        """Hold ``RESULTS/.lock`` while this process runs the matrix: a second ``bench`` on the
        same directory would share the machine with it and overwrite its records."""
        try:
            self._lock_fd = lock_directory(self.results)  # released when the process ends
        except BlockingIOError:
            raise BenchError(
                f"--results {self.results}: another hpcbench bench is running this matrix; wait "
                "for it (or stop it), then run this again to continue"
            ) from None
        except OSError as err:
            raise BenchError(f"--results {self.results}: cannot use it ({err.strerror})") from None

    def _save(self) -> None:
        write_json_atomically(
            self.runs_file, {"format": RUNS_FORMAT, "runs": [asdict(r) for r in self.runs]}
        )

    # ---------------------------------------------------------------------------- the runs

    def spec_for(self, run: Run) -> Any:
        """The job spec of one run: the matrix's job with this configuration's shape."""
        output = self._relative(self.results / "runs" / run.config)
        return self._placed(run_spec(self.matrix, run, output, self.scheduler))

    def idle_spec(self) -> Any:
        """The idle-power job's spec (:func:`hpcbench.bench.running.run_specs.idle_spec`)."""
        output = self._relative(self.results / "idle")
        idle_file = self.results / "idle.json"
        if self.login is not None:  # named where the job runs: the login node's directory
            idle_file = Path(self._relative(idle_file))
        return self._placed(idle_spec(self.matrix, output, idle_file, self.scheduler))

    def measure_idle(self) -> None:
        """Before energy runs: a one-task job measures a compute node's idle power into
        ``idle.json`` (once; a failure is reported and the net energy stays unavailable)."""
        m = self.matrix
        idle_file = self.results / "idle.json"
        if not m.energy_repetitions or not m.idle_seconds or idle_file.exists():
            return
        try:
            spec = self.idle_spec()
            job = submission.submit(spec, self.scheduler, cwd=self.cwd)
            self.echo(f"idle power: job {job.job_id}, {m.idle_seconds:g} s")
            status = job.wait()
            job.fetch(idle_file)  # from the login node, when there is one
        except SchedulerUnreachable:
            raise
        except (SchedulerError, ValueError) as err:
            self.echo(f"idle power: not measured ({err}); net energy will be unavailable")
            return
        if status.state != "COMPLETED" or not idle_file.is_file():
            self.echo(
                f"idle power: not measured (job {job.job_id} {status.state.lower()}; "
                f"{job.record.stderr_path if job.record else ''}); net energy will be unavailable"
            )

    def _local(self, spec: Any) -> bool:
        """Whether this run goes to the local scheduler (this machine)."""
        with using(self.login):
            name = submission.resolve_scheduler(spec, self.scheduler)[0]
        return schedulers.scheduler_class(name).plays_every_system

    def _relative(self, path: Path) -> str:
        return os.path.relpath(path, self.cwd) if path.is_relative_to(self.cwd) else str(path)

    def run(self, retry_failed: bool = False) -> list[Run]:
        """Run every run not yet completed (failed ones too with ``retry_failed``)."""
        if any(r.kind == ENERGY and r.status not in FINISHED for r in self.runs):
            self.measure_idle()
        todo = [
            r
            for r in self.runs
            if r.status not in FINISHED or (retry_failed and r.status == "failed")
        ]
        durations: dict[str, list[float]] = {}
        for r in self.runs:
            if r.status == "completed" and r.started and r.ended:
                durations.setdefault(r.config, []).append(r.ended - r.started)
        for index, run in enumerate(todo, 1):
            prefix = f"[{index}/{len(todo)}] {run.label}"
            if run.status == "running" and run.job_id:
                job = self._reattach(run)
            else:
                job = self._submit(run, prefix)
            if job is not None:
                self._finish(run, job, prefix)
            if run.status == "completed" and run.started and run.ended:
                durations.setdefault(run.config, []).append(run.ended - run.started)
            left = time_left(todo[index:], durations)
            self.echo(f"{prefix}: {run.status}{outcome(self.results, run)}{left}")
            if self.matrix.cooldown_s and index < len(todo):
                time.sleep(self.matrix.cooldown_s)
        return self.runs

    def _submit(self, run: Run, prefix: str) -> Job | None:
        try:
            spec = self.spec_for(run)
            if self._local(spec):
                run.shared = other_work()
                if run.shared:
                    self.echo(f"{prefix}: warning: {run.shared}")
            job = self._submit_retrying(spec, prefix)
        except SchedulerUnreachable:
            raise  # no run can be submitted: the matrix stops, its runs stay to be done
        except (SchedulerError, ValueError) as err:  # SpecError, RenderError are ValueErrors
            run.status, run.error, run.ended = "failed", f"not submitted: {err}", time.time()
            self._save()
            return None
        assert job.record is not None
        record = job.record
        run.status, run.job_id, run.scheduler = "running", job.job_id, record.scheduler
        run.run_dir = os.path.relpath(record.run_dir, self.results)
        run.stdout, run.stderr = str(record.stdout_path), str(record.stderr_path)
        run.script = str(record.script_path)
        run.started, run.error = time.time(), ""
        self._save()
        self.echo(f"{prefix}: job {job.job_id} ({record.scheduler})")
        return job

    def _submit_retrying(self, spec: Any, prefix: str) -> Job:
        """Submit; a scheduler that refuses for a moment (a full queue) is asked again after
        10 s and 30 s before the run counts as failed. One whose controller does not answer is
        asked once more after 10 s, then :class:`SchedulerUnreachable` stops the matrix: every
        run would wait and fail the same way."""
        for delay in SUBMIT_RETRIES:
            try:
                return submission.submit(spec, self.scheduler, cwd=self.cwd)
            except SchedulerUnreachable as err:
                if delay != SUBMIT_RETRIES[0]:
                    raise
                self.echo(f"{prefix}: not submitted ({err}); again in {delay:g} s")
                time.sleep(delay)
            except SchedulerError as err:
                self.echo(f"{prefix}: not submitted ({err}); again in {delay:g} s")
                time.sleep(delay)
        return submission.submit(spec, self.scheduler, cwd=self.cwd)

    def _reattach(self, run: Run) -> Job:
        record = JobRecord(
            run.job_id or "",
            run.scheduler or schedulers.this_machine(),
            Path(run.script or ""),
            Path(run.stdout or ""),
            Path(run.stderr or ""),
            self.results / (run.run_dir or ""),
            (),
            *submission.remote_fields(self.login),
        )
        return Job(record)

    def _finish(self, run: Run, job: Job, prefix: str) -> None:
        last = [""]

        def on_line(line: str) -> None:  # the trainer's epoch lines and a user's script's
            shown = epoch_line(line)
            if shown is not None and shown != last[0]:  # once, not once per rank
                last[0] = shown
                self.echo(f"{prefix}: {shown}")

        try:
            status = job.wait(on_line=on_line)
        except SchedulerUnreachable:
            raise  # the login node is gone: the run stays running, reattached when resumed
        except SchedulerError as err:
            run.status, run.error = "failed", str(err)
        else:
            run.ended = time.time()
            documents = self.results / (run.run_dir or "") / "metrics.json"
            if status.state == "COMPLETED" and documents.is_file():
                run.status = "completed"
            elif status.state == "COMPLETED" and self.matrix.program is not None:
                run.status = "failed"
                run.error = (
                    f"{documents.parent}: the program ended without writing metrics.json "
                    "(hpcbench.measure's run never finished: an exception, an early exit, or "
                    "no measure.run at all)"
                )
            else:
                run.status = "failed"
                run.error = job.failure_report(status, 8).strip()
        run.ended = run.ended or time.time()
        self._save()
        self._account(run)
        if run.status == "completed":
            record_run_side(self.results, run.run_dir)

    def _account(self, run: Run) -> None:
        """Keep the scheduler's accounting of the run's job beside its results (one ``sacct``,
        ``qacct``, ``qstat -x -f`` or ``bacct``; where there is none, why)."""
        if not run.job_id or not run.run_dir or run.status != "completed" and not run.started:
            return
        scheduler = run.scheduler or schedulers.this_machine()
        with using(self.login):
            record = account_finished(scheduler, run.job_id, self.results / run.run_dir)
        if record.get("available") is False and not self._said_no_accounting:
            self._said_no_accounting = True
            if keeps_accounting(scheduler):
                self.echo(f"no scheduler accounting for this matrix ({record.get('reason')})")


def _identity(matrix: Any) -> Any:
    """What a resumed matrix must still be: all but its references and estimate factors,
    which may change between runs (the report and check read the newest)."""
    if not isinstance(matrix, dict):
        return matrix
    return {k: v for k, v in matrix.items() if k not in ("reference", "estimates")}


def _read_json(path: Path, fmt: str) -> BenchDocument | RunsDocument:
    try:
        return read_document(path, fmt, "this results directory is incomplete")
    except AnalysisError as err:
        raise BenchError(str(err)) from None


__all__ = ["BENCH_FORMAT", "Bench", "BenchError", "MatrixError", "Run", "plan", "provenance"]
