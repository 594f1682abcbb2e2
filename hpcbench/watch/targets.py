"""What ``hpcbench watch`` follows: a job (its id, as ``hpcbench status`` knows it), a run
directory, or the results directory of a benchmark matrix or a sweep, each read as a list of
:class:`Item` (one run directory each, with the job that writes it when known). A matrix's and a
sweep's items are read again at every refresh: runs are submitted while it is watched.

The directories may be anyone's: their files are read as regular files of bounded size
(:func:`hpcbench.jsonfile.read_json`), and run directories named in them are kept inside the
results directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.jsonfile import JsonFileError, read_json

MATRIX, SWEEP, RUN, JOB = "matrix", "sweep", "run", "job"


class WatchError(ValueError):
    """What was given to watch is none of the things it follows (one line, naming it)."""


@dataclass(frozen=True)
class Item:
    """One run: its label, its run directory, and the job that runs it (None where not known
    or not yet submitted), with its scheduler's name."""

    label: str
    run_dir: Path | None
    job_id: str | None = None
    scheduler: str | None = None
    state: str | None = None  # what its results directory says (a matrix's "pending", ...)
    seconds: float | None = None  # how long it took, where its results directory says


@dataclass(frozen=True)
class Target:
    """What is watched: its kind (:data:`MATRIX`, :data:`SWEEP`, :data:`RUN`, :data:`JOB`),
    its name as given, and where it is."""

    kind: str
    name: str
    path: Path | None = None
    record: Any = None  # a job's record (hpcbench.jobs.schedulers.base.JobRecord)

    def items(self) -> list[Item]:
        """The runs it holds now."""
        if self.kind == RUN:
            return [Item(self.path.name, self.path)] if self.path else []
        if self.kind == JOB:
            return _job_items(self.record)
        if self.kind == MATRIX:
            return _matrix_items(self.path)
        return _sweep_items(self.path)


def resolve(target: str, scheduler: str | None = None) -> Target:
    """The :class:`Target` ``target`` names: a directory (a matrix's, a sweep's, or one run's),
    else a job id of this machine's job records (:class:`WatchError` when it is neither)."""
    path = Path(target).expanduser()
    if path.is_dir():
        path = path.resolve()
        if (path / "runs.json").is_file() or (path / "bench.json").is_file():
            return Target(MATRIX, target, path)
        if (path / "sweep.json").is_file():
            return Target(SWEEP, target, path)
        return Target(RUN, target, path)
    from hpcbench.jobs.job_store import lookup

    record = lookup(target, scheduler) if _job_id_like(target) else None
    if record is None:
        raise WatchError(
            f"{target!r}: neither a directory (a run's, a matrix's or a sweep's results) nor a "
            "job submitted from here (hpcbench status lists them)"
        )
    return Target(JOB, target, record.run_dir, record)


def _job_id_like(text: str) -> bool:
    return 0 < len(text) <= 128 and all(c.isalnum() or c in "._-[]" for c in text)


def _job_items(record: Any) -> list[Item]:
    if not record.tasks:
        return [Item(record.run_dir.name, record.run_dir, record.job_id, record.scheduler)]
    from hpcbench.jobs.job_store import lookup

    items = []
    for task in record.tasks:
        found = lookup(task, record.scheduler)
        run_dir = found.run_dir if found is not None else None
        items.append(Item(f"task {task}", run_dir, task, record.scheduler))
    return items


def _inside(root: Path, relative: Any) -> Path | None:
    """``root / relative`` when it stays inside ``root`` (else None: not followed)."""
    if not isinstance(relative, str) or not relative:
        return None
    path = (root / relative).resolve()
    return path if path.is_relative_to(root) else None


def _numbers(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _read(path: Path) -> Any:
    try:
        return read_json(path)
    except JsonFileError:
        return None


def _matrix_items(results: Path | None) -> list[Item]:
    assert results is not None
    data = _read(results / "runs.json")
    runs = data.get("runs") if isinstance(data, dict) else None
    items = []
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict):
            continue
        label = " ".join(str(run.get(k, "?")) for k in ("config", "kind", "rep"))
        job = run.get("job_id") if isinstance(run.get("job_id"), str) else None
        scheduler = run.get("scheduler") if isinstance(run.get("scheduler"), str) else None
        started, ended = run.get("started"), run.get("ended")
        took = ended - started if _numbers(started, ended) and ended >= started else None
        items.append(Item(label, _inside(results, run.get("run_dir")), job, scheduler,
                          str(run.get("status")), took))  # fmt: skip
    return items


def _sweep_items(results: Path | None) -> list[Item]:
    assert results is not None
    plan = _read(results / "sweep.json")
    subs = _read(results / "submissions.json")
    tasks = plan.get("tasks") if isinstance(plan, dict) else None
    submissions = subs.get("submissions") if isinstance(subs, dict) else None
    last: dict[int, tuple[str, str]] = {}  # task index -> (array task id, scheduler)
    for sub in submissions if isinstance(submissions, list) else []:
        if not isinstance(sub, dict):
            continue
        ids, indices = sub.get("task_ids") or [], sub.get("tasks") or []
        for k, index in enumerate(indices):
            if isinstance(index, int) and k < len(ids) and isinstance(ids[k], str):
                last[index] = (ids[k], str(sub.get("scheduler")))
    items = []
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict) or not isinstance(task.get("run"), str):
            continue
        job, scheduler = last.get(task.get("index"), (None, None))
        run_dir = _inside(results, f"runs/{task['run']}")
        items.append(Item(task["run"], run_dir, job, scheduler, None if job else "to do"))
    return items
