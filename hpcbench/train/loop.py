"""The training run, top to bottom (:func:`run`): :func:`~.start.start` (set-up and the run's
state, :mod:`.start`), :func:`~.start.announce` (the banner), for each epoch :func:`run_epoch` (:func:`train_steps`, then the reductions and the
validation), then :func:`finish` (test, and the results whose layout :mod:`.documents` holds).
Each phase also gets its wall-clock window (unix times, device synchronised at each bound:
``phase_windows``), from which the energy sampler's figures are split by phase.

Timed phases (seconds, the slowest rank's): ``setup`` (dataset, model, process group; excluded
from throughput, as MLPerf does), per epoch ``train`` = ``data`` (waiting for this rank's batch)
+ ``compute`` (forward, backward, optimiser) + ``comm`` (gradient synchronisation that did not
overlap the backward pass), ``val`` and, at the end, ``test``. Throughput = global samples
trained ÷ train time.

With ``--tensorboard``, rank 0 also logs each epoch's row and, at the end, the test metrics to
TensorBoard (:mod:`.tensorboard`; a null object otherwise), and closes the log at the end and on
failure.

Set-up checks (run directory, TensorBoard directory, dataset, batch split, model) are agreed on by
every rank before training (:func:`hpcbench.train.failures.agree`). A step whose synchronised
gradients are not finite, or an epoch whose all-reduced loss is not, stops every rank there
(:class:`hpcbench.train.failures.TrainingDiverged`): nothing is written.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hpcbench.measure.traces import traced
from hpcbench.run_documents import EpochRow, Metrics, TestResult
from hpcbench.train import checkpoint_file as ckpt
from hpcbench.train import checkpointing
from hpcbench.train.agreement import agree_after_step, loss_values, stopped
from hpcbench.train.breakdown import per_step_ms
from hpcbench.train.config import TrainConfig
from hpcbench.train.data import TrainData
from hpcbench.train.documents import EpochTimes, epoch_row, final_results
from hpcbench.train.failures import diverged_in_epoch
from hpcbench.train.finite import nonfinite_flag
from hpcbench.train.metrics import EpochSeconds, Meter
from hpcbench.train.normalize import Normalizer
from hpcbench.train.precision import Precision
from hpcbench.train.prefetch import Prefetcher, prefetch_depth, staged
from hpcbench.train.runtime import Runtime, provenance
from hpcbench.train.start import announce, start
from hpcbench.train.stopping import StopRequest
from hpcbench.train.strategies.base import Strategy
from hpcbench.train.training import Log, Training

FP32 = Precision()


def train_step(
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    criterion: nn.Module,
    precision: Precision = FP32,
) -> tuple[torch.Tensor, torch.Tensor, float, torch.Tensor | None]:
    """One optimisation step; returns (mean loss, logits, seconds of non-overlapped
    communication, the non-finite flag of the synchronised gradients:
    :func:`hpcbench.train.finite.nonfinite_flag`). Gradients that are not finite are not
    applied; under fp16 such a step is skipped and the loss scale lowered. Nothing here reads
    a value back from the device (with a fused optimiser)."""
    assert strategy.model is not None
    timed = strategy.breakdown
    with timed.part("buffers"):
        strategy.before_forward()
    with timed.part("forward"):
        strategy.zero_grad(optimizer)
        with precision.autocast():
            logits = strategy.model(x)
            loss = criterion(logits, y)
    with timed.part("backward"):
        scaled = loss * strategy.loss_scale if strategy.loss_scale != 1.0 else loss
        precision.scale(scaled).backward()
    with timed.part("allreduce_wait"), traced("comm"):
        comm = strategy.finish_gradients()
    with timed.part("finite_check"):
        precision.unscale(optimizer)
        flag = nonfinite_flag(strategy.gradients())
    with timed.part("optimizer"):
        precision.step(optimizer, flag)
    return loss.detach(), logits.detach(), comm, flag


def evaluate(
    strategy: Strategy,
    data: TrainData,
    split: str,
    norm: Normalizer,
    criterion: nn.Module,
    precision: Precision = FP32,
) -> TestResult | None:
    """Loss, accuracy and macro-F1 over ``split`` (None when the dataset has no such split;
    ``{"unlabeled": True, "samples": N}`` for a split stored without labels: nothing to score)."""
    if split not in data.manifest.splits:
        return None
    if not (info := data.manifest.splits[split]).labeled:
        return {"unlabeled": True, "samples": info.samples}
    model = strategy.eval_model
    assert model is not None
    was_training = model.training
    model.eval()
    meter = Meter(data.manifest.num_classes, strategy.runtime.device)
    with torch.no_grad():
        for xb, yb in data.eval_batches(split):
            x, y = norm(xb, yb)
            with precision.autocast():
                logits = model(x)
                loss = criterion(logits, y)
            meter.update(logits, y, loss)
    model.train(was_training)
    return Meter.summarise(strategy.all_reduce(meter.vector()), data.manifest.num_classes)


# ---- the run, top to bottom -----------------------------------------------------------------
def run(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log = print,
    *,
    run_dir: tuple[Path, str] | None,
    stop: StopRequest | None = None,
) -> Metrics:
    """Train, validate, test; return the results (:func:`hpcbench.train.documents.final_results`).
    ``run_dir`` (on rank 0, and there only: the directory and the option that named it, as
    :func:`hpcbench.train.documents.run_dir_of` decides) is checked for writing during set-up. With ``--resume`` the run continues from a checkpoint; a stop signal
    (``stop``) ends it at the next step boundary with a checkpoint (:class:`Stopped`)."""
    t = start(config, runtime, strategy, log, run_dir, stop or StopRequest())
    try:
        announce(t)
        t.learner.model.train()
        for epoch in range(t.position.start_epoch, config.batch.epochs):
            row = run_epoch(t, epoch)
            loss_values(t)  # one host read per epoch, not per step
            t.position.epochs.append(row)
            t.hooks.epoch_end(row)
            log(epoch_line(epoch, config.batch.epochs, row))
            save_checkpoint(t, epoch + 1, 0)
        t.hooks.training_end()
        results = finish(t, t.position.epochs)
        t.hooks.run_end(results)
        return results
    finally:
        t.hooks.close()


def train_steps(t: Training, epoch: int) -> tuple[Meter, float, float, float]:
    """The epoch's training steps on this rank: (the meter, train, data and communication
    seconds), from the resumed step on. Stops every rank at a step whose synchronised gradients
    are not finite, and at the step after a stop signal (:class:`Stopped`, after a checkpoint).
    Checkpoint time is not training time."""
    hooks, learner, position, timed = t.hooks, t.learner, t.position, t.strategy.breakdown
    first = position.first_step(epoch)
    meter, seconds = resumed_sums(t, first)
    hooks.epoch_start(epoch)
    batches = epoch_batches(t, epoch, first)
    timed.reset()
    try:
        for step in range(first, t.data.steps):
            hooks.before_batch()
            d0 = time.perf_counter()
            with timed.part("data"), hooks.waiting_for_data():
                x, y = learner.norm.normalize(*next(batches))
            waited = time.perf_counter() - d0
            hooks.before_step()
            loss, logits, comm, flag = train_step(
                t.strategy, learner.optimizer, x, y, learner.criterion, learner.precision
            )
            hooks.after_update(epoch, step, loss, flag)
            busy = time.perf_counter() - d0 - waited
            seconds.data, seconds.comm = seconds.data + waited, seconds.comm + comm
            with timed.part("optimizer"):
                learner.schedule.step()
            position.steps_done += 1
            hooks.after_step()
            with timed.part("agreement"):
                meter.update(logits, y, loss)
                stop, global_loss = agree_after_step(t, loss, t.data.weight)
            timed.step_done()
            position.losses.append(global_loss)
            hooks.step_end(epoch, step, y.shape[0], (busy - comm, waited, comm), global_loss)
            if stop or hooks.checkpoint_due(last=step + 1 == t.data.steps):
                hooks.check_finite()
                seconds.comm += t.strategy.settled_comm_s()
                with seconds.pause():
                    path = save_checkpoint(t, epoch, step + 1, meter, seconds.so_far())
                if stop:
                    hooks.stopping()
                    raise stopped(t, epoch, step + 1, path)
        hooks.steps_end()
        seconds.comm += t.strategy.settled_comm_s()
        train_s, data_s, comm_s = seconds.so_far()
        hooks.epoch_timed()
        return meter, train_s, data_s, comm_s
    finally:
        if isinstance(batches, Prefetcher):
            batches.close()


def resumed_sums(t: Training, first: int) -> tuple[Meter, EpochSeconds]:
    """The epoch's meter and its (train, data, communication) seconds so far: zero, or what the
    checkpoint of a resumed epoch holds (its sums on rank 0 only, to be all-reduced once)."""
    meter = Meter(t.data.manifest.num_classes, t.runtime.device)
    partial = t.position.partial if first else None
    if partial is not None and t.runtime.rank == 0:
        saved = partial["meter"].numpy()
        meter.loss_sum += float(saved[0])
        meter.confusion += torch.from_numpy(saved[1:].astype(np.int64)).to(meter.confusion.device)
    before = partial["times"].numpy() if partial is not None else np.zeros(3)
    return meter, EpochSeconds(t.clock, before)


def epoch_batches(t: Training, epoch: int, first: int) -> Iterator[Any]:
    """This rank's batches of the epoch from step ``first`` on, staged on the device (ahead of
    the step, in a thread, with ``--prefetch``)."""
    index = t.strategy.share_index(t.data, epoch)
    read = iter(t.data.train_batches(epoch, index if index is None else index[first:]))
    if t.data.sharded is not None:  # the shard order has no index: pass the steps done
        for _ in range(first):
            next(read)
    stage = t.learner.norm.stage
    depth = prefetch_depth(t.config.data.prefetch, t.runtime.device.type)
    return Prefetcher(read, stage, depth) if depth else staged(read, stage)


def save_checkpoint(
    t: Training, epoch: int, step: int, meter: Meter | None = None, times: list[float] | None = None
) -> Path | None:
    """The checkpoint of position (epoch, step), written by :func:`.checkpointing.save` after
    the re-synchronisation of mixed devices; every rank calls this at the same step. Returns the
    file on rank 0."""
    if not t.config.checkpoints.checkpoint:
        return None
    c0 = time.perf_counter()
    t.hooks.resync()
    learner, position = t.learner, t.position
    path = checkpointing.save(
        t.strategy,
        learner.optimizer,
        learner.schedule,
        learner.precision,
        directory=t.checkpoint_dir,
        keep=t.config.checkpoints.checkpoint_keep,
        fingerprint=t.fingerprint,
        position={
            "epoch": epoch,
            "step": step,
            "steps_done": position.steps_done,
            "world_size": t.runtime.world_size,
            "steps_per_epoch": t.data.steps,
        },
        progress={
            "epochs": position.epochs,
            "losses": loss_values(t),
            "checkpoint_s": position.checkpoint_s,
            "replicas": t.hooks.replicas.state(),
            "deterministic": t.config.checkpoints.deterministic,
        },
        dataset=ckpt.dataset_description(t.data.manifest),
        partial=None if meter is None or times is None else (meter.vector(), times),
    )
    position.checkpoint_s.append(time.perf_counter() - c0)
    return path


def run_epoch(t: Training, epoch: int) -> EpochRow:
    """One epoch: train, reduce over ranks (the slowest rank's times, bytes summed), validate
    when due; its row of the results (:func:`hpcbench.train.documents.epoch_row`)."""
    with t.windows.phase("train"):
        meter, train_s, data_s, comm_s = train_steps(t, epoch)
    io = t.data.io_stats()
    times = t.strategy.all_reduce(np.array([train_s, data_s, comm_s]), "max")
    bytes_read = int(t.strategy.all_reduce(np.array([io["bytes_read"]], dtype=np.float64))[0])
    k = t.data.manifest.num_classes
    train = Meter.summarise(t.strategy.all_reduce(meter.vector()), k)
    timed = t.strategy.breakdown
    breakdown = per_step_ms(t.strategy.all_reduce(timed.vector())) if timed.enabled else None
    if not math.isfinite(train["loss"]):  # the same all-reduced number on every rank
        raise diverged_in_epoch(epoch, t.runtime.world_size, train["loss"], t.runtime.rank)
    v0 = t.clock()
    val = None
    if (epoch + 1) % t.config.output.val_every == 0 or epoch + 1 == t.config.batch.epochs:
        t.hooks.resync()
        with t.windows.phase("val"):
            val = evaluate(t.strategy, t.data, "val", *t.learner.evaluating())
    if val is not None and val.get("unlabeled"):
        val = None
    val_s = t.clock() - v0
    return epoch_row(
        epoch=epoch + 1,
        train=train,
        val=val,
        times=EpochTimes(train=times[0], data=times[1], comm=times[2], val=val_s),
        samples=t.data.steps * t.data.global_batch,
        lr=t.learner.lr,
        bytes_read=bytes_read,
        io_rank0=io,
        step_breakdown_ms=breakdown,
    )


def epoch_line(epoch: int, epochs: int, row: EpochRow) -> str:
    """The line printed after an epoch."""
    val = "" if row["val_accuracy"] is None else f" val acc {row['val_accuracy']:.4f}"
    return (
        f"epoch {epoch + 1}/{epochs}: loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f}{val} | "
        f"train {row['train_time_s']:.2f}s (data {row['data_time_s']:.2f} comm {row['comm_time_s']:.2f}) "
        f"{row['samples_per_s']:,.0f} samples/s"
    )


def finish(t: Training, epochs: list[EpochRow]) -> Metrics:
    """Test, then the results of the run."""
    t.hooks.resync()
    with t.windows.phase("test"):
        t_test = t.clock()
        test = evaluate(t.strategy, t.data, "test", *t.learner.evaluating())
        test_s = t.clock() - t_test
    return final_results(
        config=t.config,
        strategy=t.strategy.name,
        world_size=t.runtime.world_size,
        device=str(t.runtime.device),
        dataset_name=t.data.manifest.name,
        classes=t.data.manifest.num_classes,
        batch_sizes=t.data.batch_sizes,
        steps_per_epoch=t.data.steps,
        provenance=provenance(t.runtime, t.strategy.name, t.config.data.model, t.placement),
        epochs=epochs,
        test=test,
        test_s=test_s,
        setup_s=t.setup_s,
        phase_windows=t.windows.rows,
        checkpoints=checkpointing.record(
            t.config.checkpoints.checkpoint,
            t.checkpoint_dir,
            t.position.checkpoint_s,
            t.position.resumed_from,
        ),
        step_losses=loss_values(t),
        replicas=t.hooks.replicas.record(),
        precision=t.learner.precision.record(),
    )
