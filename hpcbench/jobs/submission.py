"""Submitting a job spec: load it (with keyword overrides), resolve its scheduler, render it,
submit it (an array's tasks each remembered), and find an earlier job again. :mod:`hpcbench.api`
re-exports these for notebooks; the benchmark and sweep runners use them. Nothing here imports
torch: it runs on login nodes.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.jobs import job_store, schedulers
from hpcbench.jobs.job import Job
from hpcbench.jobs.program_inputs import check_program_inputs
from hpcbench.jobs.remote import RemoteHost, current, using
from hpcbench.jobs.render import render_script
from hpcbench.jobs.schedulers.base import JobRecord, Scheduler
from hpcbench.jobs.spec import JobSpec, SpecError
from hpcbench.jobs.spec_load import load_spec as _load_spec
from hpcbench.jobs.spec_options import field_keywords
from hpcbench.jsonfile import read_json


def load_spec(
    path: str | Path | None = None,
    smoke: bool = False,
    profile: str | None = None,
    **fields: Any,
) -> JobSpec:
    """Load a spec file (or the defaults) with keyword overrides, e.g. ``nodes=2``; ``smoke``:
    the file's ``[smoke]`` form (a tiny model on the built-in data, for minutes); ``profile``:
    the cluster profile under the file (default ``$HPCBENCH_PROFILE``; docs/cluster-guide.md)."""
    keywords = field_keywords()
    overrides = {}
    for key, value in fields.items():
        if key not in keywords:
            raise TypeError(f"load_spec() got an unknown field {key!r}")
        overrides[keywords[key]] = (key, value)
    return _load_spec(path, overrides, smoke=smoke, profile=profile)


def resolve_scheduler(spec: JobSpec, forced: str | None = None) -> tuple[str, str]:
    """(name, why): ``forced``, else the spec's scheduler.name, else what this machine has."""
    if forced and forced != "auto":
        return forced, "chosen with --scheduler"
    if spec.scheduler.name != "auto":
        return spec.scheduler.name, "chosen by scheduler.name (the job spec, or its profile)"
    if spec.scheduler.host:
        return remote_scheduler(spec.scheduler.host)
    return schedulers.detect()


def remote_scheduler(target: str) -> tuple[str, str]:
    """(scheduler name, why) of a login node: the batch system whose submit command it has, when
    only one has it (Grid Engine's and PBS's are both qsub: name it there)."""
    host = current()
    if host is None:
        raise SpecError(f"scheduler.host: {target}: name the scheduler (--scheduler)")
    found = []
    for name, cls in schedulers.SCHEDULER_CLASSES.items():
        command = cls.submit_command
        if command and host.ssh(f"command -v {command}", 60).returncode == 0:
            found.append((name, command))
    if len(found) == 1:
        name, command = found[0]
        return name, f"{command} found on {target}"
    said = ", ".join(n for n, _ in found) or "none"
    raise SpecError(
        f"scheduler.host: {target}: cannot tell its batch system (found: {said}); "
        "name it (--scheduler)"
    )


def render(
    spec: JobSpec, scheduler: str | None = None, template_dirs: Sequence[str | Path] | None = None
) -> str:
    """The batch script text (for the detected scheduler unless one is named)."""
    name, _ = resolve_scheduler(spec, scheduler)
    return render_script(spec, name, template_dirs)


def submit(
    spec: JobSpec,
    scheduler: str | None = None,
    template_dirs: Sequence[str | Path] | None = None,
    cwd: str | Path | None = None,
    preflight: bool = True,
) -> Job:
    """Render the script, keep a copy under ``<output_dir>/scripts/`` and submit it.

    With ``preflight`` the request is first checked against what the scheduler allows (on
    SLURM, the partition's limits)."""
    workdir = Path(cwd or os.getcwd()).resolve()
    host = remote_host(spec, workdir)
    with using(host):
        return _submit(spec, scheduler, template_dirs, workdir, preflight, host)


