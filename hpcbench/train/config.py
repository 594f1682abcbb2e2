"""The trainer's options: one dataclass, parsed from the command line, checked in one place.

Batch semantics are explicit: ``--global-batch-size G`` (the default; 32, so that the default run
learns the built-in set in a few CPU minutes; the reference study's 128 is in
jobs/reference-resnet34.toml) keeps the effective batch constant as ranks are added (each rank gets G/W, or its
``--rank-weights`` share); ``--batch-size-per-rank B`` makes the global batch B×W instead.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field
from typing import Any

STRATEGIES = ("auto", "single", "ddp", "mpi", "dp")
OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("none", "cosine", "step", "onecycle")
DATA_ORDERS = ("global", "shards")
DEFAULT_DATA = "data/shapes"


class ConfigError(Exception):
    """A trainer option the user can fix (one line, naming the flag)."""


@dataclass
class TrainConfig:
    data: str = field(default_factory=lambda: os.environ.get("HPCBENCH_DATA", DEFAULT_DATA))
    strategy: str = "auto"
    model: str = "small_cnn"
    epochs: int = 5
    global_batch_size: int | None = None  # None with batch_size_per_rank None -> 32
    batch_size_per_rank: int | None = None
    rank_weights: list[float] | None = None
    eval_batch_size: int = 256
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0
    schedule: str = "cosine"
    lr_scaling: str = "none"  # none | linear
    lr_reference_batch: int = 128
    warmup_epochs: float = 0.0
    val_every: int = 1
    seed: int = 0
    data_order: str = "global"
    device: str = "auto"  # auto | cpu | cuda
    threads: int | None = None
    output_dir: str | None = None
    max_steps: int | None = None  # per epoch, for benchmarks and smoke runs
    overlap: bool = True  # mpi: start bucket allreduces from gradient hooks
    bucket_mb: float = 25.0
    sync_bn: bool = False
    stage_dir: str | None = None
    progress: str = "auto"  # auto | bar | lines | none

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def uses_per_rank_batch(self) -> bool:
        return self.batch_size_per_rank is not None

    def check(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(message)

        need(self.strategy in STRATEGIES, f"--strategy must be one of {', '.join(STRATEGIES)}")
        need(self.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}")
        need(self.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}")
        need(
            self.data_order in DATA_ORDERS, f"--data-order must be one of {', '.join(DATA_ORDERS)}"
        )
        need(self.lr_scaling in ("none", "linear"), "--lr-scaling must be none or linear")
        need(self.device in ("auto", "cpu", "cuda"), "--device must be auto, cpu or cuda")
        need(self.epochs >= 1, f"--epochs must be at least 1, got {self.epochs}")
        need(self.lr > 0, f"--lr must be positive, got {self.lr}")
        need(
            self.global_batch_size is None or self.batch_size_per_rank is None,
            "give --global-batch-size or --batch-size-per-rank, not both",
        )
        for flag, value in (
            ("--global-batch-size", self.global_batch_size),
            ("--batch-size-per-rank", self.batch_size_per_rank),
            ("--eval-batch-size", self.eval_batch_size),
            ("--val-every", self.val_every),
            ("--max-steps", self.max_steps),
            ("--threads", self.threads),
            ("--lr-reference-batch", self.lr_reference_batch),
        ):
            need(value is None or value >= 1, f"{flag} must be at least 1, got {value}")
        need(self.bucket_mb > 0, f"--bucket-mb must be positive, got {self.bucket_mb}")
        need(self.warmup_epochs >= 0, f"--warmup-epochs must be >= 0, got {self.warmup_epochs}")
        need(self.seed >= 0, f"--seed must be >= 0, got {self.seed}")
        if self.rank_weights is not None:
            need(all(w > 0 for w in self.rank_weights), "--rank-weights must all be positive")
            need(self.data_order == "global", "--rank-weights needs --data-order global")
            need(
                not self.uses_per_rank_batch,
                "--rank-weights shares a --global-batch-size; drop --batch-size-per-rank",
            )


def _weights(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 1,4,4, got {text!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hpcbench.train",
        description="Train an image classifier with one process, PyTorch DDP or MPI (mpi4py), "
        "timing every phase. Rank, world size and device come from the launcher "
        "(torchrun, mpiexec, srun) or default to one process.",
    )
    d = TrainConfig()
    g = p.add_argument_group("data and model")
    g.add_argument(
        "--data",
        default=d.data,
        help=f"sharded dataset directory (default: $HPCBENCH_DATA or {DEFAULT_DATA}; the built-in synthetic set is generated there when missing)",
    )
    g.add_argument(
        "--data-order",
        default=d.data_order,
        choices=DATA_ORDERS,
        help="global: the same global batches for any number of ranks (default); shards: each rank reads only its own shards",
    )
    g.add_argument(
        "--stage-dir", help="copy this rank's shards here first (e.g. $TMPDIR, /dev/shm)"
    )
    g.add_argument(
        "--model",
        default=d.model,
        help="small_cnn (default), mlp, rnn, or a torchvision model: resnet18, resnet34, resnet50, efficientnet_b0, mobilenet_v3_small, vit_b_16, …",
    )
    g.add_argument(
        "--sync-bn", action="store_true", help="ddp: synchronise batch-norm statistics across ranks"
    )
    g = p.add_argument_group("parallelism")
    g.add_argument(
        "--strategy",
        default=d.strategy,
        choices=STRATEGIES,
        help="auto: single for one process, mpi under mpiexec, ddp under torchrun/srun",
    )
    g.add_argument("--device", default=d.device, choices=("auto", "cpu", "cuda"))
    g.add_argument(
        "--threads",
        type=int,
        help="CPU threads per rank (default: $OMP_NUM_THREADS, else cores / ranks on the node)",
    )
    g.add_argument(
        "--no-overlap",
        dest="overlap",
        action="store_false",
        help="mpi: one Allreduce after backward instead of per-bucket Iallreduce from gradient hooks",
    )
    g.add_argument(
        "--bucket-mb",
        type=float,
        default=d.bucket_mb,
        help="gradient bucket size for mpi (default 25, as DDP)",
    )
    g = p.add_argument_group("batch and optimisation")
    b = g.add_mutually_exclusive_group()
    b.add_argument(
        "--global-batch-size", type=int, help="samples per step over all ranks (default 128)"
    )
    b.add_argument(
        "--batch-size-per-rank", type=int, help="samples per step per rank (global = this × ranks)"
    )
    g.add_argument(
        "--rank-weights",
        type=_weights,
        help="share of the global batch per rank, e.g. 1,4,4 (a slow rank beside fast ones)",
    )
    g.add_argument("--eval-batch-size", type=int, default=d.eval_batch_size)
    g.add_argument("--epochs", type=int, default=d.epochs)
    g.add_argument("--max-steps", type=int, help="at most this many training steps per epoch")
    g.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    g.add_argument(
        "--lr", type=float, default=d.lr, help="learning rate (default 0.05, the reference study's)"
    )
    g.add_argument("--momentum", type=float, default=d.momentum)
    g.add_argument("--weight-decay", type=float, default=d.weight_decay)
    g.add_argument("--schedule", default=d.schedule, choices=SCHEDULES)
    g.add_argument(
        "--lr-scaling",
        default=d.lr_scaling,
        choices=("none", "linear"),
        help="linear: lr × global batch / --lr-reference-batch",
    )
    g.add_argument("--lr-reference-batch", type=int, default=d.lr_reference_batch)
    g.add_argument(
        "--warmup-epochs",
        type=float,
        default=d.warmup_epochs,
        help="linear warm-up of the learning rate",
    )
    g.add_argument("--seed", type=int, default=d.seed)
    g = p.add_argument_group("output")
    g.add_argument(
        "--val-every", type=int, default=d.val_every, help="validate every k epochs (default 1)"
    )
    g.add_argument(
        "--output-dir",
        help="results directory (default: $HPCBENCH_RUN_DIR, else runs/train-<time>)",
    )
    g.add_argument(
        "--progress",
        default=d.progress,
        choices=("auto", "bar", "lines", "none"),
        help="auto: a bar on a terminal, one line per epoch otherwise",
    )
    return p


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    args = build_parser().parse_args(argv)
    config = TrainConfig(**{k: v for k, v in vars(args).items()})
    config.check()
    return config
