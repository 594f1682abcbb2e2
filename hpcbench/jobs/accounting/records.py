"""The accounting record's layout, shared by every batch system's reader: the whole job's
figures (:data:`JOB_KEYS`) and its steps' (:data:`STEP_KEYS`), an empty or unavailable record,
asking a command without ever raising (:func:`ask`, :func:`refused`), keeping a record in its
run directory (:func:`store`, :func:`load`) and the base of every reader
(:class:`AccountingReader`).

``accounting.json`` is typed here, beside its writer (:func:`store`): :class:`AccountingRecord`,
its :class:`AccountingJob` and :class:`AccountingStep`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypedDict

ACCOUNTING_FILE = "accounting.json"
ACCOUNTING_FORMAT = "hpcbench-accounting/1"

#: the whole job's figures, every scheduler alike (None where it does not say)
JOB_KEYS = (
    "state",
    "exit_code",
    "submit",
    "eligible",
    "start",
    "end",
    "queue_wait_s",  # submit to start
    "eligible_wait_s",  # eligible (dependencies, holds, --begin met) to start
    "elapsed_s",
    "nodes",
    "nodelist",
    "cpus",
    "cpu_time_s",  # user + system time of every process of the job
    "cpu_efficiency",  # cpu_time_s / (elapsed_s x cpus), as seff computes it
    "memory_allocated_bytes",
    "max_rss_bytes",  # the largest resident set of any one task (rank)
    "max_vmsize_bytes",
    "memory_used_bytes",  # seff's: the largest step's sum of its tasks' resident peaks
    "memory_efficiency",  # memory_used_bytes / memory_allocated_bytes, as seff computes it
    "energy_j",
    "alloc_tres",
)
#: one job step's figures (SLURM: the batch script, each srun; others: none)
STEP_KEYS = (
    "step",
    "name",
    "state",
    "exit_code",
    "elapsed_s",
    "tasks",
    "nodelist",
    "max_rss_bytes",
    "max_rss_task",
    "max_rss_node",
    "max_vmsize_bytes",
    "cpu_time_s",
    "memory_used_bytes",
    "energy_j",
    "tres_usage_in_tot",
)


#: a TRES table (``billing``, ``cpu``, ``mem`` …) as the batch system words it
Tres = dict[str, "float | str"]


class AccountingJob(TypedDict):
    """The whole job's figures (:data:`JOB_KEYS`; None where the batch system does not say)."""

    state: str | None
    exit_code: int | None
    submit: str | None
    eligible: str | None
    start: str | None
    end: str | None
    queue_wait_s: float | None
    eligible_wait_s: float | None
    elapsed_s: float | None
    nodes: int | None
    nodelist: str | None
    cpus: int | None
    cpu_time_s: float | None
    cpu_efficiency: float | None
    memory_allocated_bytes: float | None
    max_rss_bytes: float | None
    max_vmsize_bytes: float | None
    memory_used_bytes: float | None
    memory_efficiency: float | None
    energy_j: float | None
    alloc_tres: Tres | None


class AccountingStep(TypedDict):
    """One job step's figures (:data:`STEP_KEYS`)."""

    step: str | None
    name: str | None
    state: str | None
    exit_code: int | None
    elapsed_s: float | None
    tasks: int | None
    nodelist: str | None
    max_rss_bytes: float | None
    max_rss_task: int | None
    max_rss_node: str | None
    max_vmsize_bytes: float | None
    cpu_time_s: float | None
    memory_used_bytes: float | None
    energy_j: float | None
    tres_usage_in_tot: Tres | None


class AccountingRecord(TypedDict):
    """``accounting.json`` (format :data:`ACCOUNTING_FORMAT`): the scheduler's record of one
    job, or (``available`` false) the one line saying why there is none."""

    format: str
    scheduler: str
    job_id: str
    source: str
    read_at: str
    available: bool
    reason: str
    job: AccountingJob
    steps: list[AccountingStep]
    energy_reason: str
    energy_source: str
    notes: list[str]


def empty_record(
    scheduler: str, job_id: str, source: str, energy_source: str = ""
) -> AccountingRecord:
    """An accounting record with nothing known yet; ``energy_source``: what its energy is, in
    the batch system's words, where it records one."""
    return {
        "format": ACCOUNTING_FORMAT,
        "scheduler": scheduler,
        "job_id": job_id,
        "source": source,
        "read_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "available": False,
        "reason": "",
        "job": dict.fromkeys(JOB_KEYS),
        "steps": [],
        "energy_reason": "",
        "energy_source": energy_source,
        "notes": [],
    }


