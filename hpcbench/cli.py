"""The ``hpcbench`` command line: parse, call the library, print. Nothing else lives here."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from typing import TYPE_CHECKING, Any

from hpcbench import __version__
from hpcbench.argparsing import Parser
from hpcbench.jobs.launchers import launcher_names
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES
from hpcbench.jobs.spec import FIELD_KEYWORDS

if TYPE_CHECKING:
    from hpcbench.jobs.schedulers.base import JobStatus, Scheduler


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


RECENT_JOBS = 20  # what `hpcbench status` with no job lists


def _line_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a number of lines, 0 or more, got {text!r}")
    return count


def _job_options(spec_positional: bool = True) -> argparse.ArgumentParser:
    """The job spec and the flags over it; ``spec_positional``: the spec file as the first
    argument (``render``, ``submit``), else as ``--spec FILE`` (``profile show NAME``)."""
    p = Parser(add_help=False)
    if spec_positional:
        p.add_argument("spec", nargs="?", help="job spec file (TOML), e.g. jobs/demo.toml")
    else:
        p.add_argument("--spec", metavar="FILE", help="job spec file (TOML), e.g. jobs/demo.toml")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the spec's [smoke] form: the same job in minutes (tiny model, built-in data)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="the cluster profile under the spec (default: $HPCBENCH_PROFILE); hpcbench profile "
        "show NAME prints what it sets",
    )
    _resource_options(p)
    _environment_options(p)
    _launch_options(p)
    _scheduler_options(p)
    _requeue_options(p)
    return p


def _resource_options(p: argparse.ArgumentParser) -> None:
    """Resources, overriding the spec file's."""
    g = p.add_argument_group("resources (override the spec file)")
    g.add_argument("-N", "--nodes", metavar="N")
    g.add_argument("--gpus-per-node", metavar="G")
    g.add_argument(
        "--tasks-per-node", metavar="T", help="ranks per node (default: one per GPU, else 1)"
    )
    g.add_argument("-c", "--cpus-per-task", metavar="C", help="CPUs (and OpenMP threads) per rank")
    g.add_argument("--mem", dest="memory", metavar="SIZE", help="memory per node, e.g. 32G")
    g.add_argument("-t", "--time", metavar="LIMIT", help="time limit: MM, HH:MM:SS or D-HH:MM:SS")
    g.add_argument("-p", "--partition")
    g.add_argument("-A", "--account")
    g.add_argument("--qos")
    g.add_argument("-C", "--constraint")
    g.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("-J", "--job-name")
    g.add_argument("-o", "--output-dir", metavar="DIR", help="where logs and run directories go")


def _environment_options(p: argparse.ArgumentParser) -> None:
    """How the job's shell is prepared."""
    g = p.add_argument_group("environment")
    g.add_argument(
        "--load",
        dest="modules",
        action="append",
        metavar="MODULE",
        help="module to load (repeatable)",
    )
    g.add_argument("--venv", metavar="DIR", help="virtual environment to activate")
    g.add_argument("--conda-env", metavar="NAME")
    g.add_argument(
        "--container", metavar="IMAGE", help="Apptainer/Singularity image to run ranks in"
    )
    g.add_argument(
        "--bind",
        dest="binds",
        action="append",
        metavar="SRC[:DST]",
        help="container bind (repeatable)",
    )
    g.add_argument("--env", dest="variables", action="append", type=_env_pair, metavar="NAME=VALUE")
    g.add_argument("--setup", action="append", metavar="LINE", help="shell line run before launch")


def _launch_options(p: argparse.ArgumentParser) -> None:
    """How ranks start and what they run."""
    g = p.add_argument_group("launch and program")
    g.add_argument("--launcher", choices=launcher_names())
    g.add_argument("--port", metavar="PORT", help="rendezvous port (default: derived from job id)")
    g.add_argument("--python", metavar="EXE", help="python interpreter on the nodes")
    g.add_argument("-m", "--module", help="python module each rank runs (python -m MODULE)")
    g.add_argument("--script", help="python script each rank runs")
    g.add_argument(
        "--program", dest="command", metavar="CMD", help="a whole command line each rank runs"
    )
    g.add_argument(
        "--directive",
        dest="directives",
        action="append",
        metavar="TEXT",
        help="extra scheduler directive",
    )


def _scheduler_options(p: argparse.ArgumentParser) -> None:
    """Which scheduler, and its options."""
    g = p.add_argument_group("scheduler")
    g.add_argument(
        "--scheduler",
        choices=SCHEDULER_CHOICES,
        help="default: detected (sbatch, qsub, else local)",
    )
    g.add_argument(
        "--after",
        action="append",
        metavar="JOB",
        help="start only after job JOB ended successfully (repeatable; a scheduler dependency; Grid Engine's -hold_jid waits for its end, successful or not)",
    )
    g.add_argument(
        "--pbs-resources",
        choices=("select", "nodes"),
        help="PBS resource syntax: select (PBS Pro, OpenPBS; default) or nodes=N:ppn=P (Torque)",
    )
    g.add_argument(
        "--template-dir",
        action="append",
        metavar="DIR",
        help="directory of templates overriding the built-in ones (repeatable)",
    )


