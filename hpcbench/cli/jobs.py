"""``render``, ``submit``, ``status``, ``logs``, ``cancel``: a job spec rendered, submitted and
followed."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from hpcbench.cli.options import job_options, line_count, overrides_from
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES, SCHEDULER_CLASSES

if TYPE_CHECKING:
    from hpcbench.jobs.schedulers.base import JobRecord, JobStatus, Scheduler

RECENT_JOBS = 20  # what `hpcbench status` with no job lists


def describing_labels() -> str:
    """The batch systems whose cluster description hpcbench reads (preflight, profile init)."""
    return " and ".join(c.label for c in SCHEDULER_CLASSES.values() if c.describes_cluster)


def add_parsers(sub: Any) -> None:
    _spec_parsers(sub)
    _job_parsers(sub)
    for name in ("render", "submit", "status", "logs", "cancel"):
        sub.choices[name].set_defaults(run=run)


def _spec_parsers(sub: Any) -> None:
    """``render`` and ``submit``: a job spec and the flags over it."""
    job = job_options()
    sub.add_parser(
        "render",
        parents=[job],
        help="print the batch script for a job",
        description="Render the job's batch script and print it.",
    )
    s = sub.add_parser(
        "submit",
        parents=[job],
        help="submit a job (or run it locally)",
        description="Render the job's script, keep a copy in <output-dir>/scripts and submit it.",
    )
    s.add_argument("--dry-run", action="store_true", help="print the script instead of submitting")
    s.add_argument("--wait", action="store_true", help="wait for the job; exit with its status")
    s.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help=f"{describing_labels()}: skip checking the request against the partition's limits",
    )
    s.add_argument(
        "--timeout", type=float, metavar="S", help="with --wait: give up after S seconds"
    )


def _job_parsers(sub: Any) -> None:
    """``status``, ``logs`` and ``cancel``: jobs already submitted."""
    classes = SCHEDULER_CLASSES.values()
    st = sub.add_parser(
        "status",
        help="state of jobs",
        description="Print the state of jobs; without JOB, of the jobs last submitted from here. "
        "Exits 1 when a job's state is not known (no such job).",
    )
    st.add_argument("job_ids", nargs="*", metavar="JOB")
    st.add_argument(
        "--last", type=line_count, default=RECENT_JOBS,
        help=f"without JOB: how many of the newest jobs (default {RECENT_JOBS})",
    )  # fmt: skip
    st.add_argument("--scheduler", choices=SCHEDULER_CHOICES)
    st.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="for finished jobs, also what the scheduler's accounting recorded "
        f"({', '.join(c.accounting_command for c in classes if c.accounting_command)}): queue "
        "wait, elapsed and CPU time, memory high-water marks, energy",
    )
    lg = sub.add_parser(
        "logs",
        help="a job's state and logs",
        description="Print a job's state, the first failing rank's traceback if it failed, and "
        "the tail of its log.",
    )
    lg.add_argument("job_id", metavar="JOB")
    lg.add_argument("--scheduler", choices=SCHEDULER_CHOICES)
    lg.add_argument(
        "-n", "--lines", type=line_count, default=30, help="log lines to show (default 30)"
    )
    c = sub.add_parser("cancel", help="cancel jobs", description="Cancel jobs.")
    c.add_argument("job_ids", nargs="+", metavar="JOB")
    c.add_argument("--scheduler", choices=SCHEDULER_CHOICES)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `hpcbench --help` stays instant; none of these imports torch.
    from hpcbench import api
    from hpcbench.jobs.render import RenderError
    from hpcbench.jobs.schedulers import JobIdError, SchedulerError
    from hpcbench.jobs.spec import SpecError
    from hpcbench.jobs.spec_load import load_spec

    try:
        if args.action in ("status", "cancel"):
            return _jobs_command(args)
        if args.action == "logs":
            return _logs_command(args)
        spec = load_spec(
            args.spec,
            overrides_from(args, args.program_args),
            smoke=args.smoke,
            profile=args.profile,
        )
        name, why = api.resolve_scheduler(spec, args.scheduler)
        print(f"hpcbench: scheduler {name} ({why})", file=sys.stderr)
        if args.action == "render":
            sys.stdout.write(api.render(spec, name, args.template_dir))
            return 0
        for warning in api.input_warnings(spec, name):  # a job that runs here: refused
            print(f"hpcbench: warning: {warning}", file=sys.stderr)
        if args.dry_run:
            sys.stdout.write(api.render(spec, name, args.template_dir))
            print(_dry_run_preflight(spec, name, args.preflight), file=sys.stderr)
            return 0
        if (warning := api.lead_warning(spec)) is not None:
            print(f"hpcbench: warning: {warning}", file=sys.stderr)
        if args.wait:  # a bad $HPCBENCH_POLL_CEILING stops before the job is submitted
            from hpcbench.jobs.schedulers.polling import check_poll_ceiling

            check_poll_ceiling()
        job = api.submit(spec, name, args.template_dir, preflight=args.preflight)
        print(f"submitted job {job.job_id} to {name}: {job.record.script_path}", flush=True)
        print(f"logs: {job.record.stdout_path} and {job.record.stderr_path}")
        print(f"run directory: {job.record.run_dir}", flush=True)
        if job.record_error:
            print(
                f"hpcbench: warning: job {job.job_id} runs but was not recorded "
                f"({job.record_error}); hpcbench logs will not find it",
                file=sys.stderr,
            )
        return _wait_for(job, name, args) if args.wait else 0
    except (SpecError, RenderError, SchedulerError, TimeoutError) as err:
        print(f"hpcbench: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, (SpecError, RenderError, JobIdError)) else 1
    except BrokenPipeError:  # `hpcbench logs … | head`: the reader had enough; not an error
        _quiet_stdout()
        return 141
    except OSError as err:  # a file hpcbench needs; the message names it
        where = f"{err.filename}: " if err.filename else ""
        print(f"hpcbench: error: {where}{err.strerror or err}", file=sys.stderr)
        return 1


def _dry_run_preflight(spec: Any, scheduler: str, wanted: bool) -> str:
    """A dry run's preflight (the scheduler's limits for the request), as one line: passed,
    skipped and why; a request the cluster refuses raises as a submission would."""
    from hpcbench.jobs.schedulers import SchedulerError, get
    from hpcbench.jobs.schedulers.errors import RequestRefused, SchedulerUnreachable

    if not wanted:
        return "hpcbench: preflight skipped (--no-preflight); nothing was submitted"
    if spec.scheduler.host:
        return "hpcbench: preflight skipped (over SSH it runs at submission); nothing was submitted"
    try:
        get(scheduler).preflight(spec)
    except SchedulerUnreachable as err:  # a controller down says nothing of the request
        return f"hpcbench: preflight skipped ({err}); nothing was submitted"
    except RequestRefused:
        raise
    except SchedulerError as err:  # no controller, or none of its commands here
        return f"hpcbench: preflight skipped ({err}); nothing was submitted"
    return "hpcbench: preflight passed; nothing was submitted"


def _quiet_stdout() -> None:
    """stdout to /dev/null: the interpreter's last flush at exit must not fail on the closed
    pipe again (and print "Exception ignored … BrokenPipeError")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _wait_for(job: Any, name: str, args: argparse.Namespace) -> int:
    """``submit --wait``: the job's log as it grows, then how it ended (with what the
    scheduler's accounting recorded of it); the job's exit status."""
    from hpcbench.jobs.accounting.reading import keeps_accounting
    from hpcbench.jobs.accounting.text import describe

    assert job.record is not None
    print(f"--- {job.record.stdout_path} as it grows", flush=True)
    try:
        status = job.wait(args.timeout, on_line=lambda line: print(line, flush=True),
                          on_state=lambda st: _say_state(job.job_id, st))  # fmt: skip
    except KeyboardInterrupt:
        print(
            f"\nstopped waiting; job {job.job_id} goes on (hpcbench cancel {job.job_id} "
            f"--scheduler {name})",
            file=sys.stderr,
        )
        return 130
    if keeps_accounting(name):  # the scheduler's record of it, kept beside its results
        for line in describe(job.accounting()):
            print(line)
    if status.state == "COMPLETED":
        print(f"job {job.job_id} completed")
        return 0
    print(job.failure_report(status), file=sys.stderr)
    return status.exit_code if status.exit_code not in (None, 0) else 1


