"""The doctor's all-reduce bandwidth against a plain torch.distributed all-reduce loop, in the same
run, and the doctor's own wall time.

Two ranks (torchrun, gloo on this machine's CPUs; NCCL on a GPU node) alternate, ``--rounds``
times: the doctor's sweep of one size (``hpcbench.doctor.communication.sweep``) and a plain loop
of the same number of ``dist.all_reduce`` calls on a buffer of that size, each turned into bus
bandwidth the same way (nccl-tests' definition). The ratio of the medians, doctor / plain, should
be about 1: what the doctor reports is what the fabric gives a training's all-reduce. Then
``python -m hpcbench.doctor`` on two ranks, whole, timed (the steps' own seconds printed too).

    python benchmarks/doctor.py [--megabytes 16] [--rounds 5] [--calibrate 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(megabytes: float, rounds: int) -> None:
    import torch
    import torch.distributed as dist

    from hpcbench.doctor.communication import _iterations, sweep

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    size = int(megabytes * 2**20)
    device = torch.device("cpu")
    iters = _iterations(size)
    factor = 2 * (world - 1) / world
    doctor, plain = [], []
    buf = torch.ones(size // 4, dtype=torch.float32)
    dist.all_reduce(buf)

    def plain_loop() -> None:
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        plain.append(size * factor / ((time.perf_counter() - t0) / iters) / 1e9)

    def doctor_sweep() -> None:
        got = sweep(dist, None, "world", list(range(world)), [size], device, lambda took: None)
        doctor.append(got["peak_gbps"])

    for i in range(rounds):  # each first in every other round: neither gains from going first
        for measure in (doctor_sweep, plain_loop) if i % 2 == 0 else (plain_loop, doctor_sweep):
            measure()
            dist.barrier()
    if rank == 0:
        print(json.dumps({"doctor": statistics.median(doctor), "plain": statistics.median(plain)}))
    dist.destroy_process_group()


def torchrun(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HPCBENCH_PLACEMENT": "auto"}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=600)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--megabytes", type=float, default=16.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calibrate", type=int, default=0, metavar="N",
                   help="also run N healthy doctors and print the spread of their figures")  # fmt: skip
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.megabytes, args.rounds)
        return 0
    done = torchrun(__file__, "--worker", "--megabytes", str(args.megabytes),
                    "--rounds", str(args.rounds))  # fmt: skip
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return 1
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"all-reduce of {args.megabytes:g} MiB over gloo, 2 ranks, median of {args.rounds} rounds:"
    )
    print(f"  doctor {figures['doctor']:.3f} GB/s, plain loop {figures['plain']:.3f} GB/s, "
          f"ratio {figures['doctor'] / figures['plain']:.3f}")  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        # each rank bound by hpcbench's rank start, as in a job's script
        run = torchrun("--no-python", sys.executable, "-m", "hpcbench.placement.rank_start", "--",
                       sys.executable, "-m", "hpcbench.doctor", "--out", out)  # fmt: skip
        wall = time.perf_counter() - t0
        document = json.loads((Path(out) / "doctor.json").read_text())
    steps = ", ".join(f"{k} {v.get('seconds', 0):.1f} s" for k, v in document["steps"].items())
    print(f"hpcbench doctor on 2 ranks: {wall:.1f} s wall (exit {run.returncode}); {steps}")
    for finding in document["findings"]:
        print(f"  named: {finding}")
    if args.calibrate:
        calibrate(args.calibrate)
    return 0


def calibrate(runs: int) -> None:
    """The noise the thresholds must stand above: ``runs`` healthy doctors on 2 emulated nodes
    of the local scheduler, each node's compute against the nodes' median and each run's world
    bus bandwidth against the runs' median (the baseline's rule)."""
    compute, world, walls = [], [], []
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "HPCBENCH_STATE_DIR": str(Path(work) / "state")}
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "hpcbench", "doctor", "--scheduler", "local", "--nodes", "2",
                 "--", "--fs-bytes", str(8 << 20)],
                cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            walls.append(time.perf_counter() - t0)
            newest = max(Path(work, "runs").glob("hpcbench-local-*/doctor.json"),
                         key=lambda p: p.stat().st_mtime)  # fmt: skip
            document = json.loads(newest.read_text())
            nodes = document["steps"]["compute"]["nodes"]
            median = statistics.median(nodes.values())
            compute += [v / median for v in nodes.values()]
            world.append(document["figures"].get("world", 0.0))
    median_world = statistics.median(world)
    print(f"calibration, {runs} healthy doctors on 2 emulated nodes (local scheduler):")
    print(f"  compute, node / nodes' median: {min(compute):.2f} .. {max(compute):.2f}")
    print(f"  world bus bandwidth / runs' median: {min(world) / median_world:.2f} .. "
          f"{max(world) / median_world:.2f}")  # fmt: skip
    print(f"  hpcbench doctor wall time, submit to end: median {statistics.median(walls):.1f} s, "
          f"max {max(walls):.1f} s")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