def _requeue_options(p: argparse.ArgumentParser) -> None:
    """Surviving time limits and preemption."""
    g = p.add_argument_group("time limits and preemption (docs/resilience.md)")
    g.add_argument(
        "--requeue",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="signal the ranks before the time limit, checkpoint, requeue and resume "
        "(default: on for hpcbench's trainer)",
    )
    g.add_argument("--max-requeues", metavar="N", help="requeue at most N times (default 3)")
    g.add_argument(
        "--signal-lead",
        metavar="LIMIT",
        help="signal this long before the time limit, e.g. 5 or 00:05:00 (default 5 minutes)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="hpcbench",
        description="Job scripts, parallel training and measured comparisons for PyTorch on HPC.",
        epilog="Program arguments go after '--', e.g.: hpcbench submit jobs/demo.toml -- --epochs 3",
    )
    parser.add_argument("--version", action="version", version=f"hpcbench {__version__}")
    sub = parser.add_subparsers(dest="action", required=True, metavar="COMMAND")
    job = _job_options()
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
        help="SLURM: skip checking the request against the partition's limits",
    )
    s.add_argument(
        "--timeout", type=float, metavar="S", help="with --wait: give up after S seconds"
    )
    st = sub.add_parser(
        "status",
        help="state of jobs",
        description="Print the state of jobs; without JOB, of the jobs last submitted from here. "
        "Exits 1 when a job's state is not known (no such job).",
    )
    st.add_argument("job_ids", nargs="*", metavar="JOB")
    st.add_argument(
        "--last", type=_line_count, default=RECENT_JOBS,
        help=f"without JOB: how many of the newest jobs (default {RECENT_JOBS})",
    )  # fmt: skip
    st.add_argument("--scheduler", choices=SCHEDULER_CHOICES)
    st.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="for finished jobs, also what the scheduler's accounting recorded (sacct, qacct, "
        "qstat -x, bacct): queue wait, elapsed and CPU time, memory high-water marks, energy",
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
        "-n", "--lines", type=_line_count, default=30, help="log lines to show (default 30)"
    )
    c = sub.add_parser("cancel", help="cancel jobs", description="Cancel jobs.")
    c.add_argument("job_ids", nargs="+", metavar="JOB")
    c.add_argument("--scheduler", choices=SCHEDULER_CHOICES)
    from hpcbench import cli_bench, cli_history, cli_prep, cli_profile, cli_sweep

    cli_prep.add_parser(sub)
    cli_bench.add_parsers(sub)
    cli_history.add_parsers(sub)
    cli_sweep.add_parsers(sub)
    cli_profile.add_parser(sub, _job_options(spec_positional=False))
    return parser


def overrides_from(args: argparse.Namespace, program_args: list[str]) -> dict[str, tuple[str, Any]]:
    """CLI flags as spec overrides: dotted field -> (flag as typed, value)."""
    from hpcbench.jobs.spec import SpecError

    flags = {
        a.dest: max(a.option_strings, key=len) for a in _job_options()._actions if a.option_strings
    }
    out: dict[str, tuple[str, Any]] = {}
    for keyword, dotted in FIELD_KEYWORDS.items():
        value = getattr(args, keyword, None)
        if value is None or keyword not in flags:
            continue
        if keyword == "variables":
            value = dict(value)
        elif keyword == "command":
            try:
                value = shlex.split(value)
            except ValueError as err:
                raise SpecError(f"--program: {err}") from None
        out[dotted] = (flags[keyword], value)
    if program_args:
        out["program.args"] = ("-- ARGS", program_args)
    return out


