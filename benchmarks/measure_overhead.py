"""The measurement API's cost in a user's loop (:mod:`hpcbench.measure`): a loop of steps that
each take ``--step-ms`` of CPU work, bare and with ``m.step(samples=…)`` after every step (and a
``train`` phase and an ``epoch()`` around them), measured side by side, interleaved,
``--repeats`` times, in one process. Also each call's own cost from a tight loop of calls
against the same loop without them.

Prints the medians, the ratio measured ÷ bare loop (target: under 1.01 for 5 ms steps), and the
per-step cost in microseconds against the step. The measured loop runs with telemetry off, and
again with a telemetry record every ``--telemetry`` seconds (0.1: fifty times as often as the
default), so the ratio of the two is the telemetry's own cost.

    python benchmarks/measure_overhead.py [--step-ms 5] [--steps 200] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from hpcbench import measure


def work(seconds: float) -> None:
    """A step's compute: busy until ``seconds`` have passed (a sleep would hide the CPU)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def bare(steps: int, step_s: float) -> float:
    began = time.perf_counter()
    for _ in range(steps):
        work(step_s)
    return time.perf_counter() - began


def measured(steps: int, step_s: float, run_dir: Path, telemetry: float = 0.0) -> float:
    began = time.perf_counter()
    with measure.run(run_dir, model="loop", telemetry=telemetry) as m:
        with m.phase("train"):
            for _ in range(steps):
                work(step_s)
                m.step(samples=32)
        m.epoch(train_loss=1.0)
    return time.perf_counter() - began


def call_cost(calls: int) -> float:
    """Seconds per ``m.step()`` call beyond the loop itself."""
    with tempfile.TemporaryDirectory(prefix="hpcbench-measure-") as run_dir:
        m = measure.start(run_dir, telemetry=0)
        began = time.perf_counter()
        for _ in range(calls):
            pass
        empty = time.perf_counter() - began
        began = time.perf_counter()
        for _ in range(calls):
            m.step(samples=32)
        full = time.perf_counter() - began
        m.abandon()
    return max(0.0, full - empty) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=1_000_000)
    p.add_argument("--telemetry", type=float, default=0.1, help="seconds between records")
    a = p.parse_args()
    step_s = a.step_ms / 1000
    warnings.simplefilter("error")  # a fault in the measurement is a failed benchmark
    with tempfile.TemporaryDirectory() as tmp:
        times: dict[str, list[float]] = {"bare": [], "measured": [], "telemetry": []}
        for i in range(a.repeats):
            times["bare"].append(bare(a.steps, step_s))
            times["measured"].append(measured(a.steps, step_s, Path(tmp) / f"run{i}"))
            times["telemetry"].append(
                measured(a.steps, step_s, Path(tmp) / f"tel{i}", telemetry=a.telemetry)
            )
        costs = sorted(call_cost(a.calls) for _ in range(5))
    med = {k: statistics.median(v) for k, v in times.items()}
    per_call = costs[len(costs) // 2]
    print(
        f"# hpcbench.measure per-step cost, {a.steps} steps of {a.step_ms:g} ms, median of {a.repeats}"
    )
    print(f"bare loop          {med['bare']:.4f} s")
    print(f"measured loop      {med['measured']:.4f} s")
    print(f"with telemetry     {med['telemetry']:.4f} s (a record every {a.telemetry:g} s)")
    print(f"measured / bare  = {med['measured'] / med['bare']:.4f}")
    print(f"telemetry / measured = {med['telemetry'] / med['measured']:.4f}")
    print(f"m.step() costs     {per_call * 1e6:.3f} µs a call (median of 5 × {a.calls:,} calls)")
    print(f"m.step() / step  = {per_call / step_s:.6f} (target under 0.01)")


if __name__ == "__main__":
    main()
