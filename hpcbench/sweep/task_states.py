"""Where each task of a sweep stands: completed (its metrics.json is there), else as its
scheduler says of the array task that ran it last (one call per scheduler), else to do; and
following the queued and running ones until each has ended. A sweep submitted to a login node
over SSH is asked there, and its run directories and logs are brought back after each answer."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.files import read_regular
from hpcbench.jobs import schedulers
from hpcbench.jobs.remote import RemoteError, RemoteHost, using
from hpcbench.jobs.schedulers.base import JobStatus
from hpcbench.jobs.spec import JobSpec
from hpcbench.jobs.submission import remote_host
from hpcbench.sweep.documents import Submission
from hpcbench.sweep.plan import Task

METRICS_FILE = "metrics.json"
# task states, as `hpcbench sweep` prints them
COMPLETED, FAILED, QUEUED, RUNNING, TODO = "completed", "failed", "queued", "running", "to do"
#: polls in a row without an answer from the login node before following the sweep stops
LOGIN_MISSES = 10


@dataclass
class TaskState:
    """Where one task of the plan stands."""

    task: Task
    state: str = TODO
    job_id: str | None = None  # the array task that ran (or runs) it last
    scheduler: str | None = None
    reason: str = ""


class TaskStates:
    """The states of a sweep's tasks, read from its results directory and its schedulers."""

    tasks: list[Task]
    submissions: list[Submission]
    echo: Callable[[str], None]
    results: Path
    cwd: Path
    _login: tuple[RemoteHost | None] | None = None

    def base_spec(self) -> JobSpec:
        raise NotImplementedError

    def _placed(self, path: Path) -> str:
        """``path`` as the array script names it: relative to the working directory on a login
        node (the script runs there), absolute here (it may start elsewhere, as qsub's do)."""
        return self._relative(path) if self.login is not None else str(path)

    def _relative(self, path: Path) -> str:
        return os.path.relpath(path, self.cwd) if path.is_relative_to(self.cwd) else str(path)

    @property
    def login(self) -> RemoteHost | None:
        """The login node the sweep's job spec, its profile or ``--host`` names, its arrays
        submitted there over SSH (None: this machine)."""
        if self._login is None:
            self._login = (remote_host(self.base_spec(), self.cwd),)
        return self._login[0]

    def bring_back(self) -> None:
        """The run directories and logs written on the login node, brought here (only what
        changed); nothing for a sweep of this machine."""
        if self.login is not None:
            self.login.pull([self.results / "runs", self.results / "logs"])

    def run_dir(self, task: Task) -> Path:
        raise NotImplementedError

    def states(self) -> list[TaskState]:
        """Every task's state: completed (its metrics.json is there), else as the scheduler
        says of its last array task (one call per scheduler), else to do."""
        self.bring_back()
        states = [TaskState(t) for t in self.tasks]
        asked: dict[str, list[tuple[TaskState, str]]] = {}
        for st in states:
            if (self.run_dir(st.task) / METRICS_FILE).is_file():
                st.state = COMPLETED
                continue
            last = self._last_submission(st.task.index)
            if last is None:
                continue
            sub, k = last
            st.job_id, st.scheduler = sub["task_ids"][k - 1], sub["scheduler"]
            st.job_id = self._continued(st) or st.job_id
            asked.setdefault(sub["scheduler"], []).append((st, st.job_id))
        answers = []
        for name, pairs in asked.items():
            if name not in schedulers.SCHEDULER_CLASSES:  # submitit's local or debug executor
                for st, _ in pairs:
                    st.state, st.reason = FAILED, f"no results; it ran through submitit ({name})"
                continue
            with using(self.login):
                answers.append((pairs, schedulers.get(name).statuses([j for _, j in pairs])))
        if answers:  # what a task wrote before the scheduler said it ended
            self.bring_back()
        for pairs, found in answers:
            for st, job_id in pairs:
                self._apply(st, found.get(job_id))
        return states

    def _continued(self, st: TaskState) -> str | None:
        """The job a task's script resubmitted itself as (its run directory's
        ``control/continued-as``: SLURM's resubmission, ``NEXT_K``), if it did; None else."""
        path = self.run_dir(st.task) / "control" / "continued-as"
        try:  # a regular file of a line (a FIFO there would hang the sweep)
            text = read_regular(path, 4096).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return None
        cls = schedulers.SCHEDULER_CLASSES.get(st.scheduler or "")
        text = text.split(";", 1)[0]
        return text if cls is not None and cls.id_pattern.fullmatch(text) else None

    def _stopped(self, task: Task) -> bool:
        """Whether the task's ranks stopped after a checkpoint (a time limit, a preemption) and
        its script did not requeue it (a PBS subjob, a cap reached): it is to do again, and
        resumes from that checkpoint."""
        try:
            return (self.run_dir(task) / "control" / "stopped").stat().st_size > 0
        except OSError:
            return False

    def _last_submission(self, index: int) -> tuple[Submission, int] | None:
        for sub in reversed(self.submissions):
            tasks = sub.get("tasks") or []
            if index in tasks:
                return sub, tasks.index(index) + 1
        return None

    def _apply(self, st: TaskState, status: JobStatus | None) -> None:
        if (self.run_dir(st.task) / METRICS_FILE).is_file():
            st.state = COMPLETED
        elif status is None or status.state == "UNKNOWN":
            st.state, st.reason = FAILED, (status.reason if status else "") or "state unknown"
        elif status.state == "PENDING":
            st.state, st.reason = QUEUED, status.reason
        elif status.state == "RUNNING":
            st.state, st.reason = RUNNING, status.reason
        elif self._stopped(st.task):
            st.state, st.reason = TODO, "stopped after a checkpoint; it resumes from there"
        else:
            code = "" if status.exit_code is None else f" (exit {status.exit_code})"
            said = status.state.lower() if status.state != "COMPLETED" else "ended"
            st.state = FAILED
            st.reason = f"{said}{code}" + (
                "" if status.state != "COMPLETED" else f" without {METRICS_FILE}"
            )

    def follow(self, states: list[TaskState]) -> list[TaskState]:
        """Poll the queued and running tasks until each has ended, saying so as each does. A
        login node that does not answer is asked again at the next poll (up to
        :data:`LOGIN_MISSES` polls in a row): the tasks go on without us."""
        active = {id(s): s for s in states if s.state in (QUEUED, RUNNING)}
        total, misses = len(states), 0
        here = schedulers.this_machine()
        poll = schedulers.get(next(iter(active.values())).scheduler or here) if active else None
        intervals = poll.poll_intervals() if poll else iter(())
        while active:
            time.sleep(next(intervals))
            try:
                answers = self._ask(list(active.values()), here)
            except RemoteError as err:
                misses += 1
                if misses >= LOGIN_MISSES:
                    raise
                self.echo(f"no answer from the login node ({err}); asking again")
                continue
            misses = 0
            for group, found in answers:
                for st in group:
                    self._apply(st, found.get(st.job_id or ""))
                    if st.state in (COMPLETED, FAILED):
                        del active[id(st)]
                        done = sum(s.state in (COMPLETED, FAILED) for s in states)
                        why = f" ({st.reason})" if st.state == FAILED and st.reason else ""
                        self.echo(
                            f"[{done}/{total}] {st.task.run}: {st.state}{why} (task {st.job_id})"
                        )
        return states

    def _ask(self, active: list[TaskState], here: str) -> list[tuple[list[TaskState], Any]]:
        """Each scheduler's answer for its tasks, then what they wrote brought back (after the
        answers: what a task wrote before it ended is here)."""
        by_scheduler: dict[str, list[TaskState]] = {}
        for st in active:
            by_scheduler.setdefault(st.scheduler or here, []).append(st)
        answers = []
        with using(self.login):
            for name, group in by_scheduler.items():
                answers.append(
                    (group, schedulers.get(name).statuses([st.job_id or "" for st in group]))
                )
        self.bring_back()
        return answers


def counts(states: Sequence[TaskState]) -> str:
    """``3 completed, 1 failed, 2 running`` (states that occur, in a fixed order)."""
    order = (COMPLETED, FAILED, RUNNING, QUEUED, TODO)
    return ", ".join(
        f"{n} {state}" for state in order if (n := sum(s.state == state for s in states))
    )
