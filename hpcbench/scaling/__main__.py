"""``python -m hpcbench.scaling``: calibrate the scaling model on this allocation (run it under
``mpiexec -n P`` or ``srun``; rank 0 writes the JSON that ``hpcbench predict-scaling`` reads)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpcbench.argparsing import Parser


def _positive_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers >= 1 separated by commas, got {text!r}"
        )
    return values


def _at_least_one(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected CxHxW, e.g. 3x224x224, got {text!r}")
    c, h, w = (int(p) for p in parts)
    return c, h, w


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="python -m hpcbench.scaling",
        description="Calibrate the scaling model: time the trainer's step of MODEL at each "
        "per-rank batch, and all-reduces over 2..P ranks through MPI and torch.distributed, on "
        "this allocation. Run under mpiexec or srun; rank 0 writes --out.",
        epilog="e.g. mpiexec -n 4 python -m hpcbench.scaling --model resnet18 --shape 3x32x32 "
        "--batches 32,16 --out calibration.json; then hpcbench predict-scaling calibration.json",
    )
    ap.add_argument(
        "--model", default="resnet18", help="as the trainer's --model (default resnet18)"
    )
    ap.add_argument(
        "--shape", type=_shape, default=(3, 32, 32), help="input CxHxW (default 3x32x32)"
    )
    ap.add_argument("--classes", type=_at_least_one, default=10, help="output classes (default 10)")
    ap.add_argument(
        "--batches",
        type=_positive_list,
        default=[32, 8],
        help="per-rank batches to time (default 32,8)",
    )
    ap.add_argument(
        "--steps", type=_at_least_one, default=10, help="timed steps per batch (default 10)"
    )
    ap.add_argument(
        "--backends",
        default="mpi,auto",
        help="all-reduce libraries to time: mpi, gloo, nccl; auto = nccl on GPUs, else gloo "
        "(default mpi,auto)",
    )
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--threads", type=_at_least_one, default=None, help="CPU threads per rank")
    ap.add_argument("--out", type=Path, default=Path("calibration.json"))
    return ap


def _refusal(args: argparse.Namespace) -> str:
    """Why this calibration cannot run as started ('' when it can)."""
    from hpcbench.this_rank import MPI_LAUNCHERS, detect_launch

    launch = detect_launch()
    if launch.launcher not in MPI_LAUNCHERS and launch.world_size > 1:
        return (
            f"started by {launch.launcher}; run it under mpiexec or srun (it measures MPI itself)"
        )
    if launch.world_size < 2:
        return "needs at least 2 ranks (mpiexec -n 2 or more)"
    if not args.out.parent.is_dir() or args.out.is_dir():
        return f"--out {args.out}: give a file in an existing directory"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if why := _refusal(args):
        print(f"hpcbench.scaling: {why}", file=sys.stderr)
        return 2
    from hpcbench.scaling.calibrate import Options, calibrate, write
    from hpcbench.train.config import ConfigError, parse_model

    try:
        parse_model(args.model)
    except ConfigError as err:
        print(f"hpcbench.scaling: {err}", file=sys.stderr)
        return 2
    import torch

    gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    backends = [
        ("nccl" if gpu else "gloo") if b.strip() == "auto" else b.strip()
        for b in args.backends.split(",")
        if b.strip()
    ]
    unknown = [b for b in backends if b not in ("mpi", "gloo", "nccl")]
    if unknown or not backends:
        print(
            f"hpcbench.scaling: --backends {args.backends}: use mpi, gloo, nccl or auto",
            file=sys.stderr,
        )
        return 2
    options = Options(
        model=args.model,
        shape=args.shape,
        classes=args.classes,
        batches=args.batches,
        steps=max(1, args.steps),
        backends=list(dict.fromkeys(backends)),
        out=args.out,
        device=args.device,
        threads=args.threads,
    )
    record = calibrate(options)
    if record is not None:
        write(record, args.out)
        print(
            f"calibration of {args.model} on {record['machine']['ranks']} rank(s), "
            f"{record['machine']['nodes']} node(s): {args.out}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
