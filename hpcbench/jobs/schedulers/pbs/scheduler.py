"""PBS Pro / OpenPBS / Torque: ``qsub`` to submit, one ``qstat -f`` call for all jobs, ``qdel``.

The two families share ``qsub``/``qdel`` but not ``qstat``: on OpenPBS and PBS Pro ``-x`` adds
finished jobs to the listing, on Torque it selects XML output (and Torque lists finished jobs,
state ``C``, for ``keep_completed`` seconds anyway). ``qstat --version`` tells them apart
(OpenPBS prints ``pbs_version = …``, Torque ``Version: …``); the answer is parsed whichever form
it takes: ``Job Id:`` blocks of ``name = value`` lines, or Torque's ``<Data><Job>…`` XML.

There is no PBS server on the project's test machines: the parsing is tested against recorded
answers played back by stand-in ``qstat``/``qsub`` programs (see docs/schedulers.md).
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.jobs.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobStatus,
    Scheduler,
    SchedulerError,
)
from hpcbench.jobs.schedulers.commands import run_command, run_process
from hpcbench.jobs.spec import JobSpec, OwnOption
from hpcbench.jobs.units import format_memory, format_time_hms

_STATE_MAP = {
    "Q": PENDING,
    "H": PENDING,
    "W": PENDING,
    "T": PENDING,
    "B": RUNNING,
    "R": RUNNING,
    "E": RUNNING,
    "S": RUNNING,
    "U": RUNNING,
    "X": COMPLETED,
    "F": COMPLETED,
    "C": COMPLETED,
}
_JOB_BLOCK = re.compile(r"^Job Id:\s*(\S+)\s*$", re.MULTILINE)
_XML_DECLARATION = re.compile(r"<\?xml[^>]*\?>")
OPENPBS, TORQUE = "openpbs", "torque"


def pbs_flavour(version_text: str) -> str | None:
    """OPENPBS or TORQUE from what ``qstat --version`` printed (stdout and stderr), else None."""
    if "pbs_version" in version_text:
        return OPENPBS
    if re.search(r"^\s*version:", version_text, re.MULTILINE | re.IGNORECASE):
        return TORQUE
    return None


def _text_jobs(out: str) -> dict[str, dict[str, str]]:
    """``Job Id:`` blocks: attribute name -> value, wrapped values (tab-led lines) joined."""
    jobs: dict[str, dict[str, str]] = {}
    blocks = _JOB_BLOCK.split(out)[1:]
    for full_id, body in zip(blocks[0::2], blocks[1::2], strict=False):
        attrs: dict[str, str] = {}
        last = ""
        for line in body.splitlines():
            key, sep, value = line.partition(" = ")
            # OpenPBS and Torque indent attributes with spaces and wrapped values with a tab;
            # slurm-wlm-torque's qstat indents attributes with a tab: a line that starts with an
            # attribute name and " = " is an attribute however it is indented.
            if sep and re.fullmatch(r"[A-Za-z_][\w.]*", key.strip()):
                last = key.strip()
                attrs[last] = value.strip()
            elif line.startswith("\t") and last:
                attrs[last] += line.strip()
        jobs[full_id] = attrs
    return jobs


def _xml_jobs(out: str) -> dict[str, dict[str, str]]:
    """Torque's ``qstat -x``: ``<Data><Job><Job_Id>…</Job_Id><job_state>…`` (one document or
    several in a row); attributes with sub-elements (resources) are left out."""
    body = _XML_DECLARATION.sub("", out)
    try:
        root = ET.fromstring(f"<all>{body}</all>")
    except ET.ParseError as err:
        raise SchedulerError(f"qstat: unreadable XML answer ({err})") from None
    jobs: dict[str, dict[str, str]] = {}
    for job in root.iter("Job"):
        attrs = {child.tag: (child.text or "").strip() for child in job if len(child) == 0}
        if attrs.get("Job_Id"):
            jobs[attrs["Job_Id"]] = attrs
    return jobs


def parse_qstat(out: str) -> dict[str, dict[str, str]]:
    """Full job id -> attributes, from ``qstat -f`` text or Torque's XML."""
    return _xml_jobs(out) if out.lstrip().startswith("<") else _text_jobs(out)


