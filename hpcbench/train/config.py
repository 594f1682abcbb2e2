"""The trainer's options, each declared once: a field of :class:`TrainConfig` whose metadata holds
its help text, choices, group and rule. From these come the command line (:func:`build_parser`,
whose ``--help`` prints every default from the field itself: :mod:`.command_line`), the checks
(:meth:`TrainConfig.check`, one line naming the flag) and the TOML file of ``--config``
(:func:`~.config_file.read_toml`, :func:`~.config_file.to_toml`: :mod:`.config_file`).

A configuration file holds the options as top-level keys, named as the flags without their dashes
(``global-batch-size`` or ``global_batch_size``); flags given on the command line override it.

Batch semantics are explicit: ``--global-batch-size G`` (unset: :data:`DEFAULT_GLOBAL_BATCH`, so
that the default run learns the built-in set in a few CPU minutes; the reference study's batch is in
jobs/reference-study/resnet34.toml) keeps the effective batch constant as ranks are added (each rank gets
G/W, or its ``--rank-weights`` share); ``--batch-size-per-rank B`` makes the global batch B×W instead.
"""

from __future__ import annotations

import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any

from hpcbench.launch import cpus_per_task_variables
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

STRATEGIES = ("auto", *STRATEGY_KINDS)
OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("none", "cosine", "step", "onecycle")
DATA_ORDERS = ("global", "shards")
LR_SCALINGS = ("none", "linear")
DEVICES = ("auto", "cpu", "cuda")
PROGRESS_MODES = ("auto", "bar", "lines", "none")
ENERGY_MODES = ("off", "on")
PRECISIONS = ("fp32", "bf16", "fp16")
COMPRESSIONS = ("none", "fp16", "bf16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEFAULT_DATA = "data/shapes"
DEFAULT_GLOBAL_BATCH = 32  # the global batch when neither batch option is given

GROUPS = (
    "data and model",
    "parallelism",
    "batch and optimisation",
    "checkpoints and stopping",
    "output",
)


class ConfigError(Exception):
    """A trainer option the user can fix (one line, naming the flag or the file and key)."""


# ---- rules: None for a good value, else what follows the option's name in the error --------------
Rule = Callable[[Any], "str | None"]


def at_least(low: int) -> Rule:
    return lambda v: None if v >= low else f"must be at least {low}, got {v}"


def finite_in(words: str, ok: Callable[[float], bool]) -> Rule:
    """A float option: finite and ``ok``. The upper limits used below keep every value, and what
    the optimisers derive from it (Adam's lr / (1 - beta1)), far inside float32, where torch keeps
    them: beyond, torch fails with a traceback."""
    return lambda v: (
        None if math.isfinite(v) and ok(v) else f"must be a finite number {words}, got {v}"
    )


def _positive_weights(weights: list[float]) -> str | None:
    if all(math.isfinite(w) and w > 0 for w in weights):
        return None
    return "must all be finite positive numbers, got " + ",".join(f"{w:g}" for w in weights)


# The built-in models and the smallest width each accepts after ``NAME:``.
MIN_WIDTH = {"small_cnn": 2, "mlp": 1, "rnn": 1}


def _model_problem(spec: str) -> str | None:
    base, colon, arg = spec.partition(":")
    if not base:
        return f"{spec!r}: give a model name, e.g. small_cnn or resnet18"
    if not colon:
        return None
    if base not in MIN_WIDTH:
        return f"{spec}: only {', '.join(MIN_WIDTH)} take a width (NAME:N); use {base}"
    low = MIN_WIDTH[base]
    if not (arg.isascii() and arg.isdigit()) or int(arg) < low:
        return f"{spec}: the width after ':' must be a whole number >= {low}, e.g. {base}:64"
    return None


def parse_model(spec: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:WIDTH`` (built-ins only) -> (name, width or None)."""
    problem = _model_problem(spec)
    if problem is not None:
        raise ConfigError(f"--model {problem}")
    base, _, arg = spec.partition(":")
    return base, int(arg) if arg else None


def option(
    default: Any = MISSING,
    *,
    group: str,
    help: str,
    choices: tuple[str, ...] | None = None,
    rule: Rule | None = None,
    unset: str | None = None,
    exclusive: str | None = None,
    factory: Callable[[], Any] | None = None,
    metavar: str | None = None,
) -> Any:
    """A :class:`TrainConfig` field with what the command line, the checks and the file need.

    ``help`` explains the option (the parser appends its default, from the field); ``unset``
    what None means; ``rule`` checks a set value; ``exclusive`` names a group of options of
    which one at most is given; ``metavar`` names the value in ``--help``.
    """
    assert group in GROUPS, group
    assert (unset is not None) == (default is None), "say what an unset option means"
    meta = {
        "group": group,
        "help": help,
        "choices": choices,
        "rule": rule,
        "unset": unset,
        "exclusive": exclusive,
        "metavar": metavar,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    data: str = option(
        group="data and model",
        factory=lambda: os.environ.get("HPCBENCH_DATA", DEFAULT_DATA),
        help=f"sharded dataset directory: $HPCBENCH_DATA, else {DEFAULT_DATA}, where the built-in "
        "synthetic set is generated when missing",
    )
    strategy: str = option(
        "auto",
        group="parallelism",
        choices=STRATEGIES,
        help="auto: single for one process, mpi under mpiexec, ddp under torchrun/srun",
    )
    model: str = option(
        "small_cnn",
        group="data and model",
        rule=_model_problem,
        help="small_cnn, mlp, rnn (NAME:WIDTH sets their width), or a torchvision model: "
        "resnet18, resnet34, resnet50, efficientnet_b0, mobilenet_v3_small, vit_b_16, …",
    )
    weights: str | None = option(
        None,
        group="data and model",
        help="pretrained weights for a torchvision --model: a state-dict file you provide "
        "(nothing is downloaded); a different class count gets a fresh head, 1-channel data the "
        "first convolution summed over RGB",
        unset="random initialisation (seeded)",
        metavar="FILE",
    )
    epochs: int = option(5, group="batch and optimisation", rule=at_least(1), help="epochs")
    global_batch_size: int | None = option(
        None,
        group="batch and optimisation",
        rule=at_least(1),
        exclusive="batch",
        help="samples per step over all ranks",
        unset=f"{DEFAULT_GLOBAL_BATCH}, or --batch-size-per-rank × ranks",
    )
    batch_size_per_rank: int | None = option(
        None,
        group="batch and optimisation",
        rule=at_least(1),
        exclusive="batch",
        help="samples per step per rank (global = this × ranks)",
        unset="a share of the global batch",
    )
    rank_weights: list[float] | None = option(
        None,
        group="batch and optimisation",
        rule=_positive_weights,
        help="share of the global batch per rank, e.g. 1,4,4 (a slow rank beside fast ones)",
        unset="equal shares",
    )
    eval_batch_size: int = option(
        256, group="batch and optimisation", rule=at_least(1), help="samples per evaluation batch"
    )
    optimizer: str = option(
        "sgd", group="batch and optimisation", choices=OPTIMIZERS, help="the optimiser"
    )
    lr: float = option(
        0.1,
        group="batch and optimisation",
        rule=finite_in("in (0, 1e30]", lambda v: 0 < v <= 1e30),
        help="learning rate (the reference study's is in jobs/reference-study/resnet34.toml)",
    )
    momentum: float = option(
        0.9,
        group="batch and optimisation",
        rule=finite_in("in [0, 1)", lambda v: 0 <= v < 1),
        help="SGD momentum",
    )
    weight_decay: float = option(
        0.0,
        group="batch and optimisation",
        rule=finite_in("in [0, 1e30]", lambda v: 0 <= v <= 1e30),
        help="weight decay (adamw: 0 means AdamW's usual 0.01)",
    )
    schedule: str = option(
        "cosine",
        group="batch and optimisation",
        choices=SCHEDULES,
        help="learning-rate schedule after the warm-up",
    )
    lr_scaling: str = option(
        "none",
        group="batch and optimisation",
        choices=LR_SCALINGS,
        help="linear: lr × global batch / --lr-reference-batch",
    )
    lr_reference_batch: int = option(
        128,
        group="batch and optimisation",
        rule=at_least(1),
        help="the global batch --lr is meant for (--lr-scaling linear)",
    )
    warmup_epochs: float = option(
        0.0,
        group="batch and optimisation",
        rule=finite_in("in [0, 1e6]", lambda v: 0 <= v <= 1e6),
        help="linear warm-up of the learning rate, in epochs",
    )
    val_every: int = option(
        1, group="output", rule=at_least(1), help="validate every k epochs (and after the last)"
    )
    seed: int = option(
        0,
        group="batch and optimisation",
        rule=lambda v: None if v >= 0 else f"must be >= 0, got {v}",
        help="seed of the model's initial weights and of the data order",
    )
    data_order: str = option(
        "global",
        group="data and model",
        choices=DATA_ORDERS,
        help="global: the same global batches for any number of ranks; shards: each rank reads "
        "only its own shards",
    )
    device: str = option(
        "auto",
        group="parallelism",
        choices=DEVICES,
        help="auto: cuda:<local rank> when the node has a GPU for this rank, else the CPU",
    )
    threads: int | None = option(
        None,
        group="parallelism",
        rule=at_least(1),
        help="CPU threads per rank",
        unset=", ".join(f"${v}" for v in ["OMP_NUM_THREADS", *cpus_per_task_variables()])
        + ", else the usable cores / ranks on the node",
    )
    output_dir: str | None = option(
        None,
        group="output",
        help="results directory",
        unset="$HPCBENCH_RUN_DIR, else runs/train-<time>",
    )
    max_steps: int | None = option(
        None,
        group="batch and optimisation",
        rule=at_least(1),
        help="at most this many training steps per epoch (benchmarks, smoke runs)",
        unset="the whole epoch",
    )
    prefetch: int | None = option(
        None,
        group="data and model",
        rule=at_least(0),
        help="batches read ahead in a background thread while the current one computes (on a "
        "GPU also copied to the device through pinned memory, without blocking)",
        unset="2 on a GPU, 0 on the CPU",
        metavar="N",
    )
    overlap: bool = option(
        True,
        group="parallelism",
        help="mpi: start bucket allreduces from gradient hooks during backward "
        "(--no-overlap: one Allreduce after backward)",
    )
    bucket_mb: float = option(
        25.0,
        group="parallelism",
        rule=finite_in("in (0, 1e6]", lambda v: 0 < v <= 1e6),
        help="gradient bucket size in MB for mpi, as DDP's bucket_cap_mb",
    )
    precision: str = option(
        "fp32",
        group="parallelism",
        choices=PRECISIONS,
        help="bf16/fp16: autocast the forward and the loss to that type (weights, gradients and "
        "their reduction stay fp32; fp16 adds loss scaling); bf16 also runs on CPUs",
    )
    channels_last: bool = option(
        False,
        group="parallelism",
        help="the model and each batch in the channels_last memory format (NHWC: what tensor "
        "cores and cuDNN's fastest convolutions want; 1.77x for a ResNet-34 in bf16 on an H200)",
    )
    deterministic: bool = option(
        False,
        group="checkpoints and stopping",
        help="deterministic GPU kernels (PyTorch's deterministic algorithms, cuDNN's "
        "deterministic convolutions, a fixed cuBLAS workspace): a GPU run, and its resume, "
        "then repeat bit for bit; CPUs are deterministic anyway (docs/resilience.md)",
    )
    compile: str = option(
        "off",
        group="parallelism",
        choices=COMPILE_MODES,
        help="torch.compile the training forward in this mode (off: eager); compiled in the first "
        "steps, so set-up and the first epoch take longer; needs a C++ compiler on CPUs",
    )
    grad_compression: str = option(
        "none",
        group="parallelism",
        choices=COMPRESSIONS,
        help="send the gradients as 16-bit numbers (mpi: the buckets, summed in that type; "
        "ddp: DDP's fp16/bf16 compression hooks): half the bytes, some precision lost",
    )
    error_feedback: bool = option(
        False,
        group="parallelism",
        help="mpi with --grad-compression: add each step's rounding error to the next step's "
        "gradients before they are compressed",
    )
    cuda_aware_mpi: str = option(
        "auto",
        group="parallelism",
        choices=("auto", "on", "off"),
        help="mpi on GPUs: pass the gradient buckets to MPI as device buffers (auto: when the "
        "MPI library says it takes them, MPIX_Query_cuda_support; off: stage them through "
        "pinned host memory)",
    )
    resync_every: int = option(
        50,
        group="parallelism",
        rule=at_least(1),
        help="ranks on different kinds of device (GPU ranks beside CPU ranks): every rank takes "
        "rank 0's parameters every N steps, and before each checkpoint, evaluation and the end "
        "(GPU and CPU round differently; the drift is in metrics.json)",
        metavar="N",
    )
    sync_bn: bool = option(
        False, group="data and model", help="ddp: synchronise batch-norm statistics across ranks"
    )
    stage_dir: str | None = option(
        None,
        group="data and model",
        help="copy this rank's shards here first (e.g. $TMPDIR, /dev/shm)",
        unset="read them in place",
    )
    progress: str = option(
        "auto",
        group="output",
        choices=PROGRESS_MODES,
        help="auto: a bar on a terminal, one line per epoch otherwise",
    )
    tensorboard: str | None = option(
        None,
        group="output",
        help="rank 0 logs every epoch's metrics and times, the test metrics and the options to "
        "TensorBoard in DIR/<run directory's name> (needs pip install 'hpcbench[tensorboard]'; "
        "view with tensorboard --logdir DIR)",
        unset="no TensorBoard log",
        metavar="DIR",
    )
    step_breakdown: bool = option(
        False,
        group="output",
        help="time each part of the training step (data, forward, backward, bucket copies, "
        "all-reduce start and wait, optimiser, …; the device synchronised at every bound) and "
        "write the per-step means to metrics.json's epochs (step_breakdown_ms)",
    )
    energy: str = option(
        "off",
        group="output",
        choices=ENERGY_MODES,
        help="on: one sampler per node reads the GPUs (NVML) and CPU packages/DRAM (RAPL) and "
        "rank 0 writes energy.json; what cannot be read is reported unavailable, never fails "
        "the run (docs/energy.md)",
    )
    energy_interval: float = option(
        0.5,
        group="output",
        rule=finite_in("in [0.01, 60]", lambda v: 0.01 <= v <= 60),
        help="seconds between energy readings (--energy on)",
    )
    checkpoint: bool = option(
        True,
        group="checkpoints and stopping",
        help="write checkpoints (rank 0, atomically) at the end of each epoch, every "
        "--checkpoint-every steps, and when a stop signal arrives (--no-checkpoint: never)",
    )
    checkpoint_every: int = option(
        0,
        group="checkpoints and stopping",
        rule=at_least(0),
        help="also write a checkpoint every N training steps (0: only at epoch ends and on a "
        "stop signal)",
        metavar="N",
    )
    checkpoint_keep: int = option(
        2,
        group="checkpoints and stopping",
        rule=at_least(1),
        help="keep the newest K checkpoints (older ones written by this directory's runs are "
        "removed)",
        metavar="K",
    )
    checkpoint_dir: str | None = option(
        None,
        group="checkpoints and stopping",
        help="where checkpoints are written and --resume auto looks",
        unset="<results directory>/checkpoints",
        metavar="DIR",
    )
    resume: str = option(
        group="checkpoints and stopping",
        factory=lambda: os.environ.get("HPCBENCH_RESUME") or "none",
        rule=lambda v: None if v.strip() else "must be none, auto, a checkpoint or a run directory",
        help="auto: continue from the newest valid checkpoint in the checkpoint directory "
        "(start afresh when there is none; a corrupt one is skipped with a warning); FILE: "
        "from that checkpoint; DIR: a run (or checkpoints) directory's newest valid one; none: "
        "start afresh ($HPCBENCH_RESUME, which job scripts set to auto, gives the default)",
        metavar="auto|none|FILE|DIR",
    )
    hang_timeout: float = option(
        600.0,
        group="checkpoints and stopping",
        rule=finite_in("in [0, 1e7]", lambda v: 0 <= v <= 1e7),
        help="a rank that finishes no training step for this many seconds stops the job, "
        "naming itself (twice as long inside a step, where it may wait for others; 0: never)",
        metavar="SECONDS",
    )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def uses_per_rank_batch(self) -> bool:
        return self.batch_size_per_rank is not None

    def check(self, names: Mapping[str, str] | None = None) -> None:
        """Raise :class:`ConfigError` for the first option out of its rules. ``names``: how to
        name an option in the message where not by its flag (a file and key)."""
        names = names or {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            choices, rule = f.metadata["choices"], f.metadata["rule"]
            problem = rule(value) if rule is not None else None
            if choices is not None and value not in choices:
                problem = f"must be one of {', '.join(choices)}"
            if problem is not None:
                raise ConfigError(f"{names.get(f.name, flag(f))} {problem}")
        for ok, message in (
            (
                self.global_batch_size is None or self.batch_size_per_rank is None,
                "give --global-batch-size or --batch-size-per-rank, not both",
            ),
            (
                self.rank_weights is None or self.data_order == "global",
                "--rank-weights needs --data-order global",
            ),
            (
                not self.error_feedback or self.grad_compression != "none",
                "--error-feedback needs --grad-compression fp16 or bf16",
            ),
            (
                self.rank_weights is None or not self.uses_per_rank_batch,
                "--rank-weights shares a --global-batch-size; drop --batch-size-per-rank",
            ),
            (
                self.compile == "off"
                or self.strategy not in STRATEGY_KINDS
                or STRATEGY_KINDS[self.strategy].compiles,
                f"--compile {self.compile} cannot compile torch.nn.DataParallel's per-step "
                "replicas (--strategy dp); use --strategy ddp, one process per GPU",
            ),
        ):
            if not ok:
                raise ConfigError(message)


OPTIONS: tuple[Field, ...] = fields(TrainConfig)
HINTS = typing.get_type_hints(TrainConfig)


def flag(f: Field) -> str:
    """The option's flag: ``--global-batch-size`` for ``global_batch_size``."""
    return "--" + f.name.replace("_", "-")


def kind_of(f: Field) -> type:
    """int, float, str, bool or list: the option's type without its None, from the annotation."""
    hint = HINTS[f.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def shown(value: Any) -> str:
    """A value as ``--help`` shows it: as written on the command line, unset for None."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(f"{w:g}" for w in value)
    return str(value)
