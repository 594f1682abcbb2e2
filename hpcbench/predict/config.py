"""The options of ``python -m hpcbench.predict``: one dataclass, its command line and its checks.

Roles (``--roles``): ``auto`` (calibrate, then size the stages), or counts such as
``reader=1,preprocess=2,predict=3`` -- the sink is always one rank and may be left out; the counts
must add up to the number of ranks. ``preprocess=0`` fuses decoding into the readers (each reader
then reads and decodes its units; the natural choice for HDF5 input already at the model's size).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field

from hpcbench.argparsing import Parser, suggestion

MODES = ("auto", "pipeline", "data-parallel", "single")
STAGES = ("reader", "preprocess", "predict")  # the sink is one rank, always
DEVICES = ("auto", "cpu", "cuda")


class PredictError(Exception):
    """An option, checkpoint or input the user can fix (one line naming it)."""


@dataclass(frozen=True)
class Roles:
    """Ranks per stage; ``sink`` is always 1."""

    reader: int
    preprocess: int
    predict: int
    sink: int = 1

    @property
    def total(self) -> int:
        return self.reader + self.preprocess + self.predict + self.sink

    def as_dict(self) -> dict[str, int]:
        return {
            "reader": self.reader,
            "preprocess": self.preprocess,
            "predict": self.predict,
            "sink": self.sink,
        }

    def text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.as_dict().items())


def parse_roles(text: str) -> Roles | None:
    """``auto`` -> None; ``reader=1,preprocess=2,predict=3[,sink=1]`` -> Roles."""
    text = text.strip()
    if text == "auto":
        return None
    counts: dict[str, int] = {}
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        name = name.strip()
        if not eq or name not in (*STAGES, "sink"):
            raise PredictError(
                f"--roles {text!r}: expected 'auto' or NAME=COUNT pairs with names "
                f"{', '.join((*STAGES, 'sink'))}, e.g. reader=1,preprocess=2,predict=3"
            )
        if name in counts:
            raise PredictError(f"--roles {text!r}: {name} is given twice")
        value = value.strip()
        if not (value.isascii() and value.isdigit()):
            raise PredictError(f"--roles {text!r}: {name}={value} is not a whole number")
        counts[name] = int(value)
    if counts.get("sink", 1) != 1:
        raise PredictError(f"--roles {text!r}: the pipeline has exactly one sink (sink=1)")
    for name in ("reader", "predict"):
        if counts.get(name, 0) < 1:
            raise PredictError(f"--roles {text!r}: needs at least one {name} rank ({name}=1)")
    return Roles(counts["reader"], counts.get("preprocess", 0), counts["predict"])


@dataclass
class PredictConfig:
    checkpoint: str
    input: str
    output_dir: str | None = None
    split: str = "test"
    mode: str = "auto"
    roles: str = "auto"
    batch_size: int | None = None  # None: 32, or on a GPU the size measured to keep it busy
    top_k: int = 1
    strict: bool = False
    credits: int | None = None
    calibration_items: int = 128
    limit: int | None = None
    threads: int | None = None
    device: str = "auto"
    stall_timeout: float = 300.0
    path_column: str | None = None
    label_column: str | None = None
    unlabelled: bool = False
    quiet: bool = False
    explicit_roles: Roles | None = field(default=None, repr=False)

    def check(self) -> None:
        for flag, value, low in (
            ("--batch-size", self.batch_size, 1),
            ("--top-k", self.top_k, 1),
            ("--calibration-items", self.calibration_items, 1),
            ("--credits", self.credits, 1),
            ("--limit", self.limit, 1),
            ("--threads", self.threads, 1),
        ):
            if value is not None and value < low:
                raise PredictError(f"{flag} must be at least {low}, got {value}")
        if not (self.stall_timeout > 0):
            raise PredictError(f"--stall-timeout must be > 0 seconds, got {self.stall_timeout}")
        self.explicit_roles = parse_roles(self.roles)

    def run_dir(self) -> str:
        if self.output_dir:
            return self.output_dir
        return (
            os.environ.get("HPCBENCH_RUN_DIR") or f"runs/predict-{time.strftime('%Y%m%d-%H%M%S')}"
        )

    def prepare_run_dir(self) -> None:
        """Decide and create the output directory now (a bad one fails before any work); the
        default name gets this process's id when another run took it in the same second."""
        from pathlib import Path

        path = Path(self.run_dir()).expanduser().resolve()
        if not self.output_dir and not os.environ.get("HPCBENCH_RUN_DIR") and path.exists():
            path = path.with_name(f"{path.name}-{os.getpid()}")
        flag = "--output-dir" if self.output_dir else "the run directory"
        if path.exists() and not path.is_dir():
            raise PredictError(f"{flag} {path}: exists and is not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".hpcbench-predict-{os.getpid()}"
            probe.touch(exist_ok=False)
            probe.unlink()
        except OSError as err:
            raise PredictError(
                f"{flag} {path}: cannot write there ({err.strerror or err})"
            ) from None
        self.output_dir = str(path)


class _Parser(Parser):
    def error(self, message: str):  # one line, exit 2 (as argparse, without the usage block)
        from hpcbench.this_rank import detect_launch

        message += suggestion(self, message)
        self.exit(2, f"hpcbench predict: error: {message}\n" if detect_launch().rank == 0 else None)


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in its help, where it has one (not "(default: None)" on a
    required option or one without a default)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default in (None, argparse.SUPPRESS, False):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m hpcbench.predict",
        description=(
            "Classify images with a model the trainer checkpointed. Under mpiexec or srun the "
            "ranks form a pipeline: readers -> preprocessors (decode, resize) -> predictors -> "
            "one sink that writes predictions.csv and predict.json."
        ),
        formatter_class=_DefaultsShown,
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="PATH",
        help="a checkpoint file (ckpt-N.pt), or a training run directory or its checkpoints/ "
        "directory (the newest valid checkpoint there)",
    )
    p.add_argument(
        "--input",
        required=True,
        metavar="PATH",
        help="an image folder (one sub-directory per class, or images directly in it: no "
        "labels), a CSV of file,label rows, a metadata JSON, or an hpcbench dataset directory",
    )
    p.add_argument("--output-dir", metavar="DIR", help="where predictions.csv and predict.json go "
                   "[default: $HPCBENCH_RUN_DIR, else runs/predict-<time>]")  # fmt: skip
    p.add_argument("--split", default="test", help="the split of an hpcbench dataset to classify")
    p.add_argument("--mode", default="auto", choices=MODES,
                   help="pipeline of roles; data-parallel (every rank does every stage on its "
                   "share); single (one process, the reference loop); auto: single for one rank, "
                   "else pipeline")  # fmt: skip
    p.add_argument("--roles", default="auto",
                   help="ranks per stage, e.g. reader=1,preprocess=2,predict=3 (sink=1 implied); "
                   "auto: calibrate each stage on this hardware and size them")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None, help="images per unit of work and per "
                   "forward pass (default: 32 on CPUs; on a GPU the smallest of 32-512 whose "
                   "per-image cost is within 10 %% of the best, measured at start)")  # fmt: skip
    p.add_argument("--top-k", type=int, default=1, help="classes per image in predictions.csv")
    p.add_argument("--strict", action="store_true",
                   help="an unreadable image ends the run (default: reported by name and skipped)")  # fmt: skip
    p.add_argument("--credits", type=int, metavar="N",
                   help="units in flight per link (default: sized from the measured rates by "
                   "Little's law)")  # fmt: skip
    p.add_argument("--calibration-items", type=int, default=128,
                   help="images timed per stage by --roles auto")  # fmt: skip
    p.add_argument("--limit", type=int, metavar="N", help="classify only the first N images")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch threads per rank [default: the node's cores / its ranks]")  # fmt: skip
    p.add_argument("--device", default="auto", choices=DEVICES,
                   help="where predictors run (auto: a GPU when the node has one)")  # fmt: skip
    p.add_argument("--stall-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="a rank that hears nothing for this long ends the run (a peer died)")  # fmt: skip
    p.add_argument("--path-column", help="CSV input: the column of file paths")
    p.add_argument("--label-column", help="CSV input: the column of labels")
    p.add_argument("--unlabelled", action="store_true",
                   help="the images have no labels: an image folder's sub-folders (dates, "
                   "cameras) are kept as each image's source, a CSV's label column is not read")  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    return p


def parse_args(argv: list[str] | None = None) -> PredictConfig:
    ns = build_parser().parse_args(argv)
    config = PredictConfig(**{k: v for k, v in vars(ns).items()})
    config.check()
    return config