def job_status(attrs: dict[str, str]) -> JobStatus:
    """The state of one job from its attributes (``Exit_status`` on OpenPBS, ``exit_status``
    on Torque)."""
    raw = attrs.get("job_state", "")
    state = _STATE_MAP.get(raw, UNKNOWN)
    if state == UNKNOWN:
        return JobStatus(UNKNOWN, None, f"job_state {raw!r}")
    if state != COMPLETED:
        return JobStatus(state)
    openpbs = "Exit_status" in attrs
    code = attrs.get("Exit_status") or attrs.get("exit_status")
    if not code or not code.lstrip("-").isdigit():
        # Every job that ran has one on OpenPBS and Torque; slurm-wlm-torque's qstat prints none.
        return JobStatus(COMPLETED, None, "finished; qstat gives no exit status")
    exit_code = int(code)
    if exit_code == 0:
        return JobStatus(COMPLETED, 0)
    if exit_code < 0:
        # The server's own codes (JOB_EXEC_*): the job could not be started, or the server
        # killed it for a limit; walltime is -29 (JOB_EXEC_KILL_WALLTIME) on OpenPBS and -11
        # (JOB_EXEC_OVERLIMIT_WT) on Torque.
        if exit_code == (-29 if openpbs else -11):
            return JobStatus(TIMEOUT, exit_code, f"walltime exceeded (JOB_EXEC code {exit_code})")
        return JobStatus(
            FAILED, exit_code, f"PBS could not run the job (JOB_EXEC code {exit_code})"
        )
    if exit_code > 256:
        # 256 + signal: the job's shell was killed; SIGTERM (then SIGKILL) is what qdel sends.
        signal = exit_code - 256
        state = CANCELLED if signal in (9, 15) else FAILED
        return JobStatus(state, 128 + signal, f"killed by signal {signal}")
    return JobStatus(FAILED, exit_code)


def _same_job(full_id: str, job_id: str) -> bool:
    return full_id == job_id or full_id.split(".")[0] == job_id.split(".")[0]


