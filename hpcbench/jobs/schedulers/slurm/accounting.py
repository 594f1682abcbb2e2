"""SLURM's accounting of one job: ``sacct`` once, for the job and its steps.

``sacct --parsable2 --noconvert`` lists the allocation (``1234``, an array task ``1234_7``) and
its steps (``1234.batch``, ``1234.extern``, ``1234.0`` for each ``srun``). From them: submit,
eligible, start and end times (the queue wait), elapsed time, state and exit code, the nodes,
the allocated CPUs and TRES, the CPU time of every step (seff's CPU efficiency: CPU time over
elapsed time × allocated CPUs), the memory high-water mark of the largest task of each step
(MaxRSS, MaxVMSize; seff's memory efficiency: the largest step's sum of its tasks' peaks,
TRESUsageInTot's mem, over the memory allocated, AllocTRES's mem),
and the energy the nodes drew while the job ran (ConsumedEnergyRaw, joules; 0 where no
AcctGatherEnergyType gathers it). Clusters without slurmdbd refuse ``sacct``
("Slurm accounting storage is disabled"): the record says so in one line.

slurmctld hands a job's end to slurmdbd a moment after the job ends; the reader asks again for up
to 10 s while sacct still shows the job running (2 s while it does not know the job at all).
"""

from __future__ import annotations

import time
from typing import Any

from hpcbench.jobs.accounting import fields
from hpcbench.jobs.accounting.records import (
    AccountingReader,
    Runner,
    ask,
    empty_record,
    final,
    refused,
)
from hpcbench.jobs.schedulers.slurm.scheduler import sacct_exit_code

FIELDS = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "ElapsedRaw",
    "TotalCPU",
    "AllocCPUS",
    "AllocTRES",
    "NNodes",
    "NodeList",
    "NTasks",
    "ReqMem",
    "MaxRSS",
    "MaxRSSTask",
    "MaxRSSNode",
    "MaxVMSize",
    "TRESUsageInTot",
    "ConsumedEnergyRaw",
)
SOURCE = "sacct (SLURM accounting)"
ENERGY_SOURCE = "SLURM's ConsumedEnergy"


def command(job_id: str) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        # sizes as SLURM keeps them, never rounded to 1.2G: MaxRSS, MaxVMSize and the mem of
        # TRESUsageInTot in bytes, the mem of AllocTRES in megabytes
        "--noconvert",
        f"--jobs={job_id}",
        f"--format={','.join(FIELDS)}",
    ]


#: seconds between two questions while slurmdbd has not yet written a job's end
PAUSE_S = 0.5


def read(
    job_id: str, run: Runner = ask, attempts: int = 20, pause: float | None = None
) -> dict[str, Any]:
    """The accounting record of ``job_id`` (see :mod:`hpcbench.jobs.accounting`); ``pause``
    (default :data:`PAUSE_S`) between questions while its end is not written yet."""
    pause = PAUSE_S if pause is None else pause
    argv = command(job_id)
    for attempt in range(attempts):
        answer = run(argv)
        if answer[0] != 0:
            return refused("slurm", job_id, SOURCE, answer)
        record = parse(answer[1], job_id)
        if final(record) and record["job"]["end"]:
            break
        if not record["available"] and attempt >= 3:  # not a job slurmdbd is about to know
            break
        if attempt + 1 < attempts:
            time.sleep(pause)
    if record["available"] and record["job"]["energy_j"] is None:
        record["energy_reason"] = _energy_reason(run)
    return record


def _energy_reason(run: Runner) -> str:
    code, out, _ = run(["scontrol", "show", "config"])
    plugin = next(
        (
            line.split("=", 1)[1].strip()
            for line in out.splitlines()
            if line.split("=", 1)[0].strip() == "AcctGatherEnergyType"
        ),
        None,
    )
    if code == 0 and plugin and plugin.endswith("/none"):
        return f"this cluster gathers no energy (AcctGatherEnergyType = {plugin})"
    if code == 0 and plugin:
        return f"{plugin} recorded no energy for this job"
    return "SLURM recorded no energy for this job"


