"""The trainer's steps on the CPU with glibc's allocator as the trainer sets it
(:mod:`hpcbench.allocator`: freed memory kept for the next step) against glibc's default
(``HPCBENCH_MALLOC=system``), measured in the same run.

The default training (``small_cnn`` on the built-in 197x148 shapes, global batch 128) for
``--steps`` steps, one process each, the two cases interleaved over ``--repeats`` rounds so that
the machine's noise falls on both; medians of wall seconds, user and system CPU seconds, page
faults and peak memory. Prints the ratios kept ÷ default.

    python benchmarks/allocator.py [--repeats 3] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {"glibc default": {"HPCBENCH_MALLOC": "system"}, "freed memory kept": {}}
FIELDS = ("wall s", "user s", "sys s", "page faults", "peak MB")


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, ...]:
    """One process: wall, user and system CPU, minor page faults and peak RSS (MB)."""
    wall = time.perf_counter()
    pid = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL).pid
    _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{argv} failed"
    return (time.perf_counter() - wall, usage.ru_utime, usage.ru_stime, usage.ru_minflt,
            usage.ru_maxrss / 1024)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "HPCBENCH_MALLOC"}
    base["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "shapes"
        subprocess.run([sys.executable, "-m", "hpcbench", "prep", "synthetic", str(data),
                        "--samples", "6000", "-q"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        argv = [sys.executable, "-m", "hpcbench.train", "--data", str(data), "--epochs", "1",
                "--max-steps", str(a.steps), "--no-checkpoint", "--progress", "none",
                "--output-dir", str(Path(tmp) / "run")]  # fmt: skip
        seen: dict[str, list[tuple[float, ...]]] = {name: [] for name in CASES}
        for _ in range(a.repeats):
            for name, extra in CASES.items():
                seen[name].append(run_once(argv, {**base, **extra}))
    median = {
        n: [statistics.median(r[i] for r in runs) for i in range(5)] for n, runs in seen.items()
    }
    print(f"{'case':<20}" + "".join(f"{f:>13}" for f in FIELDS))
    for name, values in median.items():
        print(f"{name:<20}" + "".join(f"{v:>13.2f}" for v in values))
    default, kept = median["glibc default"], median["freed memory kept"]
    print("kept ÷ default: " + ", ".join(
        f"{f} {k / d:.2f}" for f, k, d in zip(FIELDS, kept, default, strict=True) if d
    ) + f"  ({a.repeats} rounds of {a.steps} steps, medians)")  # fmt: skip


if __name__ == "__main__":
    main()