class PbsScheduler(Scheduler):
    """PBS Pro, OpenPBS and Torque: the core, and of the Scheduler base's parts its ids, logs,
    detection, script values, arrays, requeueing, own options and accounting."""

    name = "pbs"
    label = "PBS"
    template = "pbs.qsub.j2"
    script_suffix = ".pbs"
    directive_prefix = "#PBS"
    submit_command = "qsub"
    # ids
    id_pattern = re.compile(
        r"[0-9]{1,18}(?:\[[0-9]{0,10}\])?(?:\.[A-Za-z0-9][A-Za-z0-9.-]{0,252})?"
    )
    id_form = "the id qsub printed, e.g. 1234.server (or 1234[].server for an array)"
    # logs: qsub -o DIR/ names the files itself: <job name>.o<sequence number>; the script's
    # $job_id is the sequence number (PBS_JOBID up to its first dot)
    log_names = ("{letter_name}.o{seq}", "{letter_name}.e{seq}")
    run_dir_name = "{name}-{seq}"
    log_path_refusals = ((":", "':'", "read HOST:PATH"),)
    # detection
    detect_order = 40  # after Grid Engine, whose qsub is told apart by what it says
    # requeueing
    stop_warning = "PBS sends SIGTERM at the walltime and on qdel, SIGKILL after its kill_delay"
    # own options
    options = (
        OwnOption(
            "scheduler",
            "pbs_resources",
            "choice",
            default="select",
            choices=("select", "nodes"),
            profile_key="pbs_resources",
            flag_help="PBS resource syntax: select (PBS Pro, OpenPBS; default) or nodes=N:ppn=P "
            "(Torque)",
        ),
    )
    # accounting
    accounting_command = "qstat -x"

    # arrays: PBS Pro's subjob index; Torque's is PBS_ARRAYID. A subjob's PBS_JOBID is
    # 1234[7].server on both, and the script's $job_id keeps it up to the first dot.
    array_index_var = "PBS_ARRAY_INDEX|PBS_ARRAYID"
    array_job_id_shell = '"${PBS_JOBID%%.*}"'

    @classmethod
    def task_id(cls, array_id: str, index: int) -> str:
        seq, dot, server = array_id.partition(".")
        return f"{seq.removesuffix('[]')}[{index}]{dot}{server}"

    def task_log_paths(
        self, spec: JobSpec, task_id: str, index: int, cwd: Path
    ) -> tuple[Path, Path]:
        """PBS Pro names a subjob's files <name>.o<sequence>.<index>, Torque
        <name>.o<sequence>-<index>."""
        base = cwd / spec.resources.output_dir
        seq = task_id.split("[", 1)[0]
        sep = "-" if self.option(spec, "pbs_resources") == "nodes" else "."
        name = spec.resources.letter_first_name
        return base / f"{name}.o{seq}{sep}{index}", base / f"{name}.e{seq}{sep}{index}"

    def __init__(self) -> None:
        self._flavour: str | None = None

    @classmethod
    def detect(cls) -> str | None:
        """A ``qsub`` on PATH. Asked after every batch system whose ``qsub`` says it is theirs
        (its ``detect_order``): one that got here is PBS's or Torque's."""
        qsub = shutil.which("qsub")
        return f"qsub found at {qsub}" if qsub else None

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        nodefile = folder / "pbs_nodefile"
        nodefile.write_text("".join(f"{h}\n" for h in hosts))
        return {
            "PBS_JOBID": f"{job_id}.server",
            "PBS_O_WORKDIR": str(folder / "work"),
            "PBS_NODEFILE": str(nodefile),
        }

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        r = spec.resources
        return {
            "time_hms": format_time_hms(r.time_s),
            "memory_pbs": format_memory(r.memory_mb, "b").lower() if r.memory_mb else None,
        }

    def flavour(self) -> str | None:
        """OPENPBS or TORQUE, asked once of ``qstat --version``; None when it does not say."""
        if self._flavour is None:
            try:
                proc = run_process(["qstat", "--version"], "qstat", timeout=30)
                self._flavour = pbs_flavour(proc.stdout + proc.stderr) or ""
            except SchedulerError:
                self._flavour = ""
        return self._flavour or None

    def submit(self, script_path: Path, spec: JobSpec, cwd: Path) -> str:
        out = run_command(["qsub", str(script_path)], "qsub").strip()
        if not out:
            raise SchedulerError("qsub: no job id in its answer")
        return out.splitlines()[-1].strip()

    def statuses(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.check_ids(job_ids)
        if not job_ids:
            return {}
        # OpenPBS needs -x to list finished jobs; on Torque -x would mean XML, and it lists
        # finished jobs (state C) without it.
        flags = ["-f"] if self.flavour() == TORQUE else ["-x", "-f"]
        proc = run_process(["qstat", *flags, *job_ids], "qstat")
        refused = re.search(r"(unknown|invalid|illegal|unrecognized) option", proc.stderr, re.I)
        if "-x" in flags and not proc.stdout.strip() and refused:
            # A qstat without -x (slurm-wlm-torque's) lists finished jobs as Torque does.
            self._flavour = TORQUE
            proc = run_process(["qstat", "-f", *job_ids], "qstat")
        jobs = parse_qstat(proc.stdout)
        # qstat exits non-zero when any one id is unknown, yet lists the others.
        said = " ".join(proc.stderr.split())[:200]
        gone = f"not listed by qstat ({said})" if said else "no longer known to qstat"
        found: dict[str, JobStatus] = {}
        for job_id in job_ids:
            match = next((a for full, a in jobs.items() if _same_job(full, job_id)), None)
            found[job_id] = job_status(match) if match else JobStatus(UNKNOWN, None, gone)
        return found

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.check_ids(job_ids)
        if job_ids:
            run_command(["qdel", *job_ids], "qdel")
