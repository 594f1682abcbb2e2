"""Running a sweep: what is left of its tasks as ONE array job, through any scheduler.

The results directory holds everything::

    RESULTS/sweep.json            the sweep and its plan (every task: setting, repetition, run)
    RESULTS/submissions.json      each array job submitted: its id and which tasks it runs
    RESULTS/submissions/N/K.toml  task K of submission N: its settings (the trainer's --settings)
    RESULTS/submissions/N/K.run   the name of its run directory
    RESULTS/runs/<setting>/       each task's run directory (metrics.json when it completed)
    RESULTS/logs/                 the array tasks' logs

Each task reads its settings from its file by its task index: no setting reaches the batch script
as text. A task is completed when its run directory holds ``metrics.json``; the same command
continues an interrupted sweep (tasks still queued or running are followed, not submitted again;
failed ones are submitted again with ``retry_failed``). Nothing here imports torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpcbench.atomic import lock_directory, write_atomically, write_json_atomically
from hpcbench.bench.running.provenance import provenance
from hpcbench.jobs import schedulers
from hpcbench.jobs.job import Job
from hpcbench.jobs.program_args import check_program_args
from hpcbench.jobs.remote import using
from hpcbench.jobs.spec import Array, JobSpec
from hpcbench.jobs.submission import (
    load_spec,
    login_fields,
    recorded_login,
    resolve_scheduler,
    submit,
)
from hpcbench.jsonfile import JsonFileError, read_json
from hpcbench.sweep.documents import Submission, SubmissionsDocument, SweepDocument, SweepProgram
from hpcbench.sweep.plan import RUN_NAME, Sweep, SweepError, Task
from hpcbench.sweep.task_states import (
    FAILED,
    TODO,
    TaskState,
    TaskStates,
    counts,
)
from hpcbench.train.command_line import build_parser, configure
from hpcbench.train.config import ConfigError
from hpcbench.train.config_file import toml_value

SWEEP_FORMAT = "hpcbench-sweep/1"
SUBMISSIONS_FORMAT = "hpcbench-sweep-submissions/1"


class SweepRunner(TaskStates):
    """A sweep and its results directory: :meth:`run` submits what is left as one array job
    and follows it."""

    def __init__(
        self,
        sweep: Sweep,
        results: str | Path,
        scheduler: str | None = None,
        cwd: str | Path | None = None,
        echo: Callable[[str], None] = print,
        template_dirs: Sequence[str | Path] | None = None,
        host: str | None = None,
        remote_dir: str | None = None,
    ) -> None:
        self.sweep = sweep
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.results = (self.cwd / results).resolve()
        self.scheduler = scheduler
        self.echo = echo
        self.template_dirs = template_dirs
        self.tasks = sweep.tasks()
        self.submissions: list[Submission] = []
        self._preflighted: int | None = None  # the array size the scheduler's preflight passed
        self.where = login_fields(host, remote_dir)  # the login node, over the spec's

    # ----------------------------------------------------------------------- the directory

    @property
    def sweep_file(self) -> Path:
        return self.results / "sweep.json"

    @property
    def submissions_file(self) -> Path:
        return self.results / "submissions.json"

    def base_spec(self) -> JobSpec:
        """The job every task runs: the sweep's job spec, its trainer options after the job's,
        its logs in RESULTS/logs."""
        s = self.sweep
        program: SweepProgram = {**s.program, "args": []} if s.program else {}
        if s.trainer_args:
            program["args"] = list(s.trainer_args)
        return load_spec(
            s.job,
            smoke=s.smoke and s.job is not None,
            job_name=f"sweep-{s.name}",
            output_dir=self._relative(self.results / "logs"),
            **program,
            **({"requeue": False} if s.program else {}),
            **({"scheduler": self.scheduler} if self.scheduler else {}),
            **self.where,
        )

    def check_settings(self, spec: JobSpec) -> None:
        """Every setting over the job's own trainer options must be a configuration the trainer
        accepts: found now, not in every task on a compute node."""
        program = spec.program
        if self.sweep.program is not None:  # any program: its settings are its own to check
            return
        if program.command or program.script or program.module != "hpcbench.train":
            raise SweepError(
                f"{self.sweep.source}: job: a sweep runs the trainer (python -m hpcbench.train); "
                f"this job runs {' '.join(program.argv()[:3])}"
            )
        check_program_args(spec)  # a refused option: one line naming it
        given = vars(build_parser().parse_args(list(program.args)))
        given.pop("config", None)
        given.pop("settings", None)
        for task in self.tasks[: len(self.sweep.settings())]:
            try:
                config = configure(given, program.config, dict(task.setting))
            except ConfigError as err:
                raise SweepError(f"{self.sweep.source}: setting {task.run}: {err}") from None
            for option in ("output_dir", "checkpoint_dir"):
                if config.value(option) is not None:
                    raise SweepError(
                        f"{self.sweep.source}: the job's trainer options set "
                        f"--{option.replace('_', '-')}: each task writes its own run directory "
                        "(and its checkpoints there); remove it from the job and trainer_args"
                    )

    def base_seed(self) -> int:
        """The seed the job's trainer options give (``--seed``, its config file; 0 by
        default): the first repetition's; repetition R runs with this + R - 1."""
        program = self.base_spec().program
        if self.sweep.program is not None:
            return 0
        given = vars(build_parser().parse_args(list(program.args)))
        given.pop("config", None)
        given.pop("settings", None)
        try:
            return int(configure(given, program.config, {}).batch.seed)
        except (ConfigError, TypeError, ValueError):
            return 0

    def open(self) -> bool:
        """Create the results directory, or reopen it for the same sweep; True when continued.
        The job and every setting are checked first: a sweep that cannot run creates nothing."""
        self.check_settings(self.base_spec())
        if self.results.exists() and not self.results.is_dir():
            raise SweepError(f"--results {self.results}: is a file, not a directory")
        if (
            not self.sweep_file.exists()
            and self.results.is_dir()
            and any(p.name != ".lock" for p in self.results.iterdir())
        ):
            raise SweepError(
                f"--results {self.results}: exists and is not a sweep's results directory "
                "(no sweep.json); give a new directory"
            )
        recorded = self._read(self.sweep_file, SWEEP_FORMAT) if self.sweep_file.exists() else None
        self.where = recorded_login(self.sweep_file, recorded, self.where, self.results, self.cwd)
        self._login = None  # the login node it ran on, when it was not given again
        if not self.sweep_file.exists():
            self.preflight(len(self.tasks))  # what the scheduler would refuse: before any file
        self._lock()
        if recorded is not None:
            if recorded.get("sweep") != self.sweep.to_dict():
                raise SweepError(
                    f"{self.sweep_file}: holds another sweep; continue it with the sweep it was "
                    "started with, or give a new --results directory"
                )
            data = self._read(self.submissions_file, SUBMISSIONS_FORMAT)
            subs = data.get("submissions")
            if not isinstance(subs, list) or not all(_submission_ok(s) for s in subs):
                raise SweepError(f"{self.submissions_file}: not a submissions file of hpcbench")
            self.submissions = subs
            return True
        write_json_atomically(
            self.sweep_file,
            {
                "format": SWEEP_FORMAT,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "sweep": self.sweep.to_dict(),
                "tasks": [t.to_dict() for t in self.tasks],
                "provenance": provenance(self.cwd),
                **({"login": self.where} if self.where else {}),
            },
        )
        self._save()
        return False

    def _read(self, path: Path, fmt: str) -> SweepDocument | SubmissionsDocument:
        try:
            data = read_json(path, "this results directory is incomplete")
        except JsonFileError as err:
            raise SweepError(str(err)) from None
        if not isinstance(data, dict) or data.get("format") != fmt:
            raise SweepError(f"{path}: not a file of hpcbench sweep ({fmt})")
        return data

    def _lock(self) -> None:
        """Hold ``RESULTS/.lock`` while this process submits and follows the sweep."""
        try:
            self._lock_fd = lock_directory(self.results)  # released when the process ends
        except BlockingIOError:
            raise SweepError(
                f"--results {self.results}: another hpcbench sweep is following this sweep; "
                "wait for it (or stop it), then run this again"
            ) from None
        except OSError as err:
            raise SweepError(f"--results {self.results}: cannot use it ({err.strerror})") from None

    def close(self) -> None:
        """Let go of ``RESULTS/.lock`` (the process's end does too): another follower may start."""
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            os.close(fd)
            self._lock_fd = None

    def _save(self) -> None:
        write_json_atomically(
            self.submissions_file,
            {"format": SUBMISSIONS_FORMAT, "submissions": self.submissions},
        )

    # ------------------------------------------------------------------------- the states

    def run_dir(self, task: Task) -> Path:
        return self.results / "runs" / task.run

    # ------------------------------------------------------------------------- submitting

    def write_task_files(self, tasks: Sequence[Task]) -> Path:
        """The next submission's folder: task K's settings (``K.toml``) and run name (``K.run``)."""
        (self.results / "submissions").mkdir(parents=True, exist_ok=True)
        number = len(self.submissions) + 1
        while True:  # a folder left by a submission that was never recorded is not reused
            folder = self.results / "submissions" / str(number)
            try:
                folder.mkdir()
                break
            except FileExistsError:
                number += 1
        base = self.base_seed() if any(t.rep > 1 for t in tasks) else 0
        for k, task in enumerate(tasks, 1):
            setting = dict(task.setting)
            if task.rep > 1 and "seed" not in setting:  # each repetition its own initial weights
                setting["seed"] = base + task.rep - 1  # and data order (the first, the job's)
            lines = [f"# task {task.index} of sweep {self.sweep.name}: {task.run}"]
            lines += [f"{key} = {toml_value(value)}" for key, value in setting.items()]
            write_atomically(folder / f"{k}.toml", "\n".join(lines) + "\n")
            write_atomically(folder / f"{k}.run", task.run + "\n")
            if self.sweep.program is not None:  # its own arguments, each ended by a NUL
                words = self.sweep.task_arguments(task.setting)
                write_atomically(folder / f"{k}.args", "".join(f"{w}\0" for w in words))
        return folder

    def record_submission(
        self,
        job_id: str,
        scheduler: str,
        tasks: Sequence[Task],
        task_ids: Sequence[str],
        script: str,
    ) -> None:
        self.submissions.append(
            {
                "number": len(self.submissions) + 1,
                "job_id": job_id,
                "scheduler": scheduler,
                "tasks": [t.index for t in tasks],
                "task_ids": list(task_ids),
                "script": script,
                "submitted": time.time(),
            }
        )
        self._save()

    def to_do(self, retry_failed: bool = False) -> list[Task]:
        """The tasks not completed, queued nor running (failed ones only with ``retry_failed``)."""
        return [
            s.task for s in self.states() if s.state == TODO or (retry_failed and s.state == FAILED)
        ]

    def array_spec(self, count: int, folder: Path) -> JobSpec:
        """The job of one submission: an array of ``count`` tasks reading ``folder``."""
        spec = self.base_spec()
        parallel = self.sweep.max_parallel
        spec.array = Array(
            size=count,
            tasks_dir=self._placed(folder),
            runs_dir=self._placed(self.results / "runs"),
            max_parallel=min(parallel, count) if parallel else None,
            task_args=self.sweep.program is not None,
        )
        return spec

    def preflight(self, count: int) -> None:
        """Refuse now what the scheduler would refuse of an array of ``count`` tasks (SLURM's
        MaxArraySize, the partition's limits): before the sweep writes a file."""
        if count == self._preflighted:  # asked already (a new sweep: when it was opened)
            return
        spec = self.array_spec(count, self.results / "submissions")
        with using(self.login):
            name, _ = resolve_scheduler(spec, self.scheduler)
            schedulers.get(name).preflight(spec)
        self._preflighted = count

    def submit(self, tasks: Sequence[Task]) -> Job:
        """Submit ``tasks`` as one array job: checked first, then their settings files, then
        the script."""
        self.preflight(len(tasks))
        folder = self.write_task_files(tasks)
        spec = self.array_spec(len(tasks), folder)
        job = submit(spec, self.scheduler, self.template_dirs, cwd=self.cwd, preflight=False)
        assert job.record is not None
        record = job.record
        self.record_submission(
            job.job_id, record.scheduler, tasks, job.tasks, str(record.script_path)
        )
        return job

    # ---------------------------------------------------------------------------- the run

    def run(self, retry_failed: bool = False, wait: bool = True) -> list[TaskState]:
        """Submit what is left (failed tasks too with ``retry_failed``) as one array job, then
        follow every queued or running task until it ends (with ``wait``)."""
        todo = self.to_do(retry_failed)
        if todo:
            self.check_settings(self.base_spec())
            job = self.submit(todo)
            cap = f", at most {self.sweep.max_parallel} at once" if self.sweep.max_parallel else ""
            self.echo(
                f"submitted {len(todo)} task(s) as array job {job.job_id} "
                f"({job.record.scheduler if job.record else '?'}{cap})"
            )
        states = self.states()
        if wait:
            states = self.follow(states)
        return states


