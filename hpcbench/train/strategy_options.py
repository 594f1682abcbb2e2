"""The options the built-in strategies declare for themselves: each is a small dataclass of
:func:`~.option_fields.option` fields that a strategy's kind names in its ``options``
(:mod:`.strategy_kinds`). They join the ``parallelism`` branch of the trainer's options
(``config.parallelism.bucket_mb``), its ``--help`` section, flags and configuration keys, as a
plug-in strategy's own options do; ``after`` places each among the section's options.

No torch here: the submit side reads these with the kinds.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.train.option_fields import finite_in, option

COMPRESSIONS = ("none", "fp16", "bf16")


@dataclass
class GradientExchangeOptions:
    """How the strategies that send gradients between ranks (ddp, mpi) send them."""

    bucket_mb: float = option(
        25.0,
        rule=finite_in("in (0, 1e6]", lambda v: 0 < v <= 1e6),
        help="gradient bucket size in MB for mpi, as DDP's bucket_cap_mb",
        after="overlap",
    )
    grad_compression: str = option(
        "none",
        choices=COMPRESSIONS,
        help="send the gradients as 16-bit numbers (mpi: the buckets, summed in that type; "
        "ddp: DDP's fp16/bf16 compression hooks): half the bytes, some precision lost",
        after="compile",
    )


@dataclass
class MpiOptions:
    """What only the mpi strategy reads: its overlap, error feedback and device buffers."""

    overlap: bool = option(
        True,
        help="mpi: start bucket allreduces from gradient hooks during backward "
        "(--no-overlap: one Allreduce after backward)",
        after="threads",
    )
    error_feedback: bool = option(
        False,
        help="mpi with --grad-compression: add each step's rounding error to the next step's "
        "gradients before they are compressed",
        after="grad_compression",
    )
    cuda_aware_mpi: str = option(
        "auto",
        choices=("auto", "on", "off"),
        help="mpi on GPUs: pass the gradient buckets to MPI as device buffers (auto: when the "
        "MPI library says it takes them, MPIX_Query_cuda_support; off: stage them through "
        "pinned host memory)",
        after="error_feedback",
    )
