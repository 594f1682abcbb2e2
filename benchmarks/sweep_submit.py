"""What submitting a sweep as ONE array job costs, against submitting its tasks one job each, in
the same run: N tasks (``program = true``) rendered and submitted through ``api.submit`` as an
array of N, and as N single jobs, interleaved (array, singles, array, ...) so that the machine's
noise falls on both alike; the medians and their ratio are printed.

On a cluster (``--scheduler slurm``) the array is one ``sbatch`` against N, which is what a
controller's submit limits count; on the local scheduler (the default, any machine) it is one
rendered script and N supervisors against N scripts and N supervisors. Every job is waited for
after its timing, untimed, before the next round.

    python benchmarks/sweep_submit.py [--tasks 16] [--repeats 7] [--scheduler local]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import array_tasks

from hpcbench.jobs.spec_load import build_spec
from hpcbench.jobs.submission import submit


def spec(name: str):
    return build_spec(
        {"program": {"command": ["true"]}, "resources": {"job_name": name, "time": "00:05:00"}}
    )


def array_round(tasks: int, work: Path, scheduler: str) -> tuple[float, list]:
    s = spec("array")
    s.array = array_tasks(work, tasks)
    started = time.perf_counter()
    job = submit(s, scheduler, cwd=work, preflight=False)
    return time.perf_counter() - started, [job]


def singles_round(tasks: int, work: Path, scheduler: str) -> tuple[float, list]:
    started = time.perf_counter()
    jobs = [submit(spec("single"), scheduler, cwd=work, preflight=False) for _ in range(tasks)]
    return time.perf_counter() - started, jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--scheduler", default="local")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"one array of N": [], "N single jobs": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ.setdefault("HPCBENCH_STATE_DIR", str(work / "state"))
        for _ in range(args.repeats):
            for name, one_round in (("one array of N", array_round),
                                    ("N single jobs", singles_round)):  # fmt: skip
                seconds, jobs = one_round(args.tasks, work, args.scheduler)
                times[name].append(seconds)
                for job in jobs:  # untimed: the next round starts on a quiet machine
                    job.wait(timeout=600)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"# submitting {args.tasks} tasks on {args.scheduler}, median of {args.repeats} "
        f"interleaved rounds (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    )
    for name, m in med.items():
        print(f"{name:16s} {m * 1000:8.1f} ms  ({m / args.tasks * 1000:.1f} ms a task)")
    print(f"ratio array / singles: {med['one array of N'] / med['N single jobs']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
