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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from hpcbench import __version__
from hpcbench.data.manifest import Manifest
from hpcbench.launch import job_id, usable_cores
from hpcbench.train import checkpoint as ckpt
from hpcbench.train.accelerate import (
    batch_layout,
    check_compile,
    compiled,
    make_deterministic,
    resume_note,
    to_channels_last,
)
from hpcbench.train.breakdown import StepBreakdown, per_step_ms
from hpcbench.train.config import TrainConfig
from hpcbench.train.data import TrainData, ensure_dataset, wait_for_dataset
from hpcbench.train.drills import Drill, act, drill_for
from hpcbench.train.failures import agree, diverged, stop_together
from hpcbench.train.finite import Verdicts, nonfinite_flag
from hpcbench.train.metrics import Clock, Meter, PhaseWindows
from hpcbench.train.models import build_model, load_weights
from hpcbench.train.precision import Precision
from hpcbench.train.prefetch import Prefetcher, staged
from hpcbench.train.replicas import Replicas, device_kind, nudge
from hpcbench.train.results import (
    EpochTimes,
    epoch_row,
    final_results,
    prepare_run_dir,
    run_dir_of,
)
from hpcbench.train.runtime import Runtime
from hpcbench.train.stopping import Stopped, StopRequest, Watchdog, mark
from hpcbench.train.strategies import Strategy
from hpcbench.train.tensorboard import NullBoard, check_board, open_board

if TYPE_CHECKING:
    from hpcbench.progress import Progress

Log = Callable[[str], None]
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
    with timed.part("allreduce_wait"):
        comm = strategy.finish_gradients()
    with timed.part("finite_check"):
        precision.unscale(optimizer)
        flag = nonfinite_flag(strategy.gradients())
    with timed.part("optimizer"):
        precision.step(optimizer, flag)
    return loss.detach(), logits.detach(), comm, flag


