"""The training run, top to bottom (:func:`run`): :func:`start` (set-up), :func:`announce` (the
banner), for each epoch :func:`run_epoch` (:func:`train_steps`, then the reductions and the
validation), then :func:`finish` (test, and the results whose layout :mod:`.results` holds).
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
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import get_total_norm

from hpcbench import __version__
from hpcbench.data.manifest import Manifest
from hpcbench.launch import job_id, usable_cores
from hpcbench.train.config import TrainConfig
from hpcbench.train.data import TrainData, ensure_dataset, wait_for_dataset
from hpcbench.train.failures import agree, diverged
from hpcbench.train.metrics import Clock, Meter, PhaseWindows
from hpcbench.train.models import build_model
from hpcbench.train.results import EpochTimes, epoch_row, final_results, prepare_run_dir
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies import Strategy
from hpcbench.train.tensorboard import NullBoard, check_board, open_board

if TYPE_CHECKING:
    from hpcbench.progress import Progress

FAIL_AT_VARIABLE = "HPCBENCH_FAIL_AT"  # "RANK:STEP": a failure drill (see docs/training.md)
Log = Callable[[str], None]


def gradients_finite(model: nn.Module) -> bool:
    """Whether every gradient is a finite number (one reduction and one host read).

    Read after the strategy's all-reduce, when the gradients are the same on every rank: every
    rank gets the same answer with no extra communication (a nan or inf from any rank makes the
    sum non-finite on all of them, whatever the order of summation)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return True
    return bool(torch.isfinite(get_total_norm(grads, norm_type=math.inf)))


def train_step(
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    criterion: nn.Module,
) -> tuple[torch.Tensor, torch.Tensor, float, bool]:
    """One optimisation step; returns (mean loss, logits, seconds of non-overlapped
    communication, whether the synchronised gradients were finite). Non-finite gradients are
    not applied."""
    assert strategy.model is not None
    strategy.before_forward()
    optimizer.zero_grad(set_to_none=True)
    logits = strategy.model(x)
    loss = criterion(logits, y)
    (loss * strategy.loss_scale if strategy.loss_scale != 1.0 else loss).backward()
    comm = strategy.finish_gradients()
    finite = gradients_finite(strategy.model)
    if finite:
        optimizer.step()
    return loss.detach(), logits.detach(), comm, finite


def make_optimizer(
    config: TrainConfig, model: nn.Module, global_batch: int
) -> torch.optim.Optimizer:
    lr = config.lr * (
        global_batch / config.lr_reference_batch if config.lr_scaling == "linear" else 1.0
    )
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=config.weight_decay or 0.01)


