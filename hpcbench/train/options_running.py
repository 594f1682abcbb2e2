"""The trainer's options about how a run runs: parallelism, checkpoints and stopping, output.
Part of :class:`~.config.TrainConfig` (each group of options is one class here or in
:mod:`.options_learning`), declared with :func:`~.option_fields.option`."""

from __future__ import annotations

import os
import sys
import typing
from dataclasses import MISSING, Field, dataclass, field, fields, make_dataclass

from hpcbench.this_rank import cpus_per_task_variables
from hpcbench.train.option_fields import (
    COMPILE_MODES,
    DEVICES,
    ENERGY_MODES,
    PRECISIONS,
    PROGRESS_MODES,
    at_least,
    finite_in,
    option,
)
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

STRATEGIES = ("auto", *STRATEGY_KINDS)


@dataclass
class SharedParallelismOptions:
    """What every strategy reads of how the ranks share the work: the strategy, the device,
    precision and compilation."""

    strategy: str = option(
        "auto",
        choices=STRATEGIES,
        help="auto: single for one process, mpi under mpiexec, ddp under torchrun/srun",
    )
    device: str = option(
        "auto",
        choices=DEVICES,
        help="auto: cuda:<local rank> when the node has a GPU for this rank, else the CPU",
    )
    threads: int | None = option(
        None,
        rule=at_least(1),
        help="CPU threads per rank",
        unset=", ".join(f"${v}" for v in ["OMP_NUM_THREADS", *cpus_per_task_variables()])
        + ", else the usable cores / ranks on the node",
    )
    precision: str = option(
        "fp32",
        choices=PRECISIONS,
        help="bf16/fp16: autocast the forward and the loss to that type (weights, gradients and "
        "their reduction stay fp32; fp16 adds loss scaling); bf16 also runs on CPUs",
    )
    channels_last: bool = option(
        False,
        help="the model and each batch in the channels_last memory format (NHWC: what tensor "
        "cores and cuDNN's fastest convolutions want; 1.77x for a ResNet-34 in bf16 on an H200)",
    )
    compile: str = option(
        "off",
        choices=COMPILE_MODES,
        help="torch.compile the training forward in this mode (off: eager); compiled in the first "
        "steps, so set-up and the first epoch take longer; needs a C++ compiler on CPUs",
    )
    resync_every: int = option(
        50,
        rule=at_least(1),
        help="ranks on different kinds of device (GPU ranks beside CPU ranks): every rank takes "
        "rank 0's parameters every N steps, and before each checkpoint, evaluation and the end "
        "(GPU and CPU round differently; the drift is in metrics.json)",
        metavar="N",
    )


def strategies_options() -> list[type]:
    """The option classes the strategies declare, each once, in the strategies' order."""
    found: list[type] = []
    for kind in STRATEGY_KINDS.values():
        found += [cls for cls in kind.options if cls not in found]
    return found


def _copy(f: Field) -> Field:
    if f.default_factory is not MISSING:
        return field(default_factory=f.default_factory, metadata=f.metadata)
    return field(default=f.default, metadata=f.metadata)


def assemble(shared: type, declared: list[type]) -> type:
    """``shared``'s options with those the strategies declared, each placed after the option its
    ``after`` names (once that one is placed; else at the end), as one dataclass."""
    placed = list(fields(shared))
    waiting: list[Field] = []
    for cls in declared:
        for f in fields(cls):
            if f.name in {
                g.name for g in (*placed, *waiting)
            }:  # a plug-in's clash: named, left out
                print(
                    f"hpcbench: the option {f.name} of {cls.__module__}.{cls.__name__} is already "
                    "an option of the trainer; left out",
                    file=sys.stderr,
                )
            else:
                waiting.append(f)
    hints = {n: t for cls in (shared, *declared) for n, t in typing.get_type_hints(cls).items()}
    while waiting:
        names = [f.name for f in placed]
        ready = next((f for f in waiting if f.metadata["after"] in names), None)
        if ready is None:  # nothing left can be placed where it asked: the rest at the end
            placed += waiting
            break
        placed.insert(names.index(ready.metadata["after"]) + 1, ready)
        waiting.remove(ready)
    made = make_dataclass(
        "ParallelismOptions",
        [(f.name, hints[f.name], _copy(f)) for f in placed],
        namespace={"__module__": __name__},
    )
    made.__doc__ = (
        "How the ranks share the work: the options every strategy reads "
        f"(:class:`{shared.__name__}`) and those the strategies declare for themselves "
        "(:mod:`hpcbench.train.strategy_options`, a plug-in strategy's own)."
    )
    return made