def login_fields(host: str | None, remote_dir: str | None) -> dict[str, str]:
    """The login node's fields given as ``--host`` and ``--remote-dir`` (None: not given),
    refused in one line naming the flag, as :func:`load_spec` keywords."""
    given = {k: v for k, v in (("host", host), ("remote_dir", remote_dir)) if v is not None}
    if given:
        flags = {"host": "--host", "remote_dir": "--remote-dir"}
        _load_spec(None, {f"scheduler.{k}": (flags[k], v) for k, v in given.items()})
    return given


def recorded_login(
    document: Path, recorded: Any, given: dict[str, str], results: Path, cwd: Path
) -> dict[str, str]:
    """The login node a results directory's runs went to (its ``document``'s ``login``, read as
    hostile ground) under the one given now: refused in one line when they differ, or when
    the results are not under ``cwd`` (they come back into the same places here)."""
    login = recorded.get("login") if isinstance(recorded, dict) else None
    login = (
        login_fields(login.get("host"), login.get("remote_dir")) if isinstance(login, dict) else {}
    )
    for key, value in given.items():
        if key in login and login[key] != value:
            raise SpecError(
                f"--{key.replace('_', '-')} {value}: {document} ran on {login['host']} "
                f"({login.get('remote_dir') or 'its default directory'}); continue it there, "
                "or give a new --results"
            )
    # a results directory (another user's, copied, shared) does not choose where your jobs
    # and their files go: a login node or a directory there you never used needs its flag
    if login.get("host") and "host" not in given and not _submitted_to(login["host"]):
        raise SpecError(
            f"{document} ran on {login['host']}, a login node you have not submitted to from "
            f"here: give --host {login['host']} to continue there (a results directory does not "
            "choose where your jobs go), or give a new --results"
        )
    remote = login.get("remote_dir")
    host = given.get("host") or login.get("host")
    if remote and "remote_dir" not in given and not _submitted_to(host or "", remote):
        raise SpecError(
            f"{document} ran in {remote} on {host}, a directory your jobs there never used: "
            f"give --remote-dir {remote} to continue there, or give a new --results"
        )
    chosen = {**login, **given}
    if chosen.get("host") and not results.is_relative_to(cwd):
        raise SpecError(
            f"--results {results}: over SSH the results must be under this directory ({cwd}), "
            "the remote working directory's mirror"
        )
    return chosen


def _submitted_to(host: str, remote_dir: str | None = None, looked_at: int = 1000) -> bool:
    """Whether this user's own job records hold a job submitted to ``host`` (and, given
    ``remote_dir``, in that directory there: as recorded, or its absolute form under the home)."""
    for record in job_store.recent(looked_at):
        if record.host != host:
            continue
        if remote_dir is None or record.remote_dir == remote_dir:
            return True
        relative = remote_dir.removeprefix("~/")
        if (
            not relative.startswith(("/", "~"))
            and ".." not in relative.split("/")
            and (record.remote_dir.endswith("/" + relative.strip("/")))
        ):
            return True
    return False


def remote_host(spec: JobSpec, workdir: Path) -> RemoteHost | None:
    """The login node ``spec`` is submitted to over SSH (``scheduler.host``), None for this
    machine's scheduler."""
    if not spec.scheduler.host:
        return None
    return RemoteHost(spec.scheduler.host, workdir, spec.scheduler.remote_dir or "")