def make_schedule(
    config: TrainConfig, optimizer: torch.optim.Optimizer, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    total = config.epochs * steps_per_epoch
    warm = int(config.warmup_epochs * steps_per_epoch)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        t = (step - warm) / max(1, total - warm)
        if config.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))
        if config.schedule == "step":
            return 0.1 ** int(t * 3)  # /10 at 1/3 and 2/3 of training
        if config.schedule == "onecycle":
            return (
                min(1.0, 4 * t + 0.1)
                if t < 0.25
                else 0.5 * (1 + math.cos(math.pi * (t - 0.25) / 0.75))
            )
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Normalizer:
    """Stored pixels (uint8 or float16) -> normalised float32 on the device."""

    def __init__(self, manifest: Manifest, device: torch.device) -> None:
        scale, shift = manifest.normalization()
        self.scale, self.shift = (
            torch.from_numpy(scale).to(device),
            torch.from_numpy(shift).to(device),
        )
        self.device = device

    def __call__(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        xt = torch.from_numpy(x).to(self.device, non_blocking=True)
        yt = torch.from_numpy(y).to(self.device, non_blocking=True)
        return xt.float().mul_(self.scale).add_(self.shift), yt


def evaluate(
    strategy: Strategy, data: TrainData, split: str, norm: Normalizer, criterion: nn.Module
) -> dict[str, float] | None:
    if split not in data.manifest.splits:
        return None
    model = strategy.eval_model
    assert model is not None
    was_training = model.training
    model.eval()
    meter = Meter(data.manifest.num_classes, strategy.runtime.device)
    with torch.no_grad():
        for xb, yb in data.eval_batches(split):
            x, y = norm(xb, yb)
            logits = model(x)
            meter.update(logits, y, criterion(logits, y))
    model.train(was_training)
    return Meter.summarise(strategy.all_reduce(meter.vector()), data.manifest.num_classes)


def _fail_drill(rank: int) -> int | None:
    spec = os.environ.get(FAIL_AT_VARIABLE, "")
    r, _, step = spec.partition(":")
    if r.strip().isdigit() and step.strip().isdigit() and int(r) == rank:
        return int(step)
    return None


def _provenance(runtime: Runtime, strategy_name: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "hpcbench": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "launcher": runtime.launch.launcher,
        "job_id": job_id(),
        "nodelist": os.environ.get("SLURM_JOB_NODELIST"),
        "threads": runtime.threads,
        "backend": runtime.backend if strategy_name == "ddp" else None,
    }
    if strategy_name == "mpi":
        from mpi4py import MPI

        info["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        info["git"] = rev.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["git"] = None
    return info


def set_up(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log,
    run_dir: tuple[Path, str] | None = None,
) -> tuple[TrainData, nn.Module]:
    """Every check the user's input can fail, agreed on by every rank before any collective of
    the model: the run directory (rank 0 creates it and writes a probe file), the TensorBoard
    package and directory (rank 0), the dataset, the batch split, the model."""
    rank, world = runtime.rank, runtime.world_size

    def place() -> None:
        if rank == 0 and run_dir is not None:
            prepare_run_dir(*run_dir)
        if rank == 0:
            check_board(config, run_dir[0] if run_dir else None)
        ensure_dataset(config, rank, log)

    agree(strategy, place)
    wait_for_dataset(config)

    def build() -> tuple[TrainData, nn.Module]:
        torch.manual_seed(config.seed)
        data = TrainData(config, rank, world)
        shape, k = tuple(data.manifest.shape), data.manifest.num_classes
        return data, build_model(config.model, shape, k)

    return agree(strategy, build)


def _diverged_step(
    epoch: int, step: int, world: int, loss: torch.Tensor, lr: float, rank: int
) -> BaseException:
    return diverged(
        f"training diverged at epoch {epoch + 1}, step {step + 1}: the gradients summed over "
        f"{world} rank(s) are not finite (rank {rank}'s loss {float(loss):.4g}, lr {lr:.4g}); "
        "no results written (lower --lr, or add --warmup-epochs)",
        rank,
    )


def _diverged_epoch(epoch: int, world: int, loss: float, rank: int) -> BaseException:
    return diverged(
        f"training diverged in epoch {epoch + 1}: the mean training loss over {world} rank(s) "
        f"is {loss}; no results written (lower --lr, or add --warmup-epochs)",
        rank,
    )


# ---- the run, top to bottom -----------------------------------------------------------------
@dataclass
class Training:
    """What set-up made and every epoch uses."""

    config: TrainConfig
    runtime: Runtime
    strategy: Strategy
    log: Log
    clock: Clock
    windows: PhaseWindows  # each phase's wall-clock bounds on this rank
    data: TrainData
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    criterion: nn.Module
    norm: Normalizer
    fail_step: int | None  # the failure drill's global step on this rank
    setup_s: float = 0.0  # the slowest rank's set-up seconds
    steps_done: int = 0  # training steps so far, over all epochs
    board: NullBoard = field(default_factory=NullBoard)  # rank 0's --tensorboard log

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


def run(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log = print,
    run_dir: tuple[Path, str] | None = None,
) -> dict[str, Any]:
    """Train, validate, test; return the results (:func:`hpcbench.train.results.final_results`).
    ``run_dir`` (rank 0: the directory and the option that named it) is checked for writing
    during set-up."""
    t = start(config, runtime, strategy, log, run_dir)
    try:
        announce(t)
        epochs: list[dict[str, Any]] = []
        t.model.train()
        for epoch in range(config.epochs):
            row = run_epoch(t, epoch)
            epochs.append(row)
            t.board.epoch(row)
            log(epoch_line(epoch, config.epochs, row))
        results = finish(t, epochs)
        t.board.finish(results)
        return results
    finally:
        t.board.close()


def start(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log,
    run_dir: tuple[Path, str] | None,
) -> Training:
    """Set-up, timed (the slowest rank's time) and windowed: the agreed checks, then the model
    placed by the strategy, the optimiser and its schedule."""
    clock = Clock(runtime)
    windows = PhaseWindows(clock)
    with windows.phase("setup"):
        t0 = clock()
        data, model = set_up(config, runtime, strategy, log, run_dir)
        model = strategy.setup(model, data.weight)
        optimizer = make_optimizer(config, model, data.global_batch)
        t = Training(
            config=config,
            runtime=runtime,
            strategy=strategy,
            log=log,
            clock=clock,
            windows=windows,
            data=data,
            model=model,
            optimizer=optimizer,
            schedule=make_schedule(config, optimizer, data.steps),
            criterion=nn.CrossEntropyLoss(),
            norm=Normalizer(data.manifest, runtime.device),
            fail_step=_fail_drill(runtime.rank),
        )
        strategy.barrier()
        t.setup_s = float(strategy.all_reduce(np.array([clock() - t0]), "max")[0])
    t.board = open_board(config, runtime.rank, run_dir[0] if run_dir else None)
    return t


def announce(t: Training) -> None:
    """The banner, and a note when the CPU ranks of this node want more threads than it has
    cores."""
    config, runtime, data, manifest = t.config, t.runtime, t.data, t.data.manifest
    t.log(
        f"hpcbench train: {t.strategy.name} on {runtime.world_size} rank(s), {runtime.device.type}, {runtime.threads} thread(s)/rank; "
        f"{config.model} on {manifest.name} ({manifest.split('train').samples} train samples, "
        f"{'x'.join(str(s) for s in manifest.shape)}); global batch {data.global_batch} "
        f"({'/'.join(map(str, data.batch_sizes))} per rank), {data.steps} steps/epoch, {config.epochs} epoch(s)"
    )
    cores = usable_cores()
    ranks = runtime.launch.local_world_size
    if runtime.device.type == "cpu" and ranks * runtime.threads > cores:
        t.log(
            f"note: {ranks} rank(s) x {runtime.threads} thread(s) on {cores} core(s): "
            "the node is oversubscribed; communication times include waiting for descheduled ranks"
        )


def _progress_bar(t: Training, epoch: int) -> Progress | None:
    """Rank 0's bar for the epoch's steps (``--progress bar``, or auto on a terminal)."""
    mode = t.config.progress
    if t.runtime.rank != 0 or not (mode == "bar" or (mode == "auto" and sys.stderr.isatty())):
        return None
    from hpcbench.progress import Progress

    return Progress(t.data.steps, f"epoch {epoch + 1}/{t.config.epochs}", unit="step")


def train_steps(t: Training, epoch: int) -> tuple[Meter, float, float, float]:
    """The epoch's training steps on this rank: (the meter, train, data and communication
    seconds). Stops every rank at a step whose synchronised gradients are not finite."""
    e0 = t.clock()
    rank, world = t.runtime.rank, t.runtime.world_size
    index = t.strategy.share_index(t.data, epoch)
    meter = Meter(t.data.manifest.num_classes, t.runtime.device)
    data_s = comm_s = 0.0
    progress = _progress_bar(t, epoch)
    batches = iter(t.data.train_batches(epoch, index))
    for step in range(t.data.steps):
        d0 = time.perf_counter()
        xb, yb = next(batches)
        x, y = t.norm(xb, yb)
        data_s += time.perf_counter() - d0
        if t.fail_step is not None and t.steps_done == t.fail_step:
            raise RuntimeError(
                f"failure drill: rank {rank} fails at step {t.steps_done} ({FAIL_AT_VARIABLE})"
            )
        loss, logits, comm, finite = train_step(t.strategy, t.optimizer, x, y, t.criterion)
        if not finite:
            raise _diverged_step(epoch, step, world, loss, t.lr, rank)
        comm_s += comm
        t.schedule.step()
        meter.update(logits, y, loss)
        t.steps_done += 1
        if progress is not None:
            progress.update(step + 1)
    train_s = t.clock() - e0
    if progress is not None:
        progress.close()
    return meter, train_s, data_s, comm_s


def run_epoch(t: Training, epoch: int) -> dict[str, Any]:
    """One epoch: train, reduce over ranks (the slowest rank's times, bytes summed), validate
    when due; its row of the results (:func:`hpcbench.train.results.epoch_row`)."""
    with t.windows.phase("train"):
        meter, train_s, data_s, comm_s = train_steps(t, epoch)
    io = t.data.io_stats()
    times = t.strategy.all_reduce(np.array([train_s, data_s, comm_s]), "max")
    bytes_read = int(t.strategy.all_reduce(np.array([io["bytes_read"]], dtype=np.float64))[0])
    k = t.data.manifest.num_classes
    train = Meter.summarise(t.strategy.all_reduce(meter.vector()), k)
    if not math.isfinite(train["loss"]):  # the same all-reduced number on every rank
        raise _diverged_epoch(epoch, t.runtime.world_size, train["loss"], t.runtime.rank)
    v0 = t.clock()
    val = None
    if (epoch + 1) % t.config.val_every == 0 or epoch + 1 == t.config.epochs:
        with t.windows.phase("val"):
            val = evaluate(t.strategy, t.data, "val", t.norm, t.criterion)
    val_s = t.clock() - v0
    return epoch_row(
        epoch=epoch + 1,
        train=train,
        val=val,
        times=EpochTimes(train=times[0], data=times[1], comm=times[2], val=val_s),
        samples=t.data.steps * t.data.global_batch,
        lr=t.lr,
        bytes_read=bytes_read,
        io_rank0=io,
    )


def epoch_line(epoch: int, epochs: int, row: dict[str, Any]) -> str:
    """The line printed after an epoch."""
    val = "" if row["val_accuracy"] is None else f" val acc {row['val_accuracy']:.4f}"
    return (
        f"epoch {epoch + 1}/{epochs}: loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f}{val} | "
        f"train {row['train_time_s']:.2f}s (data {row['data_time_s']:.2f} comm {row['comm_time_s']:.2f}) "
        f"{row['samples_per_s']:,.0f} samples/s"
    )


def finish(t: Training, epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Test, then the results of the run."""
    with t.windows.phase("test"):
        t_test = t.clock()
        test = evaluate(t.strategy, t.data, "test", t.norm, t.criterion)
        test_s = t.clock() - t_test
    return final_results(
        config=t.config,
        strategy=t.strategy.name,
        world_size=t.runtime.world_size,
        device=str(t.runtime.device),
        dataset_name=t.data.manifest.name,
        batch_sizes=t.data.batch_sizes,
        steps_per_epoch=t.data.steps,
        provenance=_provenance(t.runtime, t.strategy.name),
        epochs=epochs,
        test=test,
        test_s=test_s,
        setup_s=t.setup_s,
        phase_windows=t.windows.rows,
    )