def _say_state(job_id: str, st: JobStatus) -> None:
    """``submit --wait``'s line for each change of the job's state: pending and why (the
    scheduler's reason: Resources, Priority, QOSMaxJobsPerUserLimit), started, ..."""
    from hpcbench.files import printable

    if st.finished:
        return  # how it ended is said after its log
    why = f" ({printable(st.reason)})" if st.reason and st.reason != "None" else ""
    said = {"PENDING": "is pending", "RUNNING": "is running"}.get(st.state)
    print(f"hpcbench: job {job_id} {said or printable(st.state).lower()}{why}", file=sys.stderr,
          flush=True)  # fmt: skip


def _logs_command(args: argparse.Namespace) -> int:
    from hpcbench import api
    from hpcbench.jobs.logs import error_tail
    from hpcbench.jobs.remote import using
    from hpcbench.jobs.schedulers.base import array_status
    from hpcbench.jobs.schedulers.commands import tail

    handle = api.job(args.job_id, None if args.scheduler in (None, "auto") else args.scheduler)
    if handle.tasks:  # an array: each task's state, and how to see one task's logs
        with using(handle.login_node()):
            found = handle.scheduler.statuses(list(handle.tasks))
        for task in handle.tasks:
            _print_status(task, found[task])
        _print_status(handle.job_id, array_status([found[t] for t in handle.tasks]))
        print(f"an array of {len(handle.tasks)} tasks: hpcbench logs {handle.tasks[0]} shows "
              "one task's logs")  # fmt: skip
        return 0
    status = handle.status()
    handle.fetch()  # the logs and run directory from the login node, when there is one
    code = "" if status.exit_code is None else f" exit={status.exit_code}"
    print(f"job {handle.job_id} ({handle.record.scheduler}): {status.state}{code}")
    if status.state in ("FAILED", "TIMEOUT", "CANCELLED", "PREEMPTED"):
        print(handle.failure_report(status, args.lines))
    elif args.lines > 0:
        for path in (handle.record.stdout_path, handle.record.stderr_path):
            text = (
                tail(path, args.lines)
                if path == handle.record.stdout_path
                else error_tail(tail(path, 4 * args.lines), args.lines)
            )
            if text:
                print(f"--- last lines of {path}\n{text}")
    print(f"run directory: {handle.record.run_dir}")
    return 0


