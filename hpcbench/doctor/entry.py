"""``python -m hpcbench.doctor``: the steps in order on every rank, the findings on rank 0.

Rank 0 writes ``doctor.json`` (versioned: each step's status, seconds, findings and figures)
and ``doctor-verdict.txt`` (the first finding, for the batch script of ``submit --preflight``)
in the run directory, prints the summary, keeps a healthy run's figures as this cluster's
baseline (:mod:`.baseline`) and records the run in the results history (:mod:`.history`).
Exit status 0: nothing named; 1: a finding or a step that did not complete (a rank that never
arrived); 2: bad input, one line naming it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hpcbench.argparsing import Parser
from hpcbench.atomic import write_atomically, write_json_atomically
from hpcbench.doctor import baseline
from hpcbench.doctor.drills import DrillError, read_drills
from hpcbench.doctor.filesystem import DEFAULT_BYTES, FilesystemError
from hpcbench.doctor.history import record_or_warn
from hpcbench.doctor.meeting import Meeting, StepTimeout
from hpcbench.doctor.mpi_collectives import MpiUnavailable
from hpcbench.doctor.steps import STEPS, Context, run_step
from hpcbench.doctor.summary import summary_lines
from hpcbench.jobs.state import state_dir
from hpcbench.this_rank import detect_launch, first_node, job_id, line_buffered_output

VERSION = 1
LEAVE_GRACE_S = 1.0  # rank 0 ends this long after the others


def _steps(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        what = f"unknown step {unknown[0]!r}" if unknown else "no step named"
        raise argparse.ArgumentTypeError(f"{what} (the steps: {', '.join(STEPS)})")
    return [s for s in STEPS if s in names]


def build_parser() -> Parser:
    p = Parser(prog="python -m hpcbench.doctor", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=_steps, default=list(STEPS), help=f"of {', '.join(STEPS)}")
    p.add_argument("--step-timeout", type=float, default=30.0, metavar="S",
                   help="seconds each step waits for every rank (default 30)")  # fmt: skip
    p.add_argument("--path", help="data to read in the filesystem step (a file or directory; "
                   "default: a file the doctor writes in the run directory)")  # fmt: skip
    p.add_argument("--fs-bytes", type=int, default=DEFAULT_BYTES, metavar="N",
                   help="bytes read per node in the filesystem step (default 64 MiB)")  # fmt: skip
    p.add_argument("--max-bytes", type=int, default=0, metavar="N",
                   help="largest all-reduce (default 256 MiB on GPUs, 16 MiB on CPUs)")  # fmt: skip
    p.add_argument("--compute-seconds", type=float, default=1.0, metavar="S")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl", "mpi"), default="auto",
                   help="the all-reduce's: auto (NCCL on GPUs, gloo on CPUs), or mpi "
                   "(mpi4py, for the trainer's mpi strategy; ranks started by mpiexec)")  # fmt: skip
    p.add_argument("--out", metavar="DIR", help="where doctor.json goes outside a job")
    p.add_argument("--no-history", action="store_true",
                   help="do not record this run in the results history")  # fmt: skip
    p.add_argument("--preflight", action="store_true",
                   help="run as submit --preflight's check before the program")  # fmt: skip
    return p


def _check_inputs(args: Any) -> None:
    if args.path and not Path(args.path).exists():
        raise FilesystemError(f"--path {args.path}: no such file or directory")
    read_drills()
    if args.backend == "mpi" and "communication" in args.steps:  # before any step: one line
        from hpcbench.doctor.mpi_collectives import MpiCollectives

        info = detect_launch()
        MpiCollectives(info.rank, info.world_size)


def run(args: Any) -> int:
    info = detect_launch()
    run_dir = Path(os.environ.get("HPCBENCH_RUN_DIR") or args.out or "doctor-run")
    key = baseline.cluster_key(
        os.environ.get("HPCBENCH_PROFILE"), os.environ.get("HPCBENCH_SCHEDULER"), first_node()
    )
    store = baseline.baseline_path(state_dir(), key)
    c = Context(
        info,
        Meeting.open(run_dir, info.rank, info.world_size, job_id()),
        read_drills(),
        args.step_timeout,
        baseline.load(store),
        args,
    )
    steps: dict[str, dict] = {}
    findings: list[str] = []
    for name in ["launch", *[s for s in args.steps if s != "launch"]]:
        try:
            lines, detail, seconds = run_step(c, name)
        except StepTimeout as err:
            findings.append(str(err))
            steps[name] = {"status": "incomplete", "findings": [str(err)]}
            break
        findings += lines
        steps[name] = {"status": "ok" if not lines else "named", "seconds": round(seconds, 3),
                       "findings": lines, **detail}  # fmt: skip
    incomplete = any(s["status"] == "incomplete" for s in steps.values())
    if info.rank != 0:
        if not incomplete:  # gone before rank 0's status: a launcher that stops the others at
            _leave(c)  # a rank's non-zero exit (srun --kill-on-bad-exit) finds them done
        return 1 if incomplete else 0
    document = {
        "version": VERSION,
        "job_id": job_id(),
        "cluster": key,
        "world_size": info.world_size,
        "nodes": {name: ranks for name, ranks in c.nodes},
        "healthy": not findings,
        "findings": findings,
        "baseline": c.baseline,
        "figures": c.figures,
        "steps": steps,
    }
    write_json_atomically(run_dir / "doctor.json", document)
    write_atomically(
        run_dir / "doctor-verdict.txt", (findings[0] if findings else "healthy") + "\n"
    )
    if not findings and "communication" in steps:
        baseline.add(store, c.figures)
    print("\n".join(summary_lines(document)), flush=True)
    if not args.no_history:
        record_or_warn(run_dir, document)
    if not incomplete:
        _leave(c)
    return 1 if findings else 0


def _leave(c: Context) -> None:
    """The last meeting: the other ranks end at once after it (``os._exit``, nothing left to
    tear down), rank 0 a moment later, so that its status (1 for a finding) is the job's, not
    the SIGTERM a launcher sends ranks still running when one exits non-zero."""
    import time

    if c.info.world_size == 1:
        return
    try:
        c.meeting.gather("leave", None, c.timeout)
    except StepTimeout:
        return
    if c.info.rank != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    time.sleep(LEAVE_GRACE_S)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    line_buffered_output()
    try:
        _check_inputs(args)
        return run(args)
    except (FilesystemError, DrillError, MpiUnavailable) as err:
        print(f"hpcbench doctor: {err}", file=sys.stderr)
        return 2
