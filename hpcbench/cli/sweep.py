"""``hpcbench sweep`` and ``hpcbench profile``: parse, call :mod:`hpcbench.sweep` or
:mod:`hpcbench.jobs.profiles`, print."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from hpcbench.argparsing import count
from hpcbench.files import printable
from hpcbench.jobs.profiles import PROFILE_VAR
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES


def add_parsers(sub: Any) -> None:
    s = sub.add_parser(
        "sweep",
        help="a hyperparameter sweep as one array job",
        description="Run every setting of a sweep file (axes of trainer options combined as a "
        "product, zipped or drawn at random) as the tasks of one array job, each in a run "
        "directory named after its setting; run it again to continue an interrupted sweep. "
        "hpcbench report RESULTS ranks the settings.",
        epilog="e.g. hpcbench sweep jobs/reference-study/sweep.toml --smoke --max-parallel 2",
    )
    s.add_argument("sweep", help="sweep file (TOML); see docs/sweeps.md")
    s.add_argument("--results", metavar="DIR", help="default runs/sweep-<name>")
    s.add_argument(
        "--axis",
        action="append",
        metavar="OPTION=V,V",
        help="an axis of values for a trainer option (replaces the file's axis of that option); "
        "repeatable, e.g. --axis lr=0.01,0.05,0.1",
    )
    s.add_argument(
        "--max-parallel", type=count(1, 10_000), metavar="P", help="tasks running at once"
    )
    s.add_argument("--repetitions", type=count(1, 10_000), metavar="N", help="runs of each setting")
    s.add_argument("--smoke", action="store_true", help="the sweep file's [smoke] form")
    s.add_argument("--plan", action="store_true", help="print the settings; run nothing")
    s.add_argument(
        "--render",
        action="store_true",
        help="print the array script it would submit (all its tasks; for --scheduler); run and "
        "write nothing",
    )
    s.add_argument("--retry-failed", action="store_true", help="submit the failed tasks again too")
    s.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="submit and return; the same command follows the tasks later",
    )
    s.add_argument("--scheduler", choices=SCHEDULER_CHOICES)
    s.add_argument(
        "--host",
        metavar="USER@HOST",
        help="submit the array to this login node's scheduler over SSH and bring each task's run "
        "directory back here (docs/cluster-guide.md)",
    )
    s.add_argument(
        "--remote-dir",
        metavar="DIR",
        help="the working directory on --host (default: hpcbench/<this directory's name>)",
    )
    s.add_argument(
        "--profile", metavar="NAME", help="the cluster profile (default: $HPCBENCH_PROFILE)"
    )
    for name in ("sweep",):
        sub.choices[name].set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.bench.running.matrix import MatrixError
    from hpcbench.jobs.render import RenderError
    from hpcbench.jobs.schedulers import SchedulerError
    from hpcbench.jobs.schedulers.polling import check_poll_ceiling
    from hpcbench.jobs.spec import SpecError
    from hpcbench.jobs.submission import login_fields
    from hpcbench.sweep.plan import SweepError, read_sweep
    from hpcbench.sweep.runner import FAILED, SweepRunner, counts

    if args.profile:  # every job spec this command loads stands on it
        os.environ[PROFILE_VAR] = args.profile
    try:
        sweep = read_sweep(args.sweep, args.smoke, args.axis, args.max_parallel, args.repetitions)
        login_fields(args.host, args.remote_dir)  # a bad --host: one line, even with --plan
        if args.plan:
            _print_plan(sweep)
            return 0
        results = args.results or f"runs/sweep-{sweep.name}{'-smoke' if args.smoke else ''}"
        if args.render:
            from hpcbench.sweep.preview import render_sweep

            name, why, text = render_sweep(sweep, results, args.scheduler)
            print(f"hpcbench: scheduler {name} ({why})", file=sys.stderr)
            sys.stdout.write(text)
            return 0
        check_poll_ceiling()  # a bad $HPCBENCH_POLL_CEILING stops before any task is submitted
        runner = SweepRunner(
            sweep, results, args.scheduler, host=args.host, remote_dir=args.remote_dir
        )
        continued = runner.open()
        print(
            f"sweep {sweep.name}: {len(runner.tasks)} task(s) in {runner.results}"
            + (" (continued)" if continued else ""),
            flush=True,
        )
        try:
            states = runner.run(retry_failed=args.retry_failed, wait=args.wait)
        except KeyboardInterrupt:
            print(
                "\nstopped following the sweep; its tasks go on. Run the same command to follow "
                "them again.",
                file=sys.stderr,
            )
            return 130
        for st in states:
            if st.state == FAILED:
                print(f"failed: {st.task.run} (task {st.job_id}): {st.reason or 'no results'}")
        print(f"sweep {sweep.name}: {counts(states)}; hpcbench report {runner.results}")
        if any(s.state == FAILED for s in states):
            print("failed tasks run again with --retry-failed", file=sys.stderr)
            return 1
        return 0
    except (SweepError, MatrixError, SpecError, RenderError, SchedulerError) as err:
        print(f"hpcbench: error: {err}", file=sys.stderr)
        return 1 if isinstance(err, SchedulerError) else 2
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        print(f"hpcbench: error: {where}{err.strerror or err}", file=sys.stderr)
        return 1


def _print_plan(sweep: Any) -> None:
    tasks = sweep.tasks()
    print(
        printable(
            f"sweep {sweep.name}: {len(sweep.settings())} setting(s) ({sweep.mode}) x "
            f"{sweep.repetitions} repetition(s) = {len(tasks)} task(s); job "
            f"{sweep.job or '(defaults)'}"
        )
    )
    for task in tasks:
        shown = ", ".join(f"{k}={v!r}" for k, v in task.setting.items()) or "(the job as it is)"
        print(f"{task.index}\t{printable(task.run)}\t{printable(shown)}")
