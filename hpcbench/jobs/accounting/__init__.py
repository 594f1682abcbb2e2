"""What the batch system itself recorded of a finished job: queue wait, elapsed time, CPU time,
memory high-water marks, the nodes and, where the cluster gathers it, energy.

One reader per batch system asks its accounting once: SLURM's ``sacct`` (:mod:`.slurm`),
Grid Engine's ``qacct`` (:mod:`.gridengine`), PBS's ``qstat -x -f`` (:mod:`.pbs`), LSF's
``bacct -l`` (:mod:`.lsf`). Each gives the same layout (:func:`empty_record`): ``job`` (times,
states, CPU and memory of the whole job) and ``steps`` (SLURM's job steps: the batch script,
each ``srun``); a figure the scheduler does not give is None, and where there is no accounting
at all (no slurmdbd, ``sacct`` refused, the local scheduler) ``available`` is false and
``reason`` says why in one line. Nothing here fails a job or a report.

The record is kept beside the trainer's own results, as ``accounting.json`` in the run directory
(:func:`store`): ``hpcbench status --verbose``, ``submit --wait`` and ``bench`` write it when the
job has finished, and the bench report reads it. A record that holds the job's end
(:func:`final`) is never asked for again; one without accounting is asked for again next time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def empty_record(scheduler: str, job_id: str, source: str) -> dict[str, Any]:
    """An accounting record with nothing known yet."""
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
        "notes": [],
    }


def unavailable(scheduler: str, job_id: str, source: str, reason: str) -> dict[str, Any]:
    """A record saying, in one line, why there is no accounting for this job."""
    record = empty_record(scheduler, job_id, source)
    record["reason"] = " ".join(reason.split())[:300] or "no accounting"
    return record


Runner = Callable[[list[str]], tuple[int, str, str]]


def ask(argv: list[str]) -> tuple[int, str, str]:
    """Run an accounting command: (exit status, stdout, stderr); 127 when it is not installed
    (its message names it), never an exception."""
    from hpcbench.jobs.schedulers.base import SchedulerError, run_process

    try:
        proc = run_process(argv, argv[0], timeout=60)
    except SchedulerError as err:
        return 127, "", str(err)
    return proc.returncode, proc.stdout, proc.stderr


def refused(
    scheduler: str, job_id: str, source: str, answer: tuple[int, str, str], last: bool = False
) -> dict[str, Any]:
    """The record of a command that gave no accounting, in its own words: the first line it
    said (``last``: the last one not part of a header or a table)."""
    code, out, err = answer
    said = [line for line in (err or out).strip().splitlines() if line.strip()]
    if last:
        said = [line for line in said if not line.startswith(("-", " "))][-1:]
    return unavailable(
        scheduler, job_id, source, said[0] if said else f"{source.split()[0]} exit {code}"
    )


def read_accounting(scheduler: str, job_id: str) -> dict[str, Any]:
    """The scheduler's accounting of one finished job (never raises for a missing command,
    a refusal or an odd answer: the record says so)."""
    if scheduler == "slurm":
        from hpcbench.jobs.accounting import slurm as reader
    elif scheduler == "sge":
        from hpcbench.jobs.accounting import gridengine as reader
    elif scheduler == "pbs":
        from hpcbench.jobs.accounting import pbs as reader
    elif scheduler == "lsf":
        from hpcbench.jobs.accounting import lsf as reader
    else:
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
            reader.SOURCE,
            f"its answer held a figure hpcbench cannot read ({err})",
        )


def store(run_dir: Path, record: dict[str, Any]) -> Path | None:
    """Write ``record`` as ``run_dir/accounting.json`` (atomically); None where the run
    directory is not there (a job that failed before making it) or cannot be written."""
    import json

    from hpcbench.atomic import write_atomically

    if not run_dir.is_dir():
        return None
    path = run_dir / ACCOUNTING_FILE
    try:
        return write_atomically(path, json.dumps(record, indent=1) + "\n")
    except OSError:
        return None


def load(run_dir: Path) -> dict[str, Any] | None:
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


def final(record: dict[str, Any]) -> bool:
    """Whether a record is the job's last word: accounting found, and the job ended in it."""
    state = str((record.get("job") or {}).get("state") or "").split()[:1]
    return bool(record.get("available")) and bool(state) and state[0] in FINAL_STATES


FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip


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


def _mib(value: int | None) -> str:
    if value is None:
        return "?"
    if value >= 1 << 30:
        return f"{value / (1 << 30):.2f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


def _secs(value: float | None) -> str:
    if value is None:
        return "?"
    if value < 10 and value != int(value):
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def describe(record: dict[str, Any]) -> list[str]:
    """The record in a few lines for ``hpcbench status --verbose``."""
    source = f"(from {record.get('source')})"
    if not record.get("available"):
        return [f"accounting: none {source}: {record.get('reason') or 'not recorded'}"]
    job = record["job"]
    lines = [
        f"accounting {source}: {job.get('state') or '?'}"
        + (f" exit {job['exit_code']}" if job.get("exit_code") is not None else "")
        + f"; queued {_secs(job.get('queue_wait_s'))}, ran {_secs(job.get('elapsed_s'))}"
        + (f" on {job['nodelist']}" if job.get("nodelist") else "")
    ]
    cpu = f"  CPU: {job.get('cpus') or '?'} allocated, {_secs(job.get('cpu_time_s'))} used"
    if job.get("cpu_efficiency") is not None:
        cpu += f", efficiency {100 * job['cpu_efficiency']:.1f} %"
    lines.append(cpu)
    mem = f"  memory: high-water {_mib(job.get('max_rss_bytes'))} per rank (MaxRSS)"
    if job.get("max_vmsize_bytes") is not None:
        mem += f", virtual {_mib(job['max_vmsize_bytes'])}"
    if job.get("memory_efficiency") is not None:
        mem += (
            f"; all ranks {_mib(job.get('memory_used_bytes'))}, "
            f"{100 * job['memory_efficiency']:.1f} % of the {_mib(job.get('memory_allocated_bytes'))}"
            " allocated"
        )
    lines.append(mem)
    if job.get("energy_j") is not None:
        lines.append(f"  energy: {job['energy_j']:.0f} J (the scheduler's ConsumedEnergy)")
    else:
        lines.append(f"  energy: not known ({record.get('energy_reason') or 'not gathered'})")
    for step in record.get("steps") or []:
        lines.append(
            f"  step {step.get('step')}: {step.get('state') or '?'}, "
            f"{_secs(step.get('elapsed_s'))}, {step.get('tasks') or '?'} task(s), "
            f"MaxRSS {_mib(step.get('max_rss_bytes'))}"
            + (f" (task {step['max_rss_task']})" if step.get("max_rss_task") is not None else "")
        )
    lines += [f"  note: {note}" for note in record.get("notes") or []]
    return lines