#: the ``parallelism`` branch of the trainer's options: the shared ones and the strategies' own
ParallelismOptions = assemble(SharedParallelismOptions, strategies_options())


@dataclass
class CheckpointsAndStoppingOptions:
    """Checkpoints, resuming, determinism and when a run stops."""

    deterministic: bool = option(
        False,
        help="deterministic GPU kernels (PyTorch's deterministic algorithms, cuDNN's "
        "deterministic convolutions, a fixed cuBLAS workspace): a GPU run, and its resume, "
        "then repeat bit for bit; CPUs are deterministic anyway (docs/resilience.md)",
    )
    checkpoint: bool = option(
        True,
        help="write checkpoints (rank 0, atomically) at the end of each epoch, every "
        "--checkpoint-every steps, and when a stop signal arrives (--no-checkpoint: never)",
    )
    checkpoint_every: int = option(
        0,
        rule=at_least(0),
        help="also write a checkpoint every N training steps (0: only at epoch ends and on a "
        "stop signal)",
        metavar="N",
    )
    checkpoint_keep: int = option(
        2,
        rule=at_least(1),
        help="keep the newest K checkpoints (older ones written by this directory's runs are "
        "removed)",
        metavar="K",
    )
    checkpoint_dir: str | None = option(
        None,
        help="where checkpoints are written and --resume auto looks",
        unset="<results directory>/checkpoints",
        metavar="DIR",
    )
    resume: str = option(
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
        rule=finite_in("in [0, 1e7]", lambda v: 0 <= v <= 1e7),
        help="a rank that finishes no training step for this many seconds stops the job, "
        "naming itself (twice as long inside a step, where it may wait for others; 0: never)",
        metavar="SECONDS",
    )


@dataclass
class OutputOptions:
    """What a run writes and shows."""

    val_every: int = option(
        1, rule=at_least(1), help="validate every k epochs (and after the last)"
    )
    output_dir: str | None = option(
        None,
        help="results directory",
        unset="$HPCBENCH_RUN_DIR, else runs/train-<time>",
    )
    progress: str = option(
        "auto",
        choices=PROGRESS_MODES,
        help="auto: a bar on a terminal, one line per epoch otherwise",
    )
    tensorboard: str | None = option(
        None,
        help="rank 0 logs every epoch's metrics and times, the test metrics and the options to "
        "TensorBoard in DIR/<run directory's name> (needs pip install 'hpcbench[tensorboard]'; "
        "view with tensorboard --logdir DIR)",
        unset="no TensorBoard log",
        metavar="DIR",
    )
    step_breakdown: bool = option(
        False,
        help="time each part of the training step (data, forward, backward, bucket copies, "
        "all-reduce start and wait, optimiser, …; the device synchronised at every bound) and "
        "write the per-step means to metrics.json's epochs (step_breakdown_ms)",
    )
    telemetry: float = option(
        5.0,
        rule=finite_in("that is 0 (off) or in [0.1, 3600]", lambda v: v == 0 or 0.1 <= v <= 3600),
        help="every rank appends a record of its progress, compute, data and communication time "
        "per step, loss and device use to <results directory>/telemetry every SECONDS (what "
        "hpcbench watch shows; rank 0 names a straggler in the log; 0: off)",
        metavar="SECONDS",
    )
    trace_steps: str | None = option(
        None,
        rule=lambda v: _trace_steps_error(v),
        help="PyTorch's profiler on every rank for these global steps (from 0) only: "
        "<results directory>/traces/rank-N.pt.trace.json (Chrome trace, TensorBoard's profiler "
        "plugin) and a summary the report reads",
        unset="no traces",
        metavar="FIRST:LAST",
    )
    energy: str = option(
        "off",
        choices=ENERGY_MODES,
        help="on: one sampler per node reads the GPUs (NVML) and CPU packages/DRAM (RAPL) and "
        "rank 0 writes energy.json; what cannot be read is reported unavailable, never fails "
        "the run (docs/energy.md)",
    )
    energy_interval: float = option(
        0.5,
        rule=finite_in("in [0.01, 60]", lambda v: 0.01 <= v <= 60),
        help="seconds between energy readings (--energy on)",
    )


def _trace_steps_error(text: str) -> str | None:
    from hpcbench.measure.traces import parse_steps

    try:
        parse_steps(text)
    except ValueError as err:
        return str(err).split(": ", 1)[-1]
    return None
