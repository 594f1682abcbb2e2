"""Run under mpiexec, torchrun or alone: N training steps of one strategy on the global data order,
for each of several variants (rank weights, trainer options) in turn within one launch, saving
rank 0's weights after every step and checking that all replicas are bitwise identical.

    python equivalence.py OUT_DIR STRATEGY DATA STEPS VARIANT [VARIANT …]

Each VARIANT is ``NAME;WEIGHTS;OPTION=VALUE,…`` (``equal;;`` is equal shares and no options;
``w125;1,2,5;`` unequal shares; ``ef;;grad_compression=bf16,error_feedback=1`` more trainer
options: ``precision=bf16``, ``grad_compression=fp16``, ``error_feedback=1``); its trajectory goes
to ``OUT_DIR/NAME.npz``. One launch per (strategy, ranks) pays the interpreter, torch import and
process-group start once; every variant builds its own strategy, model and optimizer from the same
seeds, as a launch of its own would (under DDP they share the one process group).

Pickling is forbidden during the steps (mpi4py's pickle and the pickle module both raise), so a
training step that pickles anything fails the test.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn


@contextlib.contextmanager
def no_pickling(strategy_name: str):
    def forbidden(*args, **kwargs):
        raise AssertionError("something was pickled inside a training step")

    saved = pickle.dumps, pickle.loads, pickle.Pickler, pickle.Unpickler
    pickle.dumps = pickle.loads = pickle.Pickler = pickle.Unpickler = forbidden  # type: ignore[assignment]
    mpi = None
    if strategy_name == "mpi":
        from mpi4py import MPI as mpi

        mpi.pickle.__init__(forbidden, forbidden)
    try:
        yield
    finally:
        pickle.dumps, pickle.loads, pickle.Pickler, pickle.Unpickler = saved
        if mpi is not None:
            mpi.pickle.__init__()


def parse_variant(text: str) -> tuple[str, list[float] | None, dict]:
    """``NAME;WEIGHTS;OPTION=VALUE,…`` as (name, rank weights or None, trainer options)."""
    name, weights, opts = (text.split(";") + ["", ""])[:3]
    options = dict(item.split("=", 1) for item in opts.split(",") if item)
    if "error_feedback" in options:
        options["error_feedback"] = options["error_feedback"] == "1"
    return name, ([float(w) for w in weights.split(",")] if weights else None), options


def run_variant(
    out: Path, strategy_name: str, data_dir: str, steps: int, variant: str, runtime, last: bool
) -> None:
    from hpcbench.train.config import TrainConfig
    from hpcbench.train.data import TrainData
    from hpcbench.train.loop import train_step
    from hpcbench.train.models import build_model
    from hpcbench.train.normalize import Normalizer
    from hpcbench.train.optim import make_optimizer
    from hpcbench.train.precision import Precision
    from hpcbench.train.strategies import make_strategy

    name, weights, options = parse_variant(variant)
    config = TrainConfig(
        data=data_dir,
        strategy=strategy_name,
        model="mlp:64",
        global_batch_size=24,
        rank_weights=weights,
        optimizer="sgd",
        lr=0.05,
        momentum=0.9,
        schedule="none",
        seed=3,
        **options,
    )
    strategy = make_strategy(strategy_name, config, runtime)
    torch.manual_seed(1234 + runtime.rank)  # different on purpose: rank 0's weights must win
    data = TrainData(config, runtime.rank, runtime.world_size)
    model = strategy.setup(
        build_model(config.data.model, tuple(data.manifest.shape), data.manifest.num_classes),
        data.weight,
    )
    optimizer = make_optimizer(config, model, data.global_batch)
    norm, criterion = Normalizer(data.manifest, runtime.device), nn.CrossEntropyLoss()
    precision = Precision(config.parallelism.precision, runtime.device)
    index = strategy.share_index(data, 0)
    batches = data.train_batches(0, index)
    trajectory, identical = [], []
    for _ in range(steps):
        x, y = norm(*next(batches))
        with no_pickling(strategy_name):
            train_step(strategy, optimizer, x, y, criterion, precision)
        flat = (
            torch.cat([p.detach().reshape(-1) for p in strategy.eval_model.parameters()])
            .double()
            .numpy()
        )
        hi = strategy.all_reduce(flat, "max")
        lo = -strategy.all_reduce(-flat, "max")
        identical.append(bool(np.array_equal(hi, lo) and np.array_equal(hi, flat)))
        trajectory.append(flat.astype(np.float32))
    del model, optimizer, batches  # the strategy owns the last references; close() frees them
    if runtime.rank == 0:
        np.savez(
            out / f"{name}.npz",
            weights=np.stack(trajectory),
            identical=np.array(identical),
            batch_sizes=np.array(data.batch_sizes),
        )
    if last:
        strategy.close()
    else:  # the next variant reuses the process group: free this one's model (and DDP's reducer)
        strategy.all_reduce(np.zeros(1), "max")  # every rank done with this variant
        strategy.model = strategy.eval_model = None
        gc.collect()


def main() -> int:
    out, strategy_name, data_dir, steps = (
        Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    )  # fmt: skip
    variants = sys.argv[5:]
    from hpcbench.train.eager_dynamo import defer
    from hpcbench.train.runtime import make_runtime

    defer()  # as the trainer's own process does: its ranks are what is compared

    runtime = make_runtime("cpu", threads=1)
    for i, variant in enumerate(variants):
        run_variant(out, strategy_name, data_dir, steps, variant, runtime, i == len(variants) - 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
