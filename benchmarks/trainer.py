"""single vs DDP vs MPI on the same model, data order and global batch, against the limit, in one
invocation.

For each global batch (a small one, where communication matters, and a large one, where compute
dominates) the script runs, interleaved and ``--repeats`` times: ``single`` (1 rank, 1 thread),
``ddp`` (torchrun, 2 ranks × 1 thread, gloo, DDP with gradients as bucket views and a static
graph), ``mpi`` (mpiexec, 2 ranks × 1 thread) and the **limit**: two independent single-rank
runs of half the global batch each, started side by side (the same work as two ranks, with no
communication at all; their samples/s add up). Each run trains ``--steps`` steps for 2 epochs
with ``--step-breakdown``; the second epoch's figures are kept (the first warms up). It prints
medians: samples/s, each strategy as a fraction of the limit, 2-rank parallel efficiency
(samples/s ÷ (2 × single's)), the ratio mpi/ddp, and where a step's time goes (ms per step of
each part, the mean over ranks). Then it times a 25 MB float32 allreduce through mpi4py and gloo.

    python benchmarks/trainer.py [--repeats 3] [--steps 40] [--large-steps 12] [--model resnet18]
        [--batches 16,64] [--extra "--precision bf16"] [--parallel-extra "--grad-compression bf16"]

Targets on a 2-core CPU machine (ResNet-18, 32×32, global batches 16 and 64): at the large
batch mpi ≥ 0.95 of the limit and mpi/ddp ≥ 1.10; at the small batch mpi's efficiency ≥ 0.65;
the 25 MB allreduce through mpi4py ≤ 0.5× gloo's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import environment

HERE = Path(__file__).resolve().parent


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


def train_args(
    strategy: str, data: Path, batch: int, steps: int, args: argparse.Namespace, out: Path
) -> list[str]:
    return [
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
        "--no-checkpoint",
        "--step-breakdown",
        *args.extra.split(),
        *(args.parallel_extra.split() if strategy in ("ddp", "mpi") else []),
    ]


def last_epoch(out: Path) -> dict:
    last = json.loads((out / "metrics.json").read_text())["epochs"][-1]
    return {
        "sps": last["samples_per_s"],
        "comm_share": last["comm_time_s"] / last["train_time_s"],
        "breakdown": last["step_breakdown_ms"],
    }


def failed(what: str, r: subprocess.CompletedProcess) -> SystemExit:
    return SystemExit(f"{what} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def train_once(
    strategy: str, data: Path, batch: int, steps: int, args: argparse.Namespace, out: Path
) -> dict:
    r = subprocess.run(
        command(strategy, train_args(strategy, data, batch, steps, args, out)),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if r.returncode != 0:
        raise failed(f"{strategy} run", r)
    return last_epoch(out)


def limit_once(data: Path, batch: int, steps: int, args: argparse.Namespace, out: Path) -> dict:
    """Two single-rank runs of batch/2 side by side: samples/s summed, breakdown averaged."""
    outs = [out / "a", out / "b"]
    procs = [
        subprocess.Popen(
            command("single", train_args("single", data, batch // 2, steps, args, o)),
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for o in outs
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise failed(
                "a limit run",
                subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
            )
    a, b = (last_epoch(o) for o in outs)
    return {
        "sps": a["sps"] + b["sps"],
        "comm_share": 0.0,
        "breakdown": {k: (a["breakdown"][k] + b["breakdown"][k]) / 2 for k in a["breakdown"]},
    }


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


def print_breakdown(results: dict[str, list[dict]]) -> None:
    parts = list(results["single"][0]["breakdown"])
    names = list(results)
    print("  ms per step   " + "".join(f"{n:>9s}" for n in names))
    for part in parts:
        row = [statistics.median(r["breakdown"][part] for r in results[n]) for n in names]
        if any(v >= 0.05 for v in row):
            print(f"  {part:14s}" + "".join(f"{v:9.1f}" for v in row))
    totals = [statistics.median(sum(r["breakdown"].values()) for r in results[n]) for n in names]
    print(f"  {'total':14s}" + "".join(f"{v:9.1f}" for v in totals))


def measure(batch: int, steps: int, data: Path, args: argparse.Namespace, tmp: Path) -> bool:
    results: dict[str, list[dict]] = {"single": [], "limit": [], "ddp": [], "mpi": []}
    for rep in range(args.repeats):
        for strategy in results:
            out = tmp / f"{strategy}-{batch}-{rep}"
            results[strategy].append(
                limit_once(data, batch, steps, args, out)
                if strategy == "limit"
                else train_once(strategy, data, batch, steps, args, out)
            )
    sps = {s: statistics.median(r["sps"] for r in runs) for s, runs in results.items()}
    comm = {s: statistics.median(r["comm_share"] for r in runs) for s, runs in results.items()}
    small = batch == min(int(x) for x in args.batches.split(","))
    print(
        f"\nglobal batch {batch} ({'communication matters' if small else 'compute dominates'}), "
        f"{batch // 2} per rank:"
    )
    for s in results:
        line = f"  {s:6s} {sps[s]:>9,.1f} samples/s   {sps[s] / sps['limit']:.2f} of the limit"
        if s in ("ddp", "mpi"):
            line += (
                f"   efficiency {sps[s] / (2 * sps['single']):.2f}"
                f"   non-overlapped comm {comm[s]:.1%} of train time"
            )
        print(line)
    ratio = sps["mpi"] / sps["ddp"]
    print(f"  ratio mpi/ddp = {ratio:.2f}")
    print_breakdown(results)
    if small:
        eff = sps["mpi"] / (2 * sps["single"])
        print(f"  target: mpi efficiency {eff:.2f} >= 0.65")
        return eff >= 0.65
    share = sps["mpi"] / sps["limit"]
    print(f"  target: mpi {share:.2f} of the limit >= 0.95, mpi/ddp {ratio:.2f} >= 1.10")
    return share >= 0.95 and ratio >= 1.10


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="steps per epoch, small batch")
    ap.add_argument("--large-steps", type=int, default=12, help="steps per epoch, large batch")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--size", default="32x32")
    ap.add_argument("--batches", default="16,64", help="small,large global batch")
    ap.add_argument("--extra", default="", help="more trainer options for every run")
    ap.add_argument(
        "--parallel-extra",
        default="",
        help="more trainer options for the ddp and mpi runs only (e.g. --grad-compression bf16)",
    )
    args = ap.parse_args()
    from hpcbench.data_prep import ConvertOptions, convert, synthetic
    from hpcbench.data_prep.convert import parse_size
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
            f"{', ' + args.extra if args.extra else ''}"
            f"{', ddp and mpi: ' + args.parallel_extra if args.parallel_extra else ''}"
        )
        ok = measure(small, args.steps, data, args, Path(tmp))
        ok &= measure(large, args.large_steps, data, args, Path(tmp))
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
