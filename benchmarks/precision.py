"""What mixed precision and compressed gradients cost in accuracy and give in speed, in one run.

On the built-in synthetic set (``--samples`` images, 48×48 grayscale, 9 classes) a CNN is
trained ``--epochs`` epochs, same seed and data order, in these configurations:

- ``fp32`` and ``bf16`` (``--precision``), one process, 1 thread;
- ``mpi`` on 2 ranks: uncompressed, ``--grad-compression bf16``, and ``bf16`` with
  ``--error-feedback``.

It prints each run's final test accuracy, its difference from its uncompressed fp32 peer (in
points), the largest difference of the per-step training loss from that peer, and samples/s as
a ratio to the peer.

    python benchmarks/precision.py [--epochs 6] [--samples 4500] [--model small_cnn]

Targets: bf16 reaches fp32's test accuracy within 1 point; so do bf16-compressed gradients
that of uncompressed ones.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import environment


def train(ranks: int, data: Path, out: Path, args: argparse.Namespace, *extra: str) -> dict:
    prefix = ["mpiexec", "-n", str(ranks), sys.executable] if ranks > 1 else [sys.executable]
    cmd = [
        *prefix,
        "-m",
        "hpcbench.train",
        "--strategy",
        "mpi" if ranks > 1 else "single",
        "--data",
        str(data),
        "--model",
        args.model,
        "--epochs",
        str(args.epochs),
        "--global-batch-size",
        "32",
        "--lr",
        "0.1",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--progress",
        "none",
        "--no-checkpoint",
        "--output-dir",
        str(out),
        *extra,
    ]
    r = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(extra) or 'fp32'} failed:\n{r.stderr[-2000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    with open(out / "steps.csv", newline="") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    return {
        "accuracy": metrics["test"]["accuracy"],
        "sps": metrics["throughput"]["train_samples_per_s"],
        "losses": losses,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--samples", type=int, default=4500)
    ap.add_argument("--model", default="small_cnn")
    args = ap.parse_args()
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    with tempfile.TemporaryDirectory(prefix="hpcbench-precision-") as tmp:
        data = Path(tmp) / "shapes"
        convert(
            synthetic(args.samples, 9, seed=5),
            data,
            ConvertOptions(size=(48, 48), grayscale=True, progress=False),
        )
        runs = {
            ("fp32", 1): (),
            ("bf16", 1): ("--precision", "bf16"),
            ("mpi, uncompressed", 2): (),
            ("mpi, bf16 gradients", 2): ("--grad-compression", "bf16"),
            ("mpi, bf16 gradients + error feedback", 2): (
                "--grad-compression",
                "bf16",
                "--error-feedback",
            ),
        }
        got = {
            key: train(key[1], data, Path(tmp) / f"run{i}", args, *extra)
            for i, (key, extra) in enumerate(runs.items())
        }
    print(
        f"precision benchmark: {args.model}, {args.samples} images 48x48, {args.epochs} epochs, "
        "global batch 32, 1 thread per rank"
    )
    print(f"  {'run':40s} {'test acc':>8} {'vs peer':>8} {'max |dloss|':>11} {'speed vs peer':>13}")
    ok = True
    for (name, ranks), result in got.items():
        peer = got[("fp32", 1)] if ranks == 1 else got[("mpi, uncompressed", 2)]
        points = (result["accuracy"] - peer["accuracy"]) * 100
        dloss = max(abs(a - b) for a, b in zip(result["losses"], peer["losses"], strict=True))
        print(
            f"  {name:40s} {result['accuracy']:8.4f} {points:+8.2f} {dloss:11.4f} "
            f"{result['sps'] / peer['sps']:13.2f}"
        )
        if result is not peer:
            ok &= points >= -1.0  # reaches the peer's accuracy within one point
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
