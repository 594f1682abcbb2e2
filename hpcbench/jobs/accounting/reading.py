"""The accounting of a finished job, from its scheduler's reader: each batch system's package
holds an :class:`~hpcbench.jobs.accounting.records.AccountingReader` for it (its ``accounting``
module; a plug-in's, a module declared under the ``hpcbench.accounting`` entry point), found
here by the scheduler's name; a scheduler without one (the local scheduler) keeps no
accounting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpcbench.jobs.accounting.records import (
    AccountingReader,
    final,
    load,
    store,
    unavailable,
)
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.plugins import ACCOUNTING_GROUP, discover


def readers() -> dict[str, type[AccountingReader]]:
    """Every scheduler's accounting reader, by the scheduler's name: the ``accounting`` module
    of each batch system's package, and the plug-ins', imported here when accounting is first
    asked for (not on every command)."""
    found = discover(
        "hpcbench.jobs.schedulers",
        AccountingReader,
        ACCOUNTING_GROUP,
        "scheduler",
        within="accounting",
    )
    by_scheduler = {cls.scheduler: cls for cls in found}
    return {name: by_scheduler[name] for name in SCHEDULER_CLASSES if name in by_scheduler}


def keeps_accounting(scheduler: str) -> bool:
    """Whether ``scheduler`` has an accounting to ask (the local scheduler has none)."""
    return scheduler in readers()


def read_accounting(scheduler: str, job_id: str) -> dict[str, Any]:
    """The scheduler's accounting of one finished job (never raises for a missing command,
    a refusal or an odd answer: the record says so)."""
    reader = readers().get(scheduler)
    if reader is None:
        return unavailable(
            scheduler,
            job_id,
            "none",
            f"the {scheduler} scheduler keeps no accounting; the trainer's own timings are in "
            "metrics.json",
        )
    try:
        return reader.read(job_id)
    except (ValueError, ArithmeticError) as err:  # an answer no reader foresaw: unknown, per record
        return unavailable(
            scheduler,
            job_id,
            reader.source,
            f"its answer held a figure hpcbench cannot read ({err})",
        )


def account_finished(scheduler: str, job_id: str, run_dir: Path | None) -> dict[str, Any]:
    """The accounting of a finished job: the record kept in its run directory when it is the
    job's last word (:func:`final`), else the scheduler's, kept there in its place. A record
    without accounting (slurmdbd down, the job not yet in it) is kept too, so that a report
    says why, but asked again next time."""
    kept = load(run_dir) if run_dir is not None else None
    if (
        kept is not None
        and kept.get("job_id") == job_id
        and kept.get("scheduler") == scheduler
        and final(kept)
    ):
        return kept
    record = read_accounting(scheduler, job_id)
    if run_dir is not None:
        store(run_dir, record)
    return record