def parse(out: str, job_id: str) -> dict[str, Any]:
    """The record from ``sacct``'s answer (its lines, ``|``-separated in :data:`FIELDS`'s
    order); ``available`` false when the job is not among them."""
    record = empty_record("slurm", job_id, SOURCE, ENERGY_SOURCE)
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == len(FIELDS):
            rows.append(dict(zip(FIELDS, parts, strict=True)))
    head = next((r for r in rows if r["JobID"] == job_id), None)
    if head is None:
        record["reason"] = f"sacct does not know job {job_id} (yet)"
        return record
    steps = [r for r in rows if r["JobID"].startswith(f"{job_id}.")]
    record["available"] = True
    record["steps"] = [_step(r, job_id) for r in steps]
    job = record["job"]
    submit, eligible = fields.iso_time(head["Submit"]), fields.iso_time(head["Eligible"])
    start, end = fields.iso_time(head["Start"]), fields.iso_time(head["End"])
    cpus = fields.whole(head["AllocCPUS"])
    nodes = fields.whole(head["NNodes"])
    elapsed = fields.number(head["ElapsedRaw"])
    step_cpu = [s["cpu_time_s"] for s in record["steps"] if s["cpu_time_s"] is not None]
    cpu_time = sum(step_cpu) if step_cpu else fields.duration_s(head["TotalCPU"])
    rss = [s["max_rss_bytes"] for s in record["steps"] if s["max_rss_bytes"] is not None]
    vms = [s["max_vmsize_bytes"] for s in record["steps"] if s["max_vmsize_bytes"] is not None]
    used = [s["memory_used_bytes"] for s in record["steps"] if s["memory_used_bytes"]]
    allocated = fields.size_bytes(fields.tres(head["AllocTRES"]).get("mem"), "m") or (
        _requested(head["ReqMem"], cpus, nodes)  # memory not a consumable resource here
    )
    energy = fields.number(head["ConsumedEnergyRaw"])
    if not energy:  # the allocation line may stay 0 while its steps carry the joules
        parts = [s["energy_j"] for s in record["steps"] if s["energy_j"]]
        energy = sum(parts) if parts else None
    job.update(
        state=head["State"] or None,
        exit_code=sacct_exit_code(head["ExitCode"]),
        **fields.times(submit, start, end, eligible),
        elapsed_s=elapsed,
        nodes=nodes,
        nodelist=head["NodeList"] or None,
        cpus=cpus,
        cpu_time_s=cpu_time,
        cpu_efficiency=fields.efficiency(cpu_time, (elapsed or 0) * (cpus or 0)),
        memory_allocated_bytes=allocated or None,
        max_rss_bytes=max(rss) if rss else None,
        max_vmsize_bytes=max(vms) if vms else None,
        memory_used_bytes=max(used) if used else None,
        memory_efficiency=fields.efficiency(max(used) if used else None, allocated),
        energy_j=energy or None,
        alloc_tres=fields.tres(head["AllocTRES"]) or None,
    )
    return record


def _requested(text: str, cpus: int | None, nodes: int | None) -> int | None:
    """ReqMem as the job's whole memory: before SLURM 21.08 ``4000Mn`` per node and ``4000Mc``
    per CPU; since, without a suffix, the job's total already (the mem of its requested TRES)."""
    value = fields.size_bytes(text, "m")
    if not value:
        return None
    if text.endswith("c"):
        return value * (cpus or 1)
    if text.endswith("n"):
        return value * (nodes or 1)
    return value


def _step(row: dict[str, str], job_id: str) -> dict[str, Any]:
    usage = fields.tres(row["TRESUsageInTot"])
    energy = fields.number(row["ConsumedEnergyRaw"]) or fields.number(usage.get("energy"))
    return {
        "step": row["JobID"][len(job_id) + 1 :],
        "name": row["JobName"] or None,
        "state": row["State"] or None,
        "exit_code": sacct_exit_code(row["ExitCode"]),
        "elapsed_s": fields.number(row["ElapsedRaw"]),
        "tasks": fields.whole(row["NTasks"]),
        "nodelist": row["NodeList"] or None,
        "max_rss_bytes": fields.size_bytes(row["MaxRSS"]),
        "max_rss_task": fields.whole(row["MaxRSSTask"]),
        "max_rss_node": row["MaxRSSNode"] or None,
        "max_vmsize_bytes": fields.size_bytes(row["MaxVMSize"]),
        "cpu_time_s": fields.duration_s(row["TotalCPU"]),
        "memory_used_bytes": fields.size_bytes(usage.get("mem")),
        "energy_j": energy or None,
        "tres_usage_in_tot": usage or None,
    }


class SlurmAccounting(AccountingReader):
    """The reader hpcbench asks for a finished slurm job."""

    scheduler = "slurm"
    source = SOURCE

    @classmethod
    def read(cls, job_id: str) -> dict[str, Any]:
        return read(job_id)
