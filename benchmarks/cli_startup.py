"""How long `hpcbench render` takes, against `python -c 'import submitit'` in the same run.

Both are whole processes started the same way and timed interleaved (render, import, render, ...),
so that the machine's noise falls on both alike; the medians and their ratio are printed, with a
bare `python -c pass` as the floor. Rendering must stay well under half a second and should cost
no more than importing submitit (which a notebook user pays anyway).

    python benchmarks/cli_startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "hpcbench render": [
        sys.executable,
        "-m",
        "hpcbench",
        "render",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--scheduler",
        "slurm",
    ],
    "import submitit": [sys.executable, "-c", "import submitit"],
    "python -c pass": [sys.executable, "-c", "pass"],
}


def time_once(argv: list[str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory() as cwd:
        env_note = f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
        for argv in CASES.values():  # warm the page cache once, untimed
            time_once(argv, cwd)
        for _ in range(args.repeats):
            for name, argv in CASES.items():
                times[name].append(time_once(argv, cwd))
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"# CLI start-up, median of {args.repeats} interleaved runs ({env_note})")
    for name, m in med.items():
        spread = statistics.quantiles(times[name], n=4) if len(times[name]) > 1 else [m, m, m]
        print(f"{name:18s} {m * 1000:7.1f} ms  (IQR {spread[0] * 1000:.1f}-{spread[2] * 1000:.1f})")
    ratio = med["hpcbench render"] / med["import submitit"]
    print(f"render / import submitit = {ratio:.2f}")
    print(f"render / python -c pass  = {med['hpcbench render'] / med['python -c pass']:.2f}")
    print(f"render under 0.5 s: {'yes' if med['hpcbench render'] < 0.5 else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
