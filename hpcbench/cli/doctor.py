"""``doctor``: submit hpcbench's doctor to examine an allocation, wait, and print its findings."""

from __future__ import annotations

import argparse
from typing import Any

from hpcbench.cli.options import job_options


def add_parsers(sub: Any) -> None:
    d = sub.add_parser(
        "doctor",
        parents=[job_options()],
        help="examine an allocation: placement, compute, network, filesystem (docs/doctor.md)",
        description="Submit hpcbench's doctor as a job (the job options as for submit), wait for "
        "it and print its findings: every rank launched once and placed on cores of its own, each "
        "node's compute, all-reduce bandwidth within and across nodes (NCCL's transport on GPUs), "
        "the filesystem's read bandwidth alone and together; a slow node, link or missing rank "
        "named. Exits 1 when something is named. Arguments after -- go to the doctor "
        "(python -m hpcbench.doctor --help).",
    )
    d.add_argument("--timeout", type=float, metavar="S", help="give up waiting after S seconds")
    d.set_defaults(run=run, action="submit")


def run(args: argparse.Namespace) -> int:
    from hpcbench.cli import jobs

    args.module, args.script, args.command = "hpcbench.doctor", None, None
    args.wait, args.dry_run, args.preflight = True, False, True
    args.doctor = None  # the doctor does not run itself first
    return jobs.run(args)
