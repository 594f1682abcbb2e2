"""``watch``: a live view of a job, a run directory, a benchmark matrix or a sweep."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from hpcbench.jobs.schedulers import SCHEDULER_CHOICES


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.2 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds from 0.2 to 3600")
    return value


def add_parsers(sub: Any) -> None:
    w = sub.add_parser(
        "watch",
        help="a live view of a job, a run, a matrix or a sweep while it runs",
        description="Show a job, a run directory, a benchmark matrix's or a sweep's results "
        "directory while it runs: each run's queue state, progress, samples/s, ETA and last "
        "loss; each rank's step, compute, data and communication time, CPU or GPU use, and the "
        "stragglers named. Redrawn in place on a terminal, plain lines in a pipe or a log; "
        "ends when what it watches has ended, with the line submit --wait ends with "
        "(docs/watching.md).",
    )
    w.add_argument("target", metavar="JOB|RUN_DIR|RESULTS_DIR")
    w.add_argument("--scheduler", choices=SCHEDULER_CHOICES, help="the job's scheduler")
    w.add_argument(
        "--interval", type=_interval, default=5.0, metavar="S",
        help="seconds between refreshes (default 5)",
    )  # fmt: skip
    w.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.watch import WatchError, resolve, watch

    try:
        target = resolve(args.target, None if args.scheduler in (None, "auto") else args.scheduler)
    except WatchError as err:
        print(f"hpcbench watch: error: {err}", file=sys.stderr)
        return 2
    try:
        return watch(target, interval=args.interval)
    except KeyboardInterrupt:
        print("\nstopped watching; what it watched goes on", file=sys.stderr)
        return 130
