"""The scaling model against measurement, in one run: calibrate on this machine, predict, train.

1. ``mpiexec -n MAX python -m hpcbench.scaling`` calibrates the model (the trainer's step at the
   per-rank batches, all-reduces through MPI and gloo over 2..MAX ranks).
2. ``hpcbench predict-scaling``'s model predicts samples/s at 2, 3, … MAX ranks on this one node
   for mpi (MPI's fit) and ddp (gloo's fit).
3. The trainer runs each (strategy, ranks) for 2 epochs at the same per-rank batch; the second
   epoch's samples/s is the measurement.

The three steps are repeated ``--repeats`` times (a shared machine's speed drifts within
minutes: each round's prediction comes from the calibration taken just before its runs). It
prints, per row, the median predicted and measured samples/s and the median of the rounds'
predicted/measured ratios. With ``--slurm`` it does the
same on the project's SLURM test cluster (``tests/cluster/slurm-up.sh`` must have started it):
calibration and training as 2-node jobs through ``srun``.

    python benchmarks/scaling.py [--model resnet18] [--batch-per-rank 32] [--max-ranks 4]
        [--steps 12] [--repeats 2] [--slurm]

Target: predicted/measured within 0.85–1.15 at every row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import environment


def launch(strategy: str, ranks: int, module: list[str], slurm: bool) -> list[str]:
    if slurm:
        return [
            "srun",
            "--mpi=pmi2",
            f"--nodes={min(2, ranks)}",
            f"--ntasks={ranks}",
            "--cpus-per-task=1",
            sys.executable,
            *module,
        ]
    if strategy == "ddp":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(ranks),
            *module,
        ]
    return ["mpiexec", "-n", str(ranks), sys.executable, *module]


def run(cmd: list[str], what: str, timeout: float = 1200) -> None:
    r = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"{what} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def measure(strategy: str, ranks: int, data: Path, args: argparse.Namespace, out: Path) -> float:
    train = [
        "-m",
        "hpcbench.train",
        "--strategy",
        strategy,
        "--data",
        str(data),
        "--model",
        args.model,
        "--batch-size-per-rank",
        str(args.batch_per_rank),
        "--epochs",
        "2",
        "--max-steps",
        str(args.steps),
        "--threads",
        "1",
        "--device",
        "cpu",
        "--val-every",
        "1000",
        "--progress",
        "none",
        "--schedule",
        "none",
        "--no-checkpoint",
        "--output-dir",
        str(out),
    ]
    run(launch(strategy, ranks, train, args.slurm), f"{strategy} at {ranks} ranks")
    return json.loads((out / "metrics.json").read_text())["epochs"][-1]["samples_per_s"]


def calibration(args: argparse.Namespace, path: Path):
    """Calibrate the model on the ranks the runs will use; the calibration read back."""
    from hpcbench.scaling.predictions import load

    calibrate = [
        "-m",
        "hpcbench.scaling",
        "--model",
        args.model,
        "--shape",
        "1x32x32",
        "--classes",
        "9",
        "--batches",
        f"{args.batch_per_rank},{max(1, args.batch_per_rank // 4)}",
        "--backends",
        "mpi,gloo",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--out",
        str(path),
    ]
    run(launch("mpi", args.max_ranks, calibrate, args.slurm), "the calibration")
    return load(path)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch-per-rank", type=int, default=32)
    ap.add_argument("--max-ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--slurm", action="store_true", help="on the SLURM test cluster, 2 nodes")
    args = ap.parse_args()
    from hpcbench.data_prep import ConvertOptions, convert, synthetic
    from hpcbench.scaling.predictions import predictions

    shared = Path(os.environ.get("HPCBENCH_SHARED_TMP", tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix="hpcbench-scaling-", dir=shared) as tmp:
        data = Path(tmp) / "shapes"
        convert(
            synthetic(9000, 9),
            data,
            ConvertOptions(size=(32, 32), grayscale=True, split="90/5/5", progress=False),
        )
        ranks = list(range(2, args.max_ranks + 1))
        predicted: dict[tuple[str, int], list[float]] = {}
        measured: dict[tuple[str, int], list[float]] = {}
        for rep in range(args.repeats):
            # A fresh calibration each round, just before the runs it predicts: a shared
            # machine's speed drifts by more than the target's ±15 % within minutes.
            cal = calibration(args, Path(tmp) / f"calibration-{rep}.json")
            per_node = cal.machine["ranks_per_node"] if args.slurm else args.max_ranks
            for s in ("mpi", "ddp"):
                for p in predictions(cal, s, ranks, per_node, batch_per_rank=args.batch_per_rank):
                    predicted.setdefault((s, p.ranks), []).append(p.samples_per_s)
            for n in ranks:
                for s in ("mpi", "ddp"):
                    out = Path(tmp) / f"{s}-{n}-{rep}"
                    measured.setdefault((s, n), []).append(measure(s, n, data, args, out))
        where = "the 2-node SLURM test cluster" if args.slurm else "this machine"
        print(
            f"scaling model vs measurement on {where}: {args.model}, {args.batch_per_rank} per "
            f"rank, calibrated at {cal.machine['ranks']} ranks on {cal.machine['nodes']} node(s) "
            f"x {cal.machine['cores_per_node']} core(s); {args.repeats} rounds of a calibration "
            "then the runs it predicts; medians, and the median of the rounds' ratios"
        )
        print(f"{'strategy':>8} {'ranks':>5} {'predicted':>10} {'measured':>10} {'pred/meas':>9}")
        ok = True
        for n in ranks:
            for s in ("mpi", "ddp"):
                pred, got = predicted[s, n], measured[s, n]
                ratio = statistics.median(a / b for a, b in zip(pred, got, strict=True))
                ok &= 0.85 <= ratio <= 1.15
                print(
                    f"{s:>8} {n:>5} {statistics.median(pred):>10.1f} "
                    f"{statistics.median(got):>10.1f} {ratio:>9.2f}"
                )
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
