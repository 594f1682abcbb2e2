"""The trainer's options about what is learned and how: the data and the model, the batch and the
optimisation. Part of :class:`~.config.TrainConfig` (each group of options is one class here or
in :mod:`.options_running`), declared with :func:`~.option_fields.option`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hpcbench.train.option_fields import (
    DATA_ORDERS,
    DEFAULT_DATA,
    DEFAULT_GLOBAL_BATCH,
    LR_SCALINGS,
    OPTIMIZERS,
    SCHEDULES,
    at_least,
    finite_in,
    model_problem,
    option,
    positive_weights,
)


@dataclass
class DataAndModelOptions:
    """The dataset, the model and how the data reaches it."""

    data: str = option(
        factory=lambda: os.environ.get("HPCBENCH_DATA", DEFAULT_DATA),
        help=f"sharded dataset directory: $HPCBENCH_DATA, else {DEFAULT_DATA}, where the built-in "
        "synthetic set is generated when missing",
    )
    model: str = option(
        "small_cnn",
        rule=model_problem,
        help="small_cnn, mlp, rnn (NAME:WIDTH sets their width), a torchvision model: "
        "resnet18, resnet34, resnet50, efficientnet_b0, mobilenet_v3_small, vit_b_16, …, or "
        "your own: package.module:factory or path/to/file.py:factory, called with the "
        "dataset's (channels, height, width) and number of classes",
    )
    weights: str | None = option(
        None,
        help="pretrained weights for a torchvision --model: a state-dict file you provide "
        "(nothing is downloaded); a different class count gets a fresh head, 1-channel data the "
        "first convolution summed over RGB",
        unset="random initialisation (seeded)",
        metavar="FILE",
    )
    data_order: str = option(
        "global",
        choices=DATA_ORDERS,
        help="global: the same global batches for any number of ranks; shards: each rank reads "
        "only its own shards",
    )
    prefetch: int | None = option(
        None,
        rule=at_least(0),
        help="batches read ahead in a background thread while the current one computes (on a "
        "GPU also copied to the device through pinned memory, without blocking)",
        unset="2 on a GPU, 0 on the CPU",
        metavar="N",
    )
    sync_bn: bool = option(False, help="ddp: synchronise batch-norm statistics across ranks")
    stage_dir: str | None = option(
        None,
        help="copy this rank's shards here first (e.g. $TMPDIR, /dev/shm)",
        unset="read them in place",
    )


@dataclass
class BatchAndOptimisationOptions:
    """The batch, the optimiser and its schedule, the epochs."""

    epochs: int = option(5, rule=at_least(1), help="epochs")
    global_batch_size: int | None = option(
        None,
        rule=at_least(1),
        exclusive="batch",
        help="samples per step over all ranks",
        unset=f"{DEFAULT_GLOBAL_BATCH}, or --batch-size-per-rank × ranks",
    )
    batch_size_per_rank: int | None = option(
        None,
        rule=at_least(1),
        exclusive="batch",
        help="samples per step per rank (global = this × ranks)",
        unset="a share of the global batch",
    )
    rank_weights: list[float] | None = option(
        None,
        rule=positive_weights,
        help="share of the global batch per rank, e.g. 1,4,4 (a slow rank beside fast ones)",
        unset="equal shares",
    )
    eval_batch_size: int = option(256, rule=at_least(1), help="samples per evaluation batch")
    optimizer: str = option("sgd", choices=OPTIMIZERS, help="the optimiser")
    lr: float = option(
        0.1,
        rule=finite_in("in (0, 1e30]", lambda v: 0 < v <= 1e30),
        help="learning rate (the reference study's is in jobs/reference-study/resnet34.toml)",
    )
    momentum: float = option(
        0.9,
        rule=finite_in("in [0, 1)", lambda v: 0 <= v < 1),
        help="SGD momentum",
    )
    weight_decay: float = option(
        0.0,
        rule=finite_in("in [0, 1e30]", lambda v: 0 <= v <= 1e30),
        help="weight decay (adamw: 0 means AdamW's usual 0.01)",
    )
    schedule: str = option(
        "cosine",
        choices=SCHEDULES,
        help="learning-rate schedule after the warm-up",
    )
    lr_scaling: str = option(
        "none",
        choices=LR_SCALINGS,
        help="linear: lr × global batch / --lr-reference-batch",
    )
    lr_reference_batch: int = option(
        128,
        rule=at_least(1),
        help="the global batch --lr is meant for (--lr-scaling linear)",
    )
    warmup_epochs: float = option(
        0.0,
        rule=finite_in("in [0, 1e6]", lambda v: 0 <= v <= 1e6),
        help="linear warm-up of the learning rate, in epochs",
    )
    seed: int = option(
        0,
        rule=lambda v: None if v >= 0 else f"must be >= 0, got {v}",
        help="seed of the model's initial weights and of the data order",
    )
    max_steps: int | None = option(
        None,
        rule=at_least(1),
        help="at most this many training steps per epoch (benchmarks, smoke runs)",
        unset="the whole epoch",
    )