def _jobs_command(args: argparse.Namespace) -> int:
    """``status`` and ``cancel``: each job's scheduler is the one named, else the one its record
    says (jobs submitted from here), else the one whose ids look like it (this machine's first)."""
    from hpcbench.jobs import job_store, schedulers
    from hpcbench.jobs.remote import login_for, using
    from hpcbench.jobs.schedulers.base import array_status

    named = args.scheduler not in (None, "auto")
    # by scheduler and the record of a job submitted to a login node over SSH (None for here)
    by_scheduler: dict[tuple[str, JobRecord | None], list[str]] = {}
    order: list[tuple[str, str]] = []  # what to print, in order: ("job"|"array", id)
    job_ids = args.job_ids
    if args.action == "status" and not job_ids:  # the newest jobs submitted from here
        recent = job_store.recent(args.last, args.scheduler if named else None)
        if not recent:
            print(f"no jobs submitted from here (records in {job_store.state_dir() / 'jobs'})")
            return 0
        listed: dict[str, tuple[str, ...]] = {}
        for found in recent:  # newest first, whatever their schedulers
            key = (found.scheduler, found if found.host else None)
            if found.tasks:  # an array: its state from its tasks', as `status ID` says it
                by_scheduler.setdefault(key, []).extend(found.tasks)
                listed[found.job_id] = found.tasks
                order.append(("array", found.job_id))
                continue
            by_scheduler.setdefault(key, []).append(found.job_id)
            order.append(("job", found.job_id))
        job_ids = []
    arrays = _group_named_jobs(job_ids, args.scheduler if named else None, by_scheduler, order)
    if args.action == "status" and not args.job_ids:
        arrays.update(listed)
        by_scheduler = {key: list(dict.fromkeys(ids)) for key, ids in by_scheduler.items()}
    states: dict[str, tuple[str, JobStatus]] = {}
    for (name, remote_record), ids in by_scheduler.items():
        sched = schedulers.get(name)
        sched.check_ids(ids)
        with using(login_for(remote_record)):
            if args.action == "cancel":
                _cancel(sched, ids)
                continue
            states.update({j: (name, st) for j, st in sched.statuses(ids).items()})
    unknown = 0
    for kind, job_id in order if args.action == "status" else []:
        if kind == "array":
            tasks = arrays[job_id]
            if all(t in states for t in tasks):
                _print_status(job_id, array_status([states[t][1] for t in tasks]))
            continue
        name, st = states[job_id]
        _print_status(job_id, st)
        if st.state == "FAILED" and (said := preflight_verdict(job_id)):
            print(f"  {said}")
        unknown += st.state == "UNKNOWN" and bool(args.job_ids)
        if args.verbose and st.finished:
            _print_accounting(name, job_id)
    return 1 if unknown else 0


