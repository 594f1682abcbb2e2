"""What a big local array holds while it runs, and how long its cancel takes, against the same
tasks as single local jobs, in the same run.

N tasks (``sleep 300``) at most P at a time: as one array (one dispatcher that starts a task's
supervisor as a slot frees up) and as every local array ran before, a supervisor for each task
at once: P single jobs running and N - P waiting (after a job that never ends, as they waited
for a slot; the blocker is one more running job on this side); one after the other, R
rounds. For each: the memory (the sum of the
resident sets of every process that belongs to the jobs, the dispatcher included) once the
first P tasks run, the number of those processes, and the seconds ``cancel`` takes for all of
them. The medians and the ratios array / singles are printed.

    python benchmarks/local_array.py [--tasks 200] [--parallel 2] [--repeats 3]
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

from hpcbench.jobs.schedulers import get
from hpcbench.jobs.spec_load import build_spec
from hpcbench.jobs.submission import submit


def spec(name: str):
    return build_spec({"program": {"command": ["sleep", "300"]}, "resources": {"job_name": name}})


def held(state: Path) -> tuple[int, int]:
    """(processes, resident bytes) of every process started for this state directory's jobs."""
    mine = f"HPCBENCH_STATE_DIR={state}".encode()
    count, rss = 0, 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if mine not in environ:
                continue
            pages = int((entry / "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        count += 1
        rss += pages * os.sysconf("SC_PAGE_SIZE")
    return count, rss


def wait_running(ids: list[str], want: int, timeout: float = 120) -> None:
    sched = get("local")
    deadline = time.monotonic() + timeout
    while sum(s.state == "RUNNING" for s in sched.statuses(ids).values()) < want:
        failed = [j for j, s in sched.statuses(ids).items() if s.state == "FAILED"]
        if failed:
            raise SystemExit(f"job {failed[0]} failed: see its log")
        if time.monotonic() > deadline:
            raise SystemExit(f"fewer than {want} tasks running after {timeout:.0f} s")
        time.sleep(0.2)


def array_round(n: int, p: int, work: Path) -> tuple[int, int, float]:
    s = spec("array")
    s.array = array_tasks(work, n, p)
    job = submit(s, "local", cwd=work, preflight=False)
    wait_running(list(job.tasks), p)
    count, rss = held(Path(os.environ["HPCBENCH_STATE_DIR"]))
    started = time.perf_counter()
    get("local").cancel([job.job_id])
    return count, rss, time.perf_counter() - started


def singles_round(n: int, p: int, work: Path) -> tuple[int, int, float]:
    """As every local array ran before: P tasks running, N - P supervisors waiting (here for a
    job that never ends, as they waited for a slot)."""
    blocker = submit(spec("blocker"), "local", cwd=work, preflight=False)
    jobs = [submit(spec("single"), "local", cwd=work, preflight=False) for _ in range(p)]
    for _ in range(n - p):
        waiting = spec("single")
        waiting.scheduler.after = [blocker.job_id]
        jobs.append(submit(waiting, "local", cwd=work, preflight=False))
    ids = [blocker.job_id, *(j.job_id for j in jobs)]
    wait_running(ids, p + 1)
    count, rss = held(Path(os.environ["HPCBENCH_STATE_DIR"]))
    started = time.perf_counter()
    get("local").cancel(ids)
    return count, rss, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    got: dict[str, list[tuple[int, int, float]]] = {"one array": [], "single jobs": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["HPCBENCH_STATE_DIR"] = str(work / "state")
        os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
        for _ in range(args.repeats):
            got["one array"].append(array_round(args.tasks, args.parallel, work))
            got["single jobs"].append(singles_round(args.tasks, args.parallel, work))
    med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in got.items()}
    print(
        f"# {args.tasks} local tasks of `sleep 300`, {args.parallel} at a time, median of "
        f"{args.repeats} rounds (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    )
    for name, (count, rss, cancel) in med.items():
        print(f"{name:12s} {count:6.0f} processes {rss / 2**20:8.1f} MiB   cancel {cancel:6.2f} s")
    a, s = med["one array"], med["single jobs"]
    print(f"ratio array / singles: memory {a[1] / s[1]:.3f}, cancel time {a[2] / s[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