def _submission_ok(sub: Any) -> bool:
    """Whether ``sub`` is a record of a submission as :meth:`SweepRunner.record_submission`
    writes it."""
    return (
        isinstance(sub, dict)
        and isinstance(sub.get("job_id"), str)
        and isinstance(sub.get("scheduler"), str)
        and isinstance(sub.get("tasks"), list)
        and isinstance(sub.get("task_ids"), list)
        and len(sub["tasks"]) == len(sub["task_ids"])
        and all(isinstance(t, int) and not isinstance(t, bool) for t in sub["tasks"])
        and all(isinstance(t, str) for t in sub["task_ids"])
    )


def load_plan(results: str | Path) -> SweepDocument:
    """sweep.json of a sweep's results directory (:class:`SweepError` when it is not one)."""
    path = Path(results) / "sweep.json"
    try:
        data = read_json(path, "not a results directory of hpcbench sweep")
    except JsonFileError as err:
        raise SweepError(str(err)) from None
    if not isinstance(data, dict) or data.get("format") != SWEEP_FORMAT:
        raise SweepError(f"{path}: not a file of hpcbench sweep ({SWEEP_FORMAT})")
    if not isinstance(data.get("tasks"), list) or not isinstance(data.get("sweep"), dict):
        raise SweepError(f"{path}: damaged (no tasks or no sweep)")
    for i, task in enumerate(data["tasks"]):
        run = task.get("run") if isinstance(task, dict) else None
        if not isinstance(run, str) or not RUN_NAME.fullmatch(run) or run in (".", ".."):
            raise SweepError(
                f"{path}: tasks[{i}]: run {run!r} is not a run directory's name (sweep writes "
                "one name under runs/, never a path)"
            )
    return data


__all__ = ["SweepRunner", "TaskState", "counts", "load_plan"]
