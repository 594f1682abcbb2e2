"""PBS's accounting of one job: ``qstat -x -f ID`` (OpenPBS, PBS Pro: finished jobs stay in the
history for ``job_history_duration``) or ``qstat -f ID`` (Torque: completed jobs stay for
``keep_completed`` seconds).

From the job's attributes: ``qtime`` (queued), ``etime`` (eligible), ``stime`` or Torque's
``start_time`` (started), ``obittime``, Torque's ``comp_time`` or else ``mtime`` (ended), the
exit status, ``exec_host`` (the nodes), and ``resources_used``: ``walltime``, ``cput`` (CPU time
of every process), ``mem`` and ``vmem`` (the job's memory high-water marks, summed over its
processes and hosts), ``ncpus``; ``Resource_List.mem`` is the memory allocated. PBS keeps no
per-rank high-water mark and no energy (``tracejob`` reads the same server logs and adds neither).
"""

from __future__ import annotations

from typing import Any

from hpcbench.jobs.accounting import fields
from hpcbench.jobs.accounting.records import AccountingReader, Runner, ask, empty_record, refused
from hpcbench.jobs.schedulers.pbs.scheduler import TORQUE, PbsScheduler, job_status, parse_qstat

SOURCE = "qstat -x -f (PBS job history)"


def command(job_id: str, torque: bool) -> list[str]:
    return ["qstat", "-f", job_id] if torque else ["qstat", "-x", "-f", job_id]


def read(job_id: str, run: Runner = ask, torque: bool | None = None) -> dict[str, Any]:
    if torque is None:
        torque = PbsScheduler().flavour() == TORQUE
    answer = run(command(job_id, torque))
    if not (parse_qstat(answer[1]) if answer[1].strip() else {}):
        return refused("pbs", job_id, SOURCE, answer)
    return parse(answer[1], job_id)


def _time(text: str | None) -> float | None:
    return fields.ctime_time(text) or fields.epoch_time(text)


def parse(out: str, job_id: str) -> dict[str, Any]:
    record = empty_record("pbs", job_id, SOURCE)
    jobs = parse_qstat(out)
    attrs = next(
        (a for full, a in jobs.items() if full.split(".")[0] == job_id.split(".")[0]), None
    )
    if attrs is None:
        record["reason"] = f"qstat does not list job {job_id}"
        return record
    record["available"] = True
    record["energy_reason"] = "PBS records no energy"
    status = job_status(attrs)
    submit, eligible = _time(attrs.get("qtime")), _time(attrs.get("etime"))
    start = _time(attrs.get("stime") or attrs.get("start_time"))
    end = _time(attrs.get("obittime") or attrs.get("comp_time") or attrs.get("mtime"))
    wall = fields.duration_s(attrs.get("resources_used.walltime"))
    cpu = fields.duration_s(attrs.get("resources_used.cput"))
    cpus = fields.whole(attrs.get("resources_used.ncpus") or attrs.get("Resource_List.ncpus"))
    hosts = sorted({h.split("/")[0] for h in (attrs.get("exec_host") or "").split("+") if h})
    used = fields.size_bytes(attrs.get("resources_used.mem"))
    allocated = fields.size_bytes(attrs.get("Resource_List.mem"))
    record["job"].update(
        state=status.state,
        exit_code=status.exit_code,
        **fields.times(submit, start, end, eligible),
        elapsed_s=wall if wall is not None else fields.span(start, end),
        nodes=fields.whole(attrs.get("Resource_List.nodect")) or len(hosts) or None,
        nodelist=",".join(hosts) or None,
        cpus=cpus,
        cpu_time_s=cpu,
        cpu_efficiency=fields.efficiency(cpu, (wall or 0) * (cpus or 0)),
        memory_allocated_bytes=allocated,
        memory_used_bytes=used,
        max_vmsize_bytes=fields.size_bytes(attrs.get("resources_used.vmem")),
        memory_efficiency=fields.efficiency(used, allocated),
    )
    record["notes"].append(
        "PBS gives the job's memory summed over its processes (resources_used.mem), not each rank's"
    )
    return record


class PbsAccounting(AccountingReader):
    """The reader hpcbench asks for a finished pbs job."""

    scheduler = "pbs"
    source = SOURCE

    @classmethod
    def read(cls, job_id: str) -> dict[str, Any]:
        return read(job_id)