def preflight_verdict(job_id: str) -> str | None:
    from hpcbench import api
    from hpcbench.jobs.logs import preflight_line

    try:
        record = api.job(job_id).record
    except Exception:  # noqa: BLE001 - no record of it here: nothing more to say
        return None
    return preflight_line(record.stderr_path) if record is not None else None


def _group_named_jobs(
    job_ids: list[str],
    scheduler: str | None,
    by_scheduler: dict[tuple[str, JobRecord | None], list[str]],
    order: list[tuple[str, str]],
) -> dict[str, tuple[str, ...]]:
    """Put each named job (an array: its tasks) under its scheduler and login node, in the order
    to print them; the arrays' tasks by array id. The scheduler is the one named, else the one
    the job's record says, else the one whose ids look like it."""
    from hpcbench import api
    from hpcbench.jobs import job_store, schedulers

    arrays: dict[str, tuple[str, ...]] = {}
    for job_id in job_ids:
        api.check_job_id(job_id, scheduler)
        found = job_store.lookup(job_id, scheduler)
        name = scheduler or (found.scheduler if found else schedulers.for_job_id(job_id))
        if found is not None and found.tasks:
            arrays[job_id] = found.tasks
        ids = list(arrays.get(job_id) or [job_id])
        by_scheduler.setdefault((name, found if found and found.host else None), []).extend(ids)
        order += [("job", i) for i in ids] + ([("array", job_id)] if job_id in arrays else [])
    return arrays


def _print_accounting(scheduler: str, job_id: str) -> None:
    """The scheduler's accounting of a finished job, read once and kept in its run directory
    (where hpcbench knows the job)."""
    from hpcbench.jobs import job_store
    from hpcbench.jobs.accounting.reading import account_finished
    from hpcbench.jobs.accounting.text import describe
    from hpcbench.jobs.remote import login_for, using

    found = job_store.lookup(job_id, scheduler)
    with using(login_for(found)):
        record = account_finished(scheduler, job_id, found.run_dir if found else None)
    for line in describe(record):
        print(f"  {line}")


def _print_status(job_id: str, st: JobStatus) -> None:
    from hpcbench.files import printable  # the scheduler's words: a job's name is in them

    code = "" if st.exit_code is None else f" exit={st.exit_code}"
    reason = f"\t{printable(st.reason)}" if st.reason else ""
    print(f"{printable(job_id)}\t{printable(st.state)}{code}{reason}")


def _cancel(sched: Scheduler, job_ids: list[str]) -> int:
    """Cancel the jobs that have not finished; say which had already finished."""
    active = []
    for job_id, st in sched.statuses(job_ids).items():
        if st.finished:
            print(f"{job_id} had already finished ({st.state}); nothing to cancel")
        else:
            active.append(job_id)
    if active:
        from hpcbench.jobs.cancel_mark import cancel_marks

        with cancel_marks(active, sched.name):  # the job's script then never requeues it
            sched.cancel(active)
        print(f"cancelled {', '.join(active)} ({sched.name})")
    return 0
