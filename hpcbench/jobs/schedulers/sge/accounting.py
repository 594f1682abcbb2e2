"""Grid Engine's accounting of one job: ``qacct -j NUMBER [-t TASK]``.

qacct prints one record per job, array task and (tightly integrated parallel jobs without
``accounting_summary``) per host the job ran on, each a block of ``name value`` lines under a line
of ``=``. From them: qsub, start and end times (the queue wait), the wall clock, ``failed`` and
``exit_status``, the slots, the hosts, ``cpu`` (user + system seconds of every process) and
``maxvmem`` (the largest virtual memory). Grid Engine 8.1 prints ``ru_maxrss`` (the kernel's
kilobytes) as if it were bytes, so the resident high-water mark is left unknown rather than
guessed. Grid Engine gathers no energy.
"""

from __future__ import annotations

from typing import Any

from hpcbench.jobs.accounting import fields
from hpcbench.jobs.accounting.records import AccountingReader, Runner, ask, empty_record, refused

SOURCE = "qacct (Grid Engine accounting)"


def command(job_id: str) -> list[str]:
    number, _, task = job_id.partition(".")
    return ["qacct", "-j", number, *(["-t", task] if task else [])]


def read(job_id: str, run: Runner = ask) -> dict[str, Any]:
    answer = run(command(job_id))
    if answer[0] != 0 or "=====" not in answer[1]:
        return refused("sge", job_id, SOURCE, answer)
    return parse(answer[1], job_id)


def records(out: str) -> list[dict[str, str]]:
    """qacct's blocks as ``name -> value`` dicts (values stripped)."""
    found: list[dict[str, str]] = []
    for line in out.splitlines():
        if line.startswith("====="):
            found.append({})
            continue
        name, _, value = line.partition(" ")
        if found and name:
            found[-1][name] = value.strip()
    return [r for r in found if r]


def parse(out: str, job_id: str) -> dict[str, Any]:
    record = empty_record("sge", job_id, SOURCE)
    blocks = records(out)
    if not blocks:
        record["reason"] = f"qacct has no record of job {job_id}"
        return record
    submit = min(_times(blocks, "qsub_time"), default=None)
    # a job Grid Engine ran again (exit 99, a rescheduled node) has a record per attempt, each
    # earlier one "failed 25: rescheduling"; a parallel job one per host of an attempt: the
    # records of the last attempt are the job's outcome
    blocks = [b for b in blocks if (b.get("failed") or "0").split()[0] != "25"] or blocks[-1:]
    record["available"] = True
    record["energy_reason"] = "Grid Engine gathers no energy"
    record["notes"].append(
        "the resident high-water mark is not known: Grid Engine 8.1's qacct prints ru_maxrss "
        "(kilobytes) as bytes; maxvmem is the virtual memory high-water mark"
    )
    start = min(_times(blocks, "start_time"), default=None)
    end = max(_times(blocks, "end_time"), default=None)
    wall = max(
        (w for b in blocks if (w := fields.duration_s(b.get("ru_wallclock"))) is not None),
        default=None,
    )
    cpu_parts = [c for b in blocks if (c := fields.duration_s(b.get("cpu"))) is not None]
    cpu = sum(cpu_parts) if cpu_parts else None
    slots = fields.whole(blocks[0].get("slots"))
    vmem = [v for b in blocks if (v := fields.size_bytes(b.get("maxvmem"))) is not None]
    hosts = sorted({b["hostname"] for b in blocks if b.get("hostname")})
    failed = (blocks[0].get("failed") or "0").split()[0]
    exit_code = fields.whole((blocks[0].get("exit_status") or "").split(" ", 1)[0])
    state = "COMPLETED" if failed == "0" and exit_code == 0 else "FAILED"
    record["job"].update(
        state=state if failed == "0" else f"FAILED ({' '.join(blocks[0]['failed'].split())})",
        exit_code=exit_code,
        **fields.times(submit, start, end),
        elapsed_s=wall,
        nodes=len(hosts) or None,
        nodelist=",".join(hosts) or None,
        cpus=slots,
        cpu_time_s=cpu,
        cpu_efficiency=fields.efficiency(cpu, (wall or 0) * (slots or 0)),
        max_vmsize_bytes=max(vmem) if vmem else None,
    )
    return record


def _times(blocks: list[dict[str, str]], key: str) -> list[float]:
    return [t for b in blocks if (t := fields.ctime_time(b.get(key))) is not None]


class GridEngineAccounting(AccountingReader):
    """The reader hpcbench asks for a finished sge job."""

    scheduler = "sge"
    source = SOURCE

    @classmethod
    def read(cls, job_id: str) -> dict[str, Any]:
        return read(job_id)
