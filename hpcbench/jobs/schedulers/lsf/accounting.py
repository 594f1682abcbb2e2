"""LSF's accounting of one job: ``bacct -l ID``.

bacct prints the job's events (``Submitted from host``, ``Dispatched to <host>`` or LSF 10's
``Dispatched N Task(s) on Host(s) <a> <b>``, ``Completed <done>`` or ``<exit>``; dates without a
year unless the site shows it), then a table: ``CPU_T`` (CPU seconds of every process), ``WAIT``
(seconds queued), ``TURNAROUND`` (seconds from submission to the end), ``STATUS``, ``HOG_FACTOR``,
``MEM`` (the job's memory high-water mark, summed over its processes) and ``SWAP``. Lines longer
than about 80 columns continue, split anywhere, on lines indented by 21 (26 with years) spaces.
bacct records no energy (``bjobs -l`` shows a GPU's joules while LSF still holds the job).
"""

from __future__ import annotations

import re
from typing import Any

from hpcbench.jobs.accounting import fields
from hpcbench.jobs.accounting.records import AccountingReader, Runner, ask, empty_record, refused

SOURCE = "bacct -l (LSF accounting)"
_EVENT = re.compile(r"^(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d(?: \d{4})?): (.*)$")
# LSF 10: "Allocated 4 Slot(s)"; LSF 7-9: "Dispatched to 4 Hosts/Processors <2*a> <2*b>"
_SLOTS = re.compile(r"Allocated (\d+) Slot\(s\)|(\d+) Hosts/Processors")
_HOSTS = re.compile(r"<(?:(\d+)\*)?([^<>]+)>")


def command(job_id: str) -> list[str]:
    return ["bacct", "-l", job_id]


def read(job_id: str, run: Runner = ask) -> dict[str, Any]:
    answer = run(command(job_id))
    if "CPU_T" not in answer[1]:
        return refused("lsf", job_id, SOURCE, answer, last=True)
    return parse(answer[1], job_id)


def unwrap(out: str) -> list[str]:
    """bacct's lines with its wrapped continuations joined back (no separator: LSF splits
    anywhere, inside words and ``<…>`` values)."""
    lines: list[str] = []
    for line in out.splitlines():
        if lines and re.match(r" {21}(?: {5})?\S", line) and not lines[-1].startswith(" "):
            lines[-1] += line.strip()
        else:
            lines.append(line.rstrip())
    return lines


def _events(lines: list[str], head: int) -> dict[str, Any]:
    """What the lines after a job's header say: when it was submitted, started and ended, on
    which hosts with how many slots, its exit code, and the table of its figures."""
    found_events: dict[str, Any] = {
        "submit": None, "start": None, "end": None, "hosts": [], "slots": None,
        "exit_code": None, "table": {},
    }  # fmt: skip
    for i, line in enumerate(lines[head + 1 :], head + 1):
        if line.startswith("---"):
            break
        if m := _EVENT.match(line):
            stamp, what = fields.ctime_time(m.group(1)), m.group(2)
            if what.startswith("Submitted"):
                found_events["submit"] = stamp
            elif what.startswith(("Dispatched", "Started")):
                found_events["start"] = stamp
                host_part = re.split(r", (?:Allocated|Effective|Execution)", what)[0]
                found = _HOSTS.findall(host_part)
                found_events["hosts"] += [host for _, host in found]
                said = _SLOTS.search(what)
                found_events["slots"] = (
                    int(said.group(1) or said.group(2))
                    if said
                    else sum(int(c or 1) for c, _ in found) or None
                )
            elif what.startswith(("Completed", "Done", "Exited")):
                found_events["end"] = stamp
                if code := re.search(r"exit code (\d+)", what):
                    found_events["exit_code"] = int(code.group(1))
        elif line.split()[:2] == ["CPU_T", "WAIT"] and i + 1 < len(lines):
            found_events["table"] = dict(zip(line.split(), lines[i + 1].split(), strict=False))
    return found_events


def parse(out: str, job_id: str) -> dict[str, Any]:
    record = empty_record("lsf", job_id, SOURCE)
    lines = unwrap(out)
    head = next((i for i, line in enumerate(lines) if line.startswith(f"Job <{job_id}>")), None)
    if head is None:
        record["reason"] = f"bacct has no record of job {job_id}"
        return record
    record["available"] = True
    record["energy_reason"] = "bacct records no energy"
    status = re.search(r"Status <(\w+)>", lines[head])
    events = _events(lines, head)
    submit, start, end = events["submit"], events["start"], events["end"]
    hosts, slots, exit_code = events["hosts"], events["slots"], events["exit_code"]
    table: dict[str, str] = events["table"]
    cpu = fields.number(table.get("CPU_T"))
    wait = fields.number(table.get("WAIT"))
    turnaround = fields.number(table.get("TURNAROUND"))
    wall = fields.span(wait, turnaround)  # TURNAROUND - WAIT, where both are believable
    state = (status.group(1) if status else table.get("STATUS", "")).upper()
    record["job"].update(
        state={"DONE": "COMPLETED", "EXIT": "FAILED"}.get(state, state or None),
        exit_code=0 if state == "DONE" else exit_code,
        **fields.times(submit, start, end),
        elapsed_s=wall if wall is not None else fields.span(start, end),
        nodes=len(set(hosts)) or None,
        nodelist=",".join(sorted(set(hosts))) or None,
        cpus=slots,
        cpu_time_s=cpu,
        cpu_efficiency=fields.efficiency(cpu, (wall or 0) * (slots or 0)),
        memory_used_bytes=fields.size_bytes(table.get("MEM")),
        max_vmsize_bytes=fields.size_bytes(table.get("SWAP")),
    )
    if wait is not None:  # bacct's own count of the seconds queued, over the dates' minutes
        record["job"]["queue_wait_s"] = wait
    record["notes"].append(
        "LSF gives the job's memory summed over its processes (MEM), not each rank's"
    )
    return record


class LsfAccounting(AccountingReader):
    """The reader hpcbench asks for a finished lsf job."""

    scheduler = "lsf"
    source = SOURCE

    @classmethod
    def read(cls, job_id: str) -> dict[str, Any]:
        return read(job_id)