def make_optimizer(
    config: TrainConfig, model: nn.Module, global_batch: int
) -> torch.optim.Optimizer:
    """SGD or AdamW, fused (one kernel for the whole update: on one CPU thread 1.7× faster than
    the per-tensor loops for SGD with momentum on ResNet-18, 5× for AdamW) where every parameter
    is a float on the CPU or a GPU."""
    lr = config.lr * (
        global_batch / config.lr_reference_batch if config.lr_scaling == "linear" else 1.0
    )
    params = list(model.parameters())
    fused = all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64)
        for p in params
    )
    if config.optimizer == "sgd":
        sgd = torch.optim.SGD(
            params,
            lr=lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
            fused=fused or None,
        )
        if config.momentum:
            # Zero momentum from the start: the same update as SGD's first step (0 x m + g = g),
            # and a first step skipped for non-finite gradients (found_inf; fp16's overflows)
            # cannot leave the fused optimiser's uninitialised buffers behind.
            for p in params:
                sgd.state[p]["momentum_buffer"] = torch.zeros_like(p)
        return sgd
    return torch.optim.AdamW(
        params, lr=lr, weight_decay=config.weight_decay or 0.01, fused=fused or None
    )


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
    """Stored pixels (uint8 or float16) -> normalised float32 on the device, in two halves:
    :meth:`stage` moves a batch to the device as stored (on a GPU through pinned memory, a
    non-blocking copy on a side stream: it may run in the prefetch thread), :meth:`normalize`
    makes it float32 on the compute stream."""

    def __init__(
        self,
        manifest: Manifest,
        device: torch.device,
        layout: torch.memory_format = torch.contiguous_format,
    ) -> None:
        scale, shift = manifest.normalization()
        self.layout = layout  # of a 4-d batch (--channels-last)
        self.scale, self.shift = (
            torch.from_numpy(scale).to(device),
            torch.from_numpy(shift).to(device),
        )
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def stage(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, Any]:
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        if self.stream is None:
            return xt.to(self.device), yt.to(self.device), None
        xt, yt = xt.pin_memory(), yt.pin_memory()
        with torch.cuda.stream(self.stream):
            xd = xt.to(self.device, non_blocking=True)
            yd = yt.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        return xd, yd, copied

    def normalize(
        self, xd: torch.Tensor, yd: torch.Tensor, copied: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if copied is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(copied)
            xd.record_stream(current)  # the side stream's memory is used here
            yd.record_stream(current)
        if xd.dim() == 4 and self.layout != torch.contiguous_format:
            x = xd.to(torch.float32, memory_format=self.layout)
        else:
            x = xd.float()
        return x.mul_(self.scale).add_(self.shift), yd

    def __call__(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self.normalize(*self.stage(x, y))


def evaluate(
    strategy: Strategy,
    data: TrainData,
    split: str,
    norm: Normalizer,
    criterion: nn.Module,
    precision: Precision = FP32,
) -> dict[str, Any] | None:
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
        model = build_model(config.model, shape, k)
        if config.weights is not None:
            said = load_weights(model, config.weights, k)
            if rank == 0:
                log(said)
        check_compile(config, runtime.device)
        return data, to_channels_last(model, config)

    return agree(strategy, build)


def _diverged_step(
    epoch: int, step: int, world: int, loss: float, lr: float, rank: int
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
    precision: Precision  # --precision: autocast and fp16 loss scaling
    drill: Drill | None  # this rank's failure drill ($HPCBENCH_FAIL_AT)
    stop: StopRequest  # the stop signals this process received
    watchdog: Watchdog
    checkpoint_dir: Path
    fingerprint: dict[str, Any]
    replicas: Replicas  # ranks on different kinds of device: re-synchronised from rank 0
    setup_s: float = 0.0  # the slowest rank's set-up seconds
    steps_done: int = 0  # training steps so far, over all epochs
    board: NullBoard = field(default_factory=NullBoard)  # rank 0's --tensorboard log
    start_epoch: int = 0  # where this run starts (after --resume)
    start_step: int = 0
    epochs: list[dict[str, Any]] = field(default_factory=list)  # the rows so far
    losses: list[Any] = field(default_factory=list)  # each step's global mean loss so far
    request_checked: float = 0.0  # when rank 0 last looked for the job's stop request
    partial: dict[str, Any] | None = None  # a resumed epoch's meter and seconds so far
    checkpoint_s: list[float] = field(default_factory=list)  # each checkpoint's seconds
    resumed_from: str | None = None
    verdicts: Verdicts = field(default_factory=Verdicts)  # steps' finite flags not yet read

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


def run(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log = print,
    run_dir: tuple[Path, str] | None = None,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Train, validate, test; return the results (:func:`hpcbench.train.results.final_results`).
    ``run_dir`` (rank 0: the directory and the option that named it) is checked for writing
    during set-up. With ``--resume`` the run continues from a checkpoint; a stop signal
    (``stop``) ends it at the next step boundary with a checkpoint (:class:`Stopped`)."""
    t = start(config, runtime, strategy, log, run_dir, stop or StopRequest())
    try:
        announce(t)
        t.model.train()
        for epoch in range(t.start_epoch, config.epochs):
            row = run_epoch(t, epoch)
            loss_values(t)  # one host read per epoch, not per step
            t.epochs.append(row)
            t.board.epoch(row)
            log(epoch_line(epoch, config.epochs, row))
            save_checkpoint(t, epoch + 1, 0)
        results = finish(t, t.epochs)
        t.board.finish(results)
        return results
    finally:
        t.watchdog.at(None, t.steps_done)
        t.board.close()


def _results_dir(config: TrainConfig) -> Path:
    return run_dir_of(config)[0]


def checkpoint_dir_of(config: TrainConfig, run_dir: Path) -> Path:
    return (
        Path(config.checkpoint_dir).expanduser().resolve()
        if config.checkpoint_dir
        else run_dir / "checkpoints"
    )


def start(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log,
    run_dir: tuple[Path, str] | None,
    stop: StopRequest,
) -> Training:
    """Set-up, timed (the slowest rank's time) and windowed: the agreed checks, then the model
    placed by the strategy, the optimiser and its schedule, then the checkpoint to resume from
    (found and loaded on every rank; a bad one stops every rank together)."""
    make_deterministic(config)
    clock = Clock(runtime)
    windows = PhaseWindows(clock)
    with windows.phase("setup"):
        t0 = clock()
        data, model = set_up(config, runtime, strategy, log, run_dir)
        model = strategy.setup(model, data.weight)
        strategy.model = compiled(strategy.model, config)
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
            norm=Normalizer(data.manifest, runtime.device, batch_layout(config)),
            precision=Precision(config.precision, runtime.device),
            drill=drill_for(runtime.rank),
            stop=stop,
            watchdog=Watchdog(config.hang_timeout, runtime.rank),
            checkpoint_dir=strategy.broadcast_object(
                checkpoint_dir_of(config, run_dir[0] if run_dir else _results_dir(config))
                if runtime.rank == 0
                else None
            ),
            fingerprint=ckpt.fingerprint(config, data.global_batch, data.manifest.dataset_id),
            replicas=Replicas.of(
                strategy,
                device_kind(runtime.device, drill_for(runtime.rank)),
                config.resync_every,
            ),
        )
        if config.step_breakdown:
            strategy.breakdown = StepBreakdown(runtime.synchronize)
        agree(strategy, lambda: resume(t))
        strategy.barrier()
        t.setup_s = float(strategy.all_reduce(np.array([clock() - t0]), "max")[0])
    if runtime.rank == 0:
        mark("ready", {"steps_done": t.steps_done})
        stop.read_request_file()
    t.board = open_board(config, runtime.rank, run_dir[0] if run_dir else None)
    return t


def resume(t: Training) -> None:
    """Continue from the checkpoint ``--resume`` names, if any: weights, optimiser, schedule,
    random generators, position and the progress so far."""

    def warn(message: str) -> None:
        if t.runtime.rank == 0:
            print(message, file=sys.stderr, flush=True)

    found = ckpt.find(t.config.resume, t.checkpoint_dir, warn, t.fingerprint, t.runtime.world_size)
    if found is None:
        if t.config.resume == "auto" and t.checkpoint_dir.exists():  # silent on a first run
            t.log(f"no usable checkpoint in {t.checkpoint_dir}: starting afresh")
        return
    ckpt.restore(found, t.strategy, t.optimizer, t.schedule, t.runtime.rank)
    t.precision.load_state_dict(found.payload.get("amp", {}))
    pos, progress = found.payload["position"], found.payload["progress"]
    t.start_epoch, t.start_step, t.steps_done = pos["epoch"], pos["step"], pos["steps_done"]
    t.epochs = list(progress["epochs"])
    t.losses = list(progress["losses"])
    t.partial = progress["partial"] if t.start_step else None
    t.checkpoint_s = list(progress["checkpoint_s"])
    t.replicas.load(progress.get("replicas"))
    t.resumed_from = str(found.path)
    note = resume_note(t.runtime.device, t.config.deterministic, progress.get("deterministic"))
    if note is not None:
        warn(note)
    t.log(
        f"resuming from {found.path}: epoch {t.start_epoch + 1}, step {t.start_step} "
        f"({t.steps_done} steps done, written by {pos['world_size']} rank(s))"
    )


def save_checkpoint(
    t: Training, epoch: int, step: int, meter: Meter | None = None, times: list[float] | None = None
) -> Path | None:
    """Write the checkpoint of position (epoch, step) -- every rank calls this at the same
    step: the replicas' checksums are compared, every rank's generators gathered, rank 0
    writes. Returns the file on rank 0."""
    if not t.config.checkpoint:
        return None
    c0 = time.perf_counter()
    strategy, rank = t.strategy, t.runtime.rank
    assert strategy.eval_model is not None
    resync(t)
    mine = ckpt.parameter_checksum(strategy.eval_model)
    low, high = strategy.all_reduce(np.array([-mine, mine]), "max")
    if -low != high:
        raise RuntimeError(
            f"the model replicas differ between ranks at step {t.steps_done} (parameter "
            f"checksums {-float(low)!r} and {float(high)!r}): no checkpoint written"
        )
    ranks = strategy.gather_object(
        {**ckpt.rank_state(strategy.eval_model), "strategy": strategy.rank_state()}
    )
    partial = None
    if meter is not None and times is not None:
        partial = {
            "meter": torch.from_numpy(strategy.all_reduce(meter.vector())),
            "times": torch.from_numpy(strategy.all_reduce(np.array(times), "max")),
        }
    path = None
    if rank == 0:
        payload = ckpt.payload(
            fp=t.fingerprint,
            strategy=strategy,
            optimizer=t.optimizer,
            schedule=t.schedule,
            position={
                "epoch": epoch,
                "step": step,
                "steps_done": t.steps_done,
                "world_size": t.runtime.world_size,
                "steps_per_epoch": t.data.steps,
            },
            ranks=ranks,
            progress={
                "epochs": t.epochs,
                "losses": loss_values(t),
                "partial": partial,
                "checkpoint_s": t.checkpoint_s,
                "replicas": t.replicas.state(),
                "deterministic": t.config.deterministic,
            },
            dataset=ckpt.dataset_description(t.data.manifest),
            amp=t.precision.state_dict(),
        )
        try:
            path = ckpt.write(t.checkpoint_dir, t.steps_done, payload, t.config.checkpoint_keep)
        except OSError as err:
            failed = OSError(
                err.errno,
                f"cannot write the checkpoint of step {t.steps_done} in {t.checkpoint_dir} "
                f"({err.strerror}); the previous checkpoints are intact",
            )
            raise failed from None
    strategy.barrier()
    t.checkpoint_s.append(time.perf_counter() - c0)
    return path


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
    details = t.strategy.describe()
    if details:
        t.log(f"{t.strategy.name}: {details}")
    if t.replicas.mixed:
        t.log(f"replicas: {t.replicas.describe()}")
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
    seconds), from the resumed step on. Stops every rank at a step whose synchronised gradients
    are not finite, and at the step after a stop signal (:class:`Stopped`, after a checkpoint).
    Checkpoint time is not training time."""
    e0 = t.clock()
    index = t.strategy.share_index(t.data, epoch)
    meter = Meter(t.data.manifest.num_classes, t.runtime.device)
    first = t.start_step if epoch == t.start_epoch else 0
    if first and t.partial is not None and t.runtime.rank == 0:  # the resumed epoch's sums so far
        saved = t.partial["meter"].numpy()
        meter.loss_sum += float(saved[0])
        meter.confusion += torch.from_numpy(saved[1:].astype(np.int64)).to(meter.confusion.device)
    before = t.partial["times"].numpy() if first and t.partial is not None else np.zeros(3)
    progress = _progress_bar(t, epoch)
    read = iter(t.data.train_batches(epoch, index if index is None else index[first:]))
    if t.data.sharded is not None:  # the shard order has no index: pass the steps done
        for _ in range(first):
            next(read)
    depth = prefetch_depth(t.config, t.runtime)
    batches = Prefetcher(read, t.norm.stage, depth) if depth else staged(read, t.norm.stage)
    try:
        return _train_steps(t, epoch, first, batches, meter, e0, before, progress)
    finally:
        if isinstance(batches, Prefetcher):
            batches.close()


def prefetch_depth(config: TrainConfig, runtime: Runtime) -> int:
    """Batches read ahead: ``--prefetch``, else 2 on a GPU and none on a CPU (whose cores
    already run the compute threads)."""
    if config.prefetch is not None:
        return config.prefetch
    return 2 if runtime.device.type == "cuda" else 0


def _train_steps(
    t: Training,
    epoch: int,
    first: int,
    batches: Iterator[Any],
    meter: Meter,
    e0: float,
    before: np.ndarray,
    progress: Progress | None,
) -> tuple[Meter, float, float, float]:
    """The steps themselves, from step ``first`` on, over the staged ``batches``."""
    world = t.runtime.world_size
    data_s = comm_s = paused_s = 0.0
    every = t.config.checkpoint_every
    weight = t.data.weight
    timed = t.strategy.breakdown
    timed.reset()
    for step in range(first, t.data.steps):
        t.watchdog.at("batch", t.steps_done)
        if t.drill is not None:
            act(t.drill, t.steps_done)
        d0 = time.perf_counter()
        with timed.part("data"):
            x, y = t.norm.normalize(*next(batches))
        data_s += time.perf_counter() - d0
        t.watchdog.at("step", t.steps_done)
        loss, logits, comm, flag = train_step(
            t.strategy, t.optimizer, x, y, t.criterion, t.precision
        )
        if t.precision.diverges:
            t.verdicts.add(flag, epoch, step, loss, t.lr)
            if world == 1 and t.verdicts.maybe_bad():
                check_verdicts(t)
        nudge(t.strategy.eval_model, t.drill, t.steps_done)
        comm_s += comm
        with timed.part("optimizer"):
            t.schedule.step()
        t.steps_done += 1
        if t.replicas.due(t.steps_done):
            resync(t)
        with timed.part("agreement"):
            meter.update(logits, y, loss)
            stop, global_loss = agree_after_step(t, loss, weight)
        timed.step_done()
        t.losses.append(global_loss)
        if progress is not None:
            progress.update(step + 1)
        last = step + 1 == t.data.steps
        if stop or (every and t.steps_done % every == 0 and not last):
            check_verdicts(t)
            comm_s += t.strategy.settled_comm_s()
            p0 = time.perf_counter()
            times = [t.clock() - e0 - paused_s + before[0], data_s + before[1], comm_s + before[2]]
            path = save_checkpoint(t, epoch, step + 1, meter, times)
            paused_s += time.perf_counter() - p0
            if stop:
                t.watchdog.at(None, t.steps_done)
                if progress is not None:
                    progress.close()
                raise stopped(t, epoch, step + 1, path)
    t.watchdog.at(None, t.steps_done)
    check_verdicts(t)
    comm_s += t.strategy.settled_comm_s()
    train_s = t.clock() - e0 - paused_s + before[0]
    if progress is not None:
        progress.close()
    return meter, train_s, data_s + before[1], comm_s + before[2]


def resync(t: Training) -> None:
    """Ranks on different kinds of device take rank 0's state (:mod:`.replicas`)."""
    assert t.strategy.eval_model is not None
    t.replicas.resync(t.strategy, t.strategy.eval_model, t.optimizer, t.steps_done)


def check_verdicts(t: Training) -> None:
    """Stop at the first step since the last look whose gradients were not finite (one host
    read; every rank holds the same flags, from the same synchronised gradients)."""
    bad = t.verdicts.first_bad()
    if bad is not None:
        world, rank = t.runtime.world_size, t.runtime.rank
        raise _diverged_step(bad.epoch, bad.step, world, bad.loss, bad.lr, rank)


def agree_after_step(t: Training, loss: torch.Tensor, weight: float) -> tuple[bool, Any]:
    """Whether any rank received a stop signal, and the step's global mean loss: one all-reduce
    of two numbers (a host read that the multi-rank strategies' step has already paid for; the
    step's non-finite flags are read with it). One rank needs no collective, and its loss stays
    a device number until it is saved (no host synchronisation per step)."""
    if t.runtime.rank == 0 and not t.stop.requested:
        now = time.monotonic()
        if now - t.request_checked >= 1.0:  # a file look-up a second at most
            t.request_checked = now
            t.stop.read_request_file()  # launchers that do not forward signals (MPICH's Hydra)
    if t.runtime.world_size == 1:
        return t.stop.requested, loss
    vector = np.array([1.0 if t.stop.requested else 0.0, float(loss) * weight])
    check_verdicts(t)
    flag, total = t.strategy.all_reduce(vector)
    return flag > 0, float(total)


def loss_values(t: Training) -> list[float]:
    """The per-step losses as numbers (one rank keeps them on the device until now)."""
    t.losses = [float(x) for x in t.losses]
    return t.losses


def stopped(t: Training, epoch: int, step: int, path: Path | None) -> BaseException:
    """The stop every rank raises together; rank 0 says why, where the checkpoint is, and
    leaves the ``stopped`` mark for the job script."""
    if t.runtime.rank != 0:
        return stop_together(Stopped("stopped with the other ranks"))
    why = t.stop.describe() if t.stop.requested else "another rank's stop signal"
    where = f"checkpoint {path}" if path else "no checkpoint (--no-checkpoint)"
    mark(
        "stopped",
        {"signal": why, "checkpoint": str(path) if path else None, "steps_done": t.steps_done},
    )
    return stop_together(
        Stopped(
            f"stopped by {why} at epoch {epoch + 1}, step {step} ({t.steps_done} steps done): "
            f"{where}; run again with --resume auto to continue"
        )
    )


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
    timed = t.strategy.breakdown
    breakdown = per_step_ms(t.strategy.all_reduce(timed.vector())) if timed.enabled else None
    if not math.isfinite(train["loss"]):  # the same all-reduced number on every rank
        raise _diverged_epoch(epoch, t.runtime.world_size, train["loss"], t.runtime.rank)
    v0 = t.clock()
    val = None
    if (epoch + 1) % t.config.val_every == 0 or epoch + 1 == t.config.epochs:
        resync(t)
        with t.windows.phase("val"):
            val = evaluate(t.strategy, t.data, "val", t.norm, t.criterion, t.precision)
    if val is not None and val.get("unlabeled"):
        val = None
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
        step_breakdown_ms=breakdown,
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
    resync(t)
    with t.windows.phase("test"):
        t_test = t.clock()
        test = evaluate(t.strategy, t.data, "test", t.norm, t.criterion, t.precision)
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
        checkpoints=checkpoint_record(t),
        step_losses=loss_values(t),
        replicas=t.replicas.record(),
        precision=t.precision.record(),
    )


def checkpoint_record(t: Training) -> dict[str, Any]:
    """What ``metrics.json`` says of checkpoints: where, how many, how long each took (the
    lead a scheduler's warning signal needs), and what this run resumed from."""
    times = t.checkpoint_s
    return {
        "enabled": t.config.checkpoint,
        "directory": str(t.checkpoint_dir),
        "written": len(times),
        "max_s": max(times) if times else None,
        "mean_s": sum(times) / len(times) if times else None,
        "resumed_from": t.resumed_from,
    }
