"""One look at what ``hpcbench watch`` follows (:class:`Watcher`): each run's queue state (one
``statuses`` call per scheduler for every job shown, and none for runs that have ended), its
progress and ETA from the ranks' telemetry records, and the stragglers named so far (the rule of
:mod:`hpcbench.measure.stragglers`, applied to the records as they arrive). A job submitted to a
login node over SSH is asked about there, and its run directory brought back at every look."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.jobs.remote import login_for, using
from hpcbench.jobs.schedulers.errors import SchedulerError
from hpcbench.measure.stragglers import StragglerWatch
from hpcbench.measure.telemetry_files import latest_records
from hpcbench.watch.targets import Item, Target

METRICS_FILE = "metrics.json"
QUEUE_WORDS = {"PENDING": "queued", "RUNNING": "running", "REQUEUED": "queued"}


@dataclass
class RankRow:
    rank: int
    record: dict[str, Any]
    samples_per_s: float | None
    straggler: dict[str, Any] | None = None  # what the rule said when it named this rank


@dataclass
class ItemRow:
    item: Item
    state: str  # completed, failed, running, queued, to do, waiting
    done: bool
    reason: str = ""
    ranks: list[RankRow] = field(default_factory=list)
    #: its telemetry files' lines that were not a record (path -> how many), at the last look
    skipped: dict[Path, int] = field(default_factory=dict)

    @property
    def lead(self) -> dict[str, Any] | None:
        """The record that gives the run's progress: the least advanced rank's."""
        return min((r.record for r in self.ranks), key=lambda r: r["step"], default=None)

    @property
    def samples_per_s(self) -> float | None:
        rates = [r.samples_per_s for r in self.ranks if r.samples_per_s is not None]
        return sum(rates) if rates else None

    @property
    def eta_s(self) -> float | None:
        lead = self.lead
        if not lead or not lead.get("of") or not lead.get("steps") or not lead.get("wall_s"):
            return None
        return max(0, lead["of"] - lead["step"]) * lead["wall_s"] / lead["steps"]


@dataclass
class Snapshot:
    target: Target
    items: list[ItemRow]
    at: float

    @property
    def done(self) -> bool:
        """Whether what is watched has ended: every run has (a sweep: none is queued or
        running; tasks never submitted stay to do)."""
        if not self.items:
            return False
        if self.target.kind == "sweep":  # ended once something ran and nothing runs now
            return any(r.done for r in self.items) and all(
                r.done or r.state == "to do" for r in self.items
            )
        return all(r.done for r in self.items)

    @property
    def eta_s(self) -> float | None:
        """A matrix's time left (its runs one after the other): the running run's ETA, and the
        mean time of the runs that completed for each run still to do; None where unknown."""
        if self.target.kind != "matrix":
            return None
        took = [r.item.seconds for r in self.items if r.done and r.item.seconds is not None]
        todo = sum(1 for r in self.items if not r.done and not r.ranks)
        running = [r.eta_s for r in self.items if not r.done and r.ranks]
        if (todo and not took) or any(e is None for e in running):
            return None
        mean = sum(took) / len(took) if took else 0.0
        return sum(e for e in running if e is not None) + todo * mean

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.items:
            out[row.state] = out.get(row.state, 0) + 1
        return out


def _rate(rec: dict[str, Any]) -> float | None:
    return rec.get("samples_per_s")  # this rank's, over the record's interval


class Watcher:
    """Looks at a :class:`Target` (:meth:`look`); ``queries`` counts the scheduler calls."""

    def __init__(self, target: Target) -> None:
        self.target = target
        # a job submitted over SSH: its scheduler asked there, its run directory brought back
        self.login = login_for(target.record) if target.record is not None else None
        self.queries = 0
        self._stragglers: dict[str, StragglerWatch] = {}
        self._ended: dict[str, ItemRow] = {}  # runs seen to end: not asked about again
        self._no_metrics: set[str] = set()  # ended without metrics.json once: looked at again

    def look(self) -> Snapshot:
        items = self.target.items()
        asked: dict[str, list[Item]] = {}
        rows: dict[str, ItemRow] = {}
        for item in items:
            if item.label in self._ended:
                rows[item.label] = self._ended[item.label]
            elif _has_metrics(item.run_dir) and self.target.kind != "job":
                rows[item.label] = ItemRow(item, "completed", True)
            elif item.state in ("completed", "failed"):  # what a matrix's runs.json says
                rows[item.label] = ItemRow(item, item.state, True)
            elif item.job_id and item.scheduler:
                asked.setdefault(item.scheduler, []).append(item)
            else:
                rows[item.label] = ItemRow(item, item.state or "waiting", False)
        for name, group in asked.items():
            group = self._valid(name, group, rows)
            statuses = self._statuses(name, [i.job_id or "" for i in group]) if group else {}
            for item in group:
                rows[item.label] = self._row(item, statuses.get(item.job_id or ""))
        self._bring_back([r.item.run_dir for r in rows.values() if r.item.label not in self._ended])
        out = [rows[i.label] for i in items]
        for row in out:
            if row.item.run_dir is not None and (not row.done or row.item.label not in self._ended):
                self._add_ranks(row)  # an ended run's last records: read once, for its progress
            if row.done:
                self._ended[row.item.label] = row
        return Snapshot(self.target, out, time.time())

    @staticmethod
    def _valid(name: str, group: list[Item], rows: dict[str, ItemRow]) -> list[Item]:
        """The items whose job id the scheduler would take; the others are rows of their own
        (one bad id in a results directory must not keep the rest from being asked about)."""
        from hpcbench.jobs import schedulers

        cls = schedulers.SCHEDULER_CLASSES.get(name)
        if cls is None:
            return group
        good = []
        for item in group:
            if cls.id_pattern.fullmatch(item.job_id or ""):
                good.append(item)
            else:
                rows[item.label] = ItemRow(item, "failed", True, "not a job id of its scheduler")
        return good

    def _bring_back(self, run_dirs: list[Path | None]) -> None:
        """The run directories of the runs still shown, from the login node (after the
        scheduler's answers: what a run wrote before it ended is here)."""
        if self.login is None:
            return
        try:
            self.login.pull([d for d in run_dirs if d is not None])
        except SchedulerError:  # the login node did not answer this time: again next time
            pass

    def _statuses(self, name: str, job_ids: list[str]) -> dict[str, Any]:
        from hpcbench.jobs import schedulers

        if name not in schedulers.SCHEDULER_CLASSES:
            return {}
        self.queries += 1
        try:
            with using(self.login):
                return schedulers.get(name).statuses(job_ids)
        except Exception as err:  # the scheduler did not answer this time: ask again next time
            return {j: _Unknown(str(err)) for j in job_ids}

    def _row(self, item: Item, status: Any) -> ItemRow:
        if _has_metrics(item.run_dir) and self.target.kind != "job":  # a job: until it ends
            return ItemRow(item, "completed", True)
        if status is None:
            return ItemRow(item, "waiting", False, "the scheduler does not know it (yet)")
        if status.state in QUEUE_WORDS:
            return ItemRow(item, QUEUE_WORDS[status.state], False, status.reason)
        if status.state == "UNKNOWN":
            return ItemRow(item, "waiting", False, status.reason)
        if status.state == "COMPLETED":
            if self.target.kind in ("job", "run"):
                return ItemRow(item, "completed", True)
            if item.label not in self._no_metrics:  # a shared filesystem may show it late
                self._no_metrics.add(item.label)
                return ItemRow(item, "ending", False)
            return ItemRow(item, "failed", True, f"ended without {METRICS_FILE}")
        code = "" if status.exit_code is None else f" (exit {status.exit_code})"
        return ItemRow(item, "failed", True, f"{status.state.lower()}{code}")

    def _add_ranks(self, row: ItemRow) -> None:
        assert row.item.run_dir is not None
        latest = latest_records(row.item.run_dir, skipped=row.skipped)
        if not latest:
            return
        watch = self._stragglers.setdefault(row.item.label, StragglerWatch())
        watch.update(latest)
        row.ranks = [RankRow(r, rec, _rate(rec), watch.named.get(r)) for r, rec in latest.items()]
        if row.state == "waiting":
            row.state = "running"


@dataclass
class _Unknown:
    reason: str
    state: str = "UNKNOWN"
    exit_code: int | None = None


def _has_metrics(run_dir: Path | None) -> bool:
    return run_dir is not None and (run_dir / METRICS_FILE).is_file()