def _submit(
    spec: JobSpec,
    scheduler: str | None,
    template_dirs: Sequence[str | Path] | None,
    workdir: Path,
    preflight: bool,
    host: RemoteHost | None,
) -> Job:
    name, _ = resolve_scheduler(spec, scheduler)
    sched = schedulers.get(name)
    if host is not None and sched.plays_every_system:
        raise SpecError(
            f"scheduler.host: {host.target} needs the login node's batch system, not the {name} "
            "scheduler: name it (--scheduler)"
        )
    if host is not None:
        spec = _mirrored_output(spec, workdir)
    # rendered first: a mistyped program argument is found before the scheduler is asked
    text = render_script(spec, name, template_dirs)
    if host is None:  # a missing script or dataset of a job that runs here: refused
        check_program_inputs(spec, sched.plays_every_system, workdir)
    if host is not None and _runs_hpcbench_as_is(spec):
        python, venv = spec.program.python, spec.environment.venv
        if venv and "/" not in python:  # a bare name: found in the venv the job activates
            python = f"{venv.rstrip('/')}/bin/{python}"
        host.check_hpcbench(python)
    if preflight:
        sched.preflight(spec)
    # Batch systems do not create the log directory; a job whose log path is missing dies unseen.
    _make_output_dir(workdir / spec.resources.output_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 1_000_000_000:09d}"
    script = (
        workdir
        / spec.resources.output_dir
        / "scripts"
        / (f"{spec.resources.file_name}-{stamp}{sched.script_suffix}")
    )
    try:
        write_atomically(script, text, 0o755)  # less the umask: the copy may hold --env secrets
    except OSError as err:
        raise schedulers.SchedulerError(
            f"cannot write the script copy {err.filename or script}: {err.strerror}"
        ) from None
    if host is not None:  # the script, and an array's settings files, where sbatch reads them
        array_files = [workdir / spec.array.tasks_dir] if spec.array is not None else []
        host.push([script, *array_files])
    job_id = sched.submit(script, spec, workdir)
    where = remote_fields(host)
    if spec.array is not None:
        return _array_job(spec, sched, job_id, script, workdir, where)
    out, err = sched.log_paths(spec, job_id, workdir)
    run_dir = sched.run_dir(spec, job_id, workdir)
    record = JobRecord(job_id, name, script, out, err, run_dir, (), *where)
    return Job(record, sched, _remember(record))


def _mirrored_output(spec: JobSpec, workdir: Path) -> JobSpec:
    """Over SSH the output directory is one of this directory's, written relative to it in the
    script: the login node's mirror of this directory holds it, and brings it back."""
    out = Path(spec.resources.output_dir)
    if not out.is_absolute():
        return spec
    inside = Path(os.path.normpath(out))
    if not inside.is_relative_to(workdir):
        raise SpecError(
            f"resources.output_dir: {out}: over SSH the output directory must be under this "
            f"directory ({workdir}), which the remote working directory mirrors"
        )
    relative = str(inside.relative_to(workdir)) or "."
    return replace(spec, resources=replace(spec.resources, output_dir=relative))


def _runs_hpcbench_as_is(spec: JobSpec) -> bool:
    """Whether the job runs one of hpcbench's programs with a Python the login node can be
    asked about: no module, conda, container, setup line or variable prepares another."""
    p, env = spec.program, spec.environment
    module = p.module_run()
    prepared = env.modules or env.conda_env or env.container or env.setup or env.variables
    return module.split(".")[0] == "hpcbench" and not prepared


def remote_fields(host: RemoteHost | None) -> tuple[str, str, str]:
    """What a job record keeps of the login node it was submitted to (empty for this machine)."""
    if host is None:
        return ("", "", "")
    return (host.target, host.remote_dir, str(host.local_dir))


def _array_job(
    spec: JobSpec,
    sched: Scheduler,
    array_id: str,
    script: Path,
    cwd: Path,
    where: tuple[str, str, str],
) -> Job:
    """The handle of an array job; every task is remembered as a job of its own (its logs, its
    run directory as its ``.run`` file names it), and the array with the list of them."""
    array = spec.array
    assert array is not None
    tasks, problems = [], []
    for k in range(1, array.size + 1):
        task_id = sched.task_id(array_id, k)
        out, err = sched.task_log_paths(spec, task_id, k, cwd)
        run_name = (cwd / array.tasks_dir / f"{k}.run").read_text().strip()
        run_dir = cwd / array.runs_dir / run_name
        task = JobRecord(task_id, sched.name, script, out, err, run_dir, (), *where)
        problems.append(_remember(task))
        tasks.append(task_id)
    first = sched.task_log_paths(spec, tasks[0], 1, cwd)
    record = JobRecord(
        array_id, sched.name, script, *first, cwd / array.runs_dir, tuple(tasks), *where
    )
    problem = _remember(record) or next((p for p in problems if p), "")
    return Job(record, sched, problem)


