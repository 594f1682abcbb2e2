"""The trainer's options about how a run runs: parallelism, checkpoints and stopping, output.
Part of :class:`~.config.TrainConfig` (each group of options is one class here or in
:mod:`.options_learning`), declared with :func:`~.option_fields.option`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hpcbench.this_rank import cpus_per_task_variables
from hpcbench.train.option_fields import (
    COMPILE_MODES,
    COMPRESSIONS,
    DEVICES,
    ENERGY_MODES,
    PRECISIONS,
    PROGRESS_MODES,
    STRATEGIES,
    at_least,
    finite_in,
    option,
)


@dataclass
class ParallelismOptions:
    """How the ranks share the work: the strategy, the device, precision and communication."""

    strategy: str = option(
        "auto",
        group="parallelism",
        choices=STRATEGIES,
        help="auto: single for one process, mpi under mpiexec, ddp under torchrun/srun",
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


@dataclass
class CheckpointsAndStoppingOptions:
    """Checkpoints, resuming, determinism and when a run stops."""

    deterministic: bool = option(
        False,
        group="checkpoints and stopping",
        help="deterministic GPU kernels (PyTorch's deterministic algorithms, cuDNN's "
        "deterministic convolutions, a fixed cuBLAS workspace): a GPU run, and its resume, "
        "then repeat bit for bit; CPUs are deterministic anyway (docs/resilience.md)",
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


@dataclass
class OutputOptions:
    """What a run writes and shows."""

    val_every: int = option(
        1, group="output", rule=at_least(1), help="validate every k epochs (and after the last)"
    )
    output_dir: str | None = option(
        None,
        group="output",
        help="results directory",
        unset="$HPCBENCH_RUN_DIR, else runs/train-<time>",
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
    telemetry: float = option(
        5.0,
        group="output",
        rule=finite_in("that is 0 (off) or in [0.1, 3600]", lambda v: v == 0 or 0.1 <= v <= 3600),
        help="every rank appends a record of its progress, compute, data and communication time "
        "per step, loss and device use to <results directory>/telemetry every SECONDS (what "
        "hpcbench watch shows; rank 0 names a straggler in the log; 0: off)",
        metavar="SECONDS",
    )
    trace_steps: str | None = option(
        None,
        group="output",
        rule=lambda v: _trace_steps_error(v),
        help="PyTorch's profiler on every rank for these global steps (from 0) only: "
        "<results directory>/traces/rank-N.pt.trace.json (Chrome trace, TensorBoard's profiler "
        "plugin) and a summary the report reads",
        unset="no traces",
        metavar="FIRST:LAST",
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


def _trace_steps_error(text: str) -> str | None:
    from hpcbench.measure.traces import parse_steps

    try:
        parse_steps(text)
    except ValueError as err:
        return str(err).split(": ", 1)[-1]
    return None