def _split_program_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    from hpcbench.launch import line_buffered_output

    line_buffered_output()  # progress reaches a pipe, a tee or a job's log as it happens
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["train"], ["predict"]):  # programs of their own, not subcommands
        print(
            f"hpcbench: error: {argv[0]} is not a command of hpcbench: run it as python -m "
            f"hpcbench.{argv[0]} ARGS (on this machine), or as a job with hpcbench submit "
            f"--module hpcbench.{argv[0]} -- ARGS (python -m hpcbench.{argv[0]} --help lists "
            "its options)",
            file=sys.stderr,
        )
        return 2
    own, program_args = _split_program_args(argv)
    args = build_parser().parse_args(own)
    if args.action in ("prep", "history", "check", "sweep"):  # each a module of its own
        module = {"check": "history"}.get(args.action, args.action)
        return int(importlib.import_module(f"hpcbench.cli_{module}").run(args))
    if args.action == "profile":
        from hpcbench import cli_profile

        return cli_profile.run(args, overrides_from(args, program_args))
    if args.action in ("bench", "report", "compare", "predict-scaling"):
        from hpcbench import cli_bench

        return cli_bench.run(args, program_args)
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
            args.spec, overrides_from(args, program_args), smoke=args.smoke, profile=args.profile
        )
        name, why = api.resolve_scheduler(spec, args.scheduler)
        print(f"hpcbench: scheduler {name} ({why})", file=sys.stderr)
        if args.action == "render" or args.dry_run:
            sys.stdout.write(api.render(spec, name, args.template_dir))
            return 0
        if (warning := api.lead_warning(spec)) is not None:
            print(f"hpcbench: warning: {warning}", file=sys.stderr)
        if args.wait:  # a bad $HPCBENCH_POLL_CEILING stops before the job is submitted
            from hpcbench.jobs.schedulers.base import check_poll_ceiling

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
        status = job.wait(args.timeout, on_line=lambda line: print(line, flush=True))
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


def _logs_command(args: argparse.Namespace) -> int:
    from hpcbench import api
    from hpcbench.jobs.logs import error_tail
    from hpcbench.jobs.schedulers.base import array_status, tail

    handle = api.job(args.job_id, None if args.scheduler in (None, "auto") else args.scheduler)
    if handle.tasks:  # an array: each task's state, and how to see one task's logs
        found = handle.scheduler.statuses(list(handle.tasks))
        for task in handle.tasks:
            _print_status(task, found[task])
        _print_status(handle.job_id, array_status([found[t] for t in handle.tasks]))
        print(f"an array of {len(handle.tasks)} tasks: hpcbench logs {handle.tasks[0]} shows "
              "one task's logs")  # fmt: skip
        return 0
    status = handle.status()
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
    from hpcbench import api
    from hpcbench.jobs import registry, schedulers
    from hpcbench.jobs.schedulers.base import array_status

    named = args.scheduler not in (None, "auto")
    by_scheduler: dict[str, list[str]] = {}
    order: list[tuple[str, str]] = []  # what to print, in order: ("job"|"array", id)
    job_ids = args.job_ids
    if args.action == "status" and not job_ids:  # the newest jobs submitted from here
        recent = registry.recent(args.last, args.scheduler if named else None)
        if not recent:
            print(f"no jobs submitted from here (records in {registry.state_dir() / 'jobs'})")
            return 0
        for found in recent:  # newest first, whatever their schedulers
            by_scheduler.setdefault(found.scheduler, []).append(found.job_id)
            order.append(("job", found.job_id))
        job_ids = []
    arrays: dict[str, tuple[str, ...]] = {}  # an array's id -> its tasks' (from its record)
    for job_id in job_ids:
        api.check_job_id(job_id, args.scheduler if named else None)
        found = registry.lookup(job_id, args.scheduler if named else None)
        if named:
            name = args.scheduler
        elif found is not None:
            name = found.scheduler
        else:
            name = schedulers.for_job_id(job_id)
        if found is not None and found.tasks:
            arrays[job_id] = found.tasks
        ids = list(arrays.get(job_id) or [job_id])
        by_scheduler.setdefault(name, []).extend(ids)
        order += [("job", i) for i in ids] + ([("array", job_id)] if job_id in arrays else [])
    states: dict[str, tuple[str, JobStatus]] = {}
    for name, ids in by_scheduler.items():
        sched = schedulers.get(name)
        sched.check_ids(ids)
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
        unknown += st.state == "UNKNOWN" and bool(args.job_ids)
        if args.verbose and st.finished:
            _print_accounting(name, job_id)
    return 1 if unknown else 0


def _print_accounting(scheduler: str, job_id: str) -> None:
    """The scheduler's accounting of a finished job, read once and kept in its run directory
    (where hpcbench knows the job)."""
    from hpcbench.jobs import registry
    from hpcbench.jobs.accounting.reading import account_finished
    from hpcbench.jobs.accounting.text import describe

    found = registry.lookup(job_id, scheduler)
    record = account_finished(scheduler, job_id, found.run_dir if found else None)
    for line in describe(record):
        print(f"  {line}")


def _print_status(job_id: str, st: JobStatus) -> None:
    code = "" if st.exit_code is None else f" exit={st.exit_code}"
    print(f"{job_id}\t{st.state}{code}{chr(9) + st.reason if st.reason else ''}")


def _cancel(sched: Scheduler, job_ids: list[str]) -> int:
    """Cancel the jobs that have not finished; say which had already finished."""
    active = []
    for job_id, st in sched.statuses(job_ids).items():
        if st.finished:
            print(f"{job_id} had already finished ({st.state}); nothing to cancel")
        else:
            active.append(job_id)
    if active:
        sched.cancel(active)
        print(f"cancelled {', '.join(active)} ({sched.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