def input_warnings(spec: JobSpec, scheduler: str, cwd: str | Path | None = None) -> list[str]:
    """The program's files (``program.script``, the trainer's ``--data``) that are missing:
    :class:`SpecError` where the job runs on this machine, a warning each for a cluster's
    nodes, which may see other files (nothing for a login node over SSH)."""
    if spec.scheduler.host:
        return []
    here = schedulers.get(scheduler).plays_every_system
    return check_program_inputs(spec, here, Path(cwd or os.getcwd()).resolve())


def lead_warning(spec: JobSpec, cwd: str | Path | None = None) -> str | None:
    """A warning when the signal's lead (``requeue.lead``) is shorter than the slowest
    checkpoint the trainer measured in the newest earlier run of this output directory (its
    ``metrics.json``): the ranks would be killed before their checkpoint is written."""
    if not spec.requeue.active(spec.program):
        return None
    root = Path(cwd or os.getcwd()) / spec.resources.output_dir
    newest: tuple[float, Path] | None = None
    try:
        for metrics in root.glob("*/metrics.json"):
            mtime = metrics.stat().st_mtime
            if newest is None or mtime > newest[0]:
                newest = (mtime, metrics)
    except OSError:
        return None
    if newest is None:
        return None
    try:
        measured = read_json(newest[1]).get("checkpoints") or {}
        slowest = float(measured.get("max_s") or 0.0)
    except (OSError, ValueError, TypeError, AttributeError):  # JsonFileError is a ValueError
        return None
    if slowest <= 0 or spec.requeue.lead_s >= slowest:
        return None
    return (
        f"requeue.lead: the signal comes {spec.requeue.lead_s} s before the time limit, but a "
        f"checkpoint took {slowest:.0f} s in {newest[1]}; give --signal-lead more than that "
        "(plus one training step)"
    )


def _make_output_dir(path: Path) -> None:
    """Create the output directory, or say in one line (naming the field) why it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SpecError(f"resources.output_dir: {path} exists and is not a directory") from None
    except OSError as err:
        where = "" if err.filename in (None, str(path)) else f" ({err.filename})"
        raise SpecError(
            f"resources.output_dir: cannot create {path}{where}: {err.strerror}"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpecError(
            f"resources.output_dir: {path} is not writable: {os.strerror(errno.EACCES)}"
        )


def _remember(job: JobRecord) -> str:
    """Record the job for ``hpcbench logs``; '' on success, else why it failed (the job runs)."""

    try:
        job_store.record(job)
    except OSError as err:
        return f"{err.filename or job_store.state_dir() / 'jobs'}: {err.strerror}"
    return ""


def job(job_id: str, scheduler: str | None = None) -> Job:
    """The handle of a job submitted earlier from this machine (``hpcbench logs`` uses it)."""

    check_job_id(job_id, scheduler)
    found = job_store.lookup(job_id, scheduler)
    if found is None:
        raise schedulers.SchedulerError(
            f"no record of job {job_id} submitted from here (records are in {job_store.state_dir() / 'jobs'})"
        )
    return Job(found, schedulers.get(found.scheduler))


def check_job_id(job_id: str, scheduler: str | None = None) -> None:
    """Refuse (JobIdError) an id of no scheduler's form, or not of the named scheduler's form."""
    if scheduler:
        schedulers.get(scheduler).check_ids([job_id])
        return
    if not any(cls.id_pattern.fullmatch(job_id) for cls in schedulers.SCHEDULER_CLASSES.values()):
        raise schedulers.JobIdError(
            f"job id {job_id!r} is not a job id (expected local-<number>, or the id a cluster's "
            "scheduler printed, e.g. 1234, 1234_5 or 1234.server)"
        )