def unavailable(scheduler: str, job_id: str, source: str, reason: str) -> AccountingRecord:
    """A record saying, in one line, why there is no accounting for this job."""
    record = empty_record(scheduler, job_id, source)
    record["reason"] = " ".join(reason.split())[:300] or "no accounting"
    return record


Runner = Callable[[list[str]], tuple[int, str, str]]


def ask(argv: list[str]) -> tuple[int, str, str]:
    """Run an accounting command: (exit status, stdout, stderr); 127 when it is not installed
    (its message names it), never an exception."""
    from hpcbench.jobs.schedulers.base import SchedulerError
    from hpcbench.jobs.schedulers.commands import run_process

    try:
        proc = run_process(argv, argv[0], timeout=60)
    except SchedulerError as err:
        return 127, "", str(err)
    return proc.returncode, proc.stdout, proc.stderr


def refused(
    scheduler: str, job_id: str, source: str, answer: tuple[int, str, str], last: bool = False
) -> AccountingRecord:
    """The record of a command that gave no accounting, in its own words: the first line it
    said (``last``: the last one not part of a header or a table)."""
    code, out, err = answer
    said = [line for line in (err or out).strip().splitlines() if line.strip()]
    if last:
        said = [line for line in said if not line.startswith(("-", " "))][-1:]
    return unavailable(
        scheduler, job_id, source, said[0] if said else f"{source.split()[0]} exit {code}"
    )


def store(run_dir: Path, record: AccountingRecord) -> Path | None:
    """Write ``record`` as ``run_dir/accounting.json`` (atomically); None where the run
    directory is not there (a job that failed before making it) or cannot be written."""

    from hpcbench.atomic import write_json_atomically

    if not run_dir.is_dir():
        return None
    path = run_dir / ACCOUNTING_FILE
    try:
        return write_json_atomically(path, record)
    except OSError:
        return None


def load(run_dir: Path) -> AccountingRecord | None:
    """The record kept in ``run_dir``, None where there is none (or it is not one)."""
    from hpcbench.jsonfile import JsonFileError, read_json

    try:
        data = read_json(run_dir / ACCOUNTING_FILE)
    except (JsonFileError, OSError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != ACCOUNTING_FORMAT
        or not isinstance(data.get("job"), dict)
        or not isinstance(data.get("steps"), list)
        or not all(isinstance(s, dict) for s in data["steps"])
        or not isinstance(data.get("notes", []), list)
    ):
        return None
    # what an editor removed or garbled is unknown, never a crash of status or the report
    data["job"] = {k: _checked(k, data["job"].get(k)) for k in JOB_KEYS}
    data["steps"] = [{k: _checked(k, s.get(k)) for k in STEP_KEYS} for s in data["steps"]]
    return data


_TEXT_KEYS = frozenset(
    {"state", "submit", "eligible", "start", "end", "nodelist", "step", "name", "max_rss_node"}
)


def _checked(key: str, value: Any) -> Any:
    """A kept figure as the readers write it: text, a table (TRES) or a finite number."""
    if key in _TEXT_KEYS:
        return value if isinstance(value, str) else None
    if key in ("alloc_tres", "tres_usage_in_tot"):
        return value if isinstance(value, dict) else None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return value if number and math.isfinite(value) else None


def final(record: AccountingRecord) -> bool:
    """Whether a record is the job's last word: accounting found, and the job ended in it."""
    state = str((record.get("job") or {}).get("state") or "").split()[:1]
    return bool(record.get("available")) and bool(state) and state[0] in FINAL_STATES


FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip


class AccountingReader:
    """One batch system's accounting reader. A subclass, in that scheduler's package beside its
    :class:`~hpcbench.jobs.schedulers.base.Scheduler`, names the scheduler it reads for and the
    command it asks (:attr:`source`), and reads one finished job into a record of this layout;
    :func:`hpcbench.jobs.accounting.reading.read_accounting` finds it by the scheduler's name."""

    #: the scheduler's name (``--scheduler NAME``) and the command the record comes from
    scheduler: ClassVar[str] = ""
    source: ClassVar[str] = ""

    @classmethod
    def read(cls, job_id: str) -> AccountingRecord:
        """The record of one finished job (never raises for a refusal: the record says so)."""
        raise NotImplementedError
