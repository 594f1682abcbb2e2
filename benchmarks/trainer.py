"""single vs DDP vs MPI on the same model, data order and global batch, in one invocation.

For each global batch (a small one, where communication matters, and a large one, where compute
dominates) the script runs, interleaved and ``--repeats`` times: ``single`` (1 rank, 1 thread),
``ddp`` (torchrun, 2 ranks × 1 thread, gloo) and ``mpi`` (mpiexec, 2 ranks × 1 thread). Each run
trains ``--steps`` steps for 2 epochs; the second epoch's train-phase samples/s is kept (the first
warms up). It prints medians, the ratio mpi/ddp, each strategy's 2-rank parallel efficiency
(samples/s ÷ (2 × single's)), and the share of the train phase spent in communication that did
not overlap the backward pass. Then it times a 25 MB float32 allreduce through mpi4py and gloo.

    python benchmarks/trainer.py [--repeats 3] [--steps 40] [--large-steps 12] [--model small_cnn:256]

Targets on a 2-core CPU machine: mpi/ddp ≥ 1.05 at the small batch and ≥ 0.97 at the large one;
2-rank efficiency ≥ 0.9; the 25 MB allreduce through mpi4py ≤ 0.5× gloo's time.
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

HERE = Path(__file__).resolve().parent


def environment() -> dict[str, str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
    }
    env.pop("PYTHONUNBUFFERED", None)
    return env


def command(strategy: str, args: list[str]) -> list[str]:
    if strategy == "mpi":
        return [
            "mpiexec",
            "-n",
            "2",
            sys.executable,
            "-m",
            "hpcbench.train",
            "--strategy",
            "mpi",
            *args,
        ]
    if strategy == "ddp":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "hpcbench.train",
            "--strategy",
            "ddp",
            *args,
        ]
    return [sys.executable, "-m", "hpcbench.train", "--strategy", "single", *args]


def train_once(
    strategy: str, data: Path, batch: int, steps: int, args: argparse.Namespace, out: Path
) -> dict:
    run = [
        "--data",
        str(data),
        "--model",
        args.model,
        "--global-batch-size",
        str(batch),
        "--epochs",
        "2",
        "--max-steps",
        str(steps),
        "--threads",
        "1",
        "--device",
        "cpu",
        "--val-every",
        "1000",
        "--progress",
        "none",
        "--output-dir",
        str(out),
        "--schedule",
        "none",
    ]
    r = subprocess.run(
        command(strategy, run), env=environment(), capture_output=True, text=True, timeout=900
    )
    if r.returncode != 0:
        raise SystemExit(f"{strategy} run failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    last = metrics["epochs"][-1]
    return {"sps": last["samples_per_s"], "comm_share": last["comm_time_s"] / last["train_time_s"]}


def allreduce_ms(kind: str, megabytes: float) -> float:
    worker = [str(HERE / "allreduce_worker.py"), kind, str(megabytes), "30"]
    if kind == "mpi":
        cmd = ["mpiexec", "-n", "2", sys.executable, *worker]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            *worker,
        ]
    r = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=300)
    line = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not line:
        raise SystemExit(f"allreduce {kind} failed:\n{r.stderr[-2000:]}")
    return json.loads(line[0])["median_ms"]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="steps per epoch, small batch")
    ap.add_argument("--large-steps", type=int, default=12, help="steps per epoch, large batch")
    ap.add_argument("--model", default="small_cnn:256")
    ap.add_argument("--size", default="32x32")
    ap.add_argument("--batches", default="16,256", help="small,large global batch")
    args = ap.parse_args()
    from data_prep import ConvertOptions, convert, synthetic
    from data_prep.convert import parse_size
    from hpcbench.train.models import build_model

    small, large = (int(x) for x in args.batches.split(","))
    with tempfile.TemporaryDirectory(prefix="hpcbench-trainer-") as tmp:
        data = Path(tmp) / "shapes"
        convert(
            synthetic(max(9000, large * args.steps * 2), 9),
            data,
            ConvertOptions(
                size=parse_size(args.size), grayscale=True, split="90/5/5", progress=False
            ),
        )
        w, h = parse_size(args.size)
        params = sum(p.numel() for p in build_model(args.model, (1, h, w), 9).parameters())
        print(
            f"trainer benchmark: {args.model} ({params / 1e6:.2f} M parameters, {params * 4 / 2**20:.1f} MiB of "
            f"gradients), {w}x{h} grayscale, {args.steps}/{args.large_steps} steps/epoch (small/large batch), 1 thread per rank, "
            f"median of {args.repeats} interleaved runs (2nd epoch each)"
        )
        ok = True
        for batch in (small, large):
            results: dict[str, list[dict]] = {"single": [], "ddp": [], "mpi": []}
            for rep in range(args.repeats):
                for strategy in results:
                    results[strategy].append(
                        train_once(
                            strategy,
                            data,
                            batch,
                            args.steps if batch == small else args.large_steps,
                            args,
                            Path(tmp) / f"{strategy}-{batch}-{rep}",
                        )
                    )
            sps = {s: statistics.median(r["sps"] for r in runs) for s, runs in results.items()}
            comm = {
                s: statistics.median(r["comm_share"] for r in runs) for s, runs in results.items()
            }
            ratio = sps["mpi"] / sps["ddp"]
            eff = {s: sps[s] / (2 * sps["single"]) for s in ("ddp", "mpi")}
            target = 1.05 if batch == small else 0.97
            print(
                f"\nglobal batch {batch} ({'communication matters' if batch == small else 'compute dominates'}):"
            )
            for s in results:
                extra = (
                    ""
                    if s == "single"
                    else f"   efficiency {eff[s]:.2f}   non-overlapped comm {comm[s]:.1%} of train time"
                )
                print(f"  {s:6s} {sps[s]:>9,.0f} samples/s{extra}")
            print(f"  ratio mpi/ddp = {ratio:.2f}  (target >= {target})")
            ok &= (
                ratio >= target and min(eff.values()) >= 0.9 if batch == large else ratio >= target
            )
        mpi_ms, gloo_ms = allreduce_ms("mpi", 25), allreduce_ms("gloo", 25)
        print(
            f"\n25 MB allreduce, 2 ranks: mpi4py {mpi_ms:.1f} ms, gloo {gloo_ms:.1f} ms, "
            f"ratio mpi/gloo = {mpi_ms / gloo_ms:.2f}  (target <= 0.5)"
        )
        ok &= mpi_ms / gloo_ms <= 0.5
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
