"""Starting a training run: the set-up every rank agrees on.

:func:`start` runs the checks the user's input can fail (run directory, TensorBoard, dataset,
batch split, model: agreed by every rank before any collective of the model,
:func:`hpcbench.train.failures.agree`), places the model with the strategy, builds the optimiser
and its schedule, the run's hooks, and resumes from a checkpoint when asked. What it makes is a
:class:`~.training.Training`, the state every epoch of :mod:`.loop` reads and advances.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from hpcbench.placement.checks import placement_warnings
from hpcbench.placement.record import placement_record
from hpcbench.train import checkpoint_file as ckpt
from hpcbench.train import checkpointing
from hpcbench.train.accelerate import (
    batch_layout,
    check_compile,
    compiled,
    make_deterministic,
    resume_note,
    to_channels_last,
)
from hpcbench.train.breakdown import StepBreakdown
from hpcbench.train.config import TrainConfig
from hpcbench.train.data import TrainData, ensure_dataset, wait_for_dataset
from hpcbench.train.documents import prepare_run_dir
from hpcbench.train.drills import drill_for
from hpcbench.train.failures import agree
from hpcbench.train.hooks import RunHooks
from hpcbench.train.live import open_live
from hpcbench.train.metrics import Clock, PhaseWindows
from hpcbench.train.models import build_model, load_weights
from hpcbench.train.normalize import Normalizer
from hpcbench.train.optim import make_optimizer, make_schedule
from hpcbench.train.precision import Precision
from hpcbench.train.replicas import Replicas, device_kind
from hpcbench.train.run_state import Learner, Position
from hpcbench.train.runtime import Runtime
from hpcbench.train.stopping import StopRequest, mark
from hpcbench.train.strategies.base import Strategy
from hpcbench.train.tensorboard import check_board, open_board
from hpcbench.train.training import Log, Training


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
        if rank == 0 and run_dir is None:  # a caller's mistake, agreed on like any set-up error
            raise ValueError("rank 0 starts a run only with its run directory (run_dir_of)")
        if rank == 0 and run_dir is not None:
            prepare_run_dir(*run_dir)
        if rank == 0:
            check_board(config, run_dir[0] if run_dir else None)
        ensure_dataset(config, rank, log)

    agree(strategy, place)
    wait_for_dataset(config)

    def build() -> tuple[TrainData, nn.Module]:
        torch.manual_seed(config.batch.seed)
        data = TrainData(config, rank, world)
        shape, k = tuple(data.manifest.shape), data.manifest.num_classes
        model = build_model(config.data.model, shape, k)
        if config.data.weights is not None:
            said = load_weights(model, config.data.weights, k)
            if rank == 0:
                log(said)
        check_compile(config, runtime.device)
        return data, to_channels_last(model, config)

    return agree(strategy, build)


def checkpoint_dir_of(config: TrainConfig, run_dir: Path) -> Path:
    return (
        Path(config.checkpoints.checkpoint_dir).expanduser().resolve()
        if config.checkpoints.checkpoint_dir
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
        t = _training(config, runtime, strategy, log, clock, windows, data, model, run_dir, stop)
        if config.output.step_breakdown:
            strategy.breakdown = StepBreakdown(runtime.synchronize)
        t.hooks.attach(strategy.model)
        agree(strategy, lambda: resume(t))
        strategy.barrier()
        t.setup_s = float(strategy.all_reduce(np.array([clock() - t0]), "max")[0])
    if runtime.rank == 0:
        mark("ready", {"steps_done": t.position.steps_done})
        stop.read_request_file()
    run_path = run_dir[0] if run_dir else None
    t.hooks.board = open_board(config, runtime.rank, run_path)
    t.hooks.live = open_live(
        config,
        runtime,
        strategy,
        steps_per_epoch=data.steps,
        steps_done=t.position.steps_done,
        log=log,
        run_path=strategy.broadcast_object(run_path),
    )
    return t


def _training(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    log: Log,
    clock: Clock,
    windows: PhaseWindows,
    data: TrainData,
    model: nn.Module,
    run_dir: tuple[Path, str] | None,
    stop: StopRequest,
) -> Training:
    """The run's state for the placed ``model``: its learner, its position at the start, its
    hooks."""
    optimizer = make_optimizer(config, model, data.global_batch)
    learner = Learner(
        model=model,
        optimizer=optimizer,
        schedule=make_schedule(config, optimizer, data.steps),
        criterion=nn.CrossEntropyLoss(),
        norm=Normalizer(data.manifest, runtime.device, batch_layout(config)),
        precision=Precision(config.parallelism.precision, runtime.device),
    )
    position = Position()
    drill = drill_for(runtime.rank)
    hooks = RunHooks(
        config,
        runtime,
        strategy,
        learner,
        position,
        steps_per_epoch=data.steps,
        drill=drill,
        stop=stop,
        replicas=Replicas.of(
            strategy,
            device_kind(runtime.device, drill_for(runtime.rank)),
            config.parallelism.resync_every,
        ),
    )
    return Training(
        config=config,
        runtime=runtime,
        strategy=strategy,
        data=data,
        learner=learner,
        position=position,
        hooks=hooks,
        log=log,
        clock=clock,
        windows=windows,
        checkpoint_dir=strategy.broadcast_object(
            checkpoint_dir_of(config, run_dir[0]) if run_dir is not None else None
        ),
        fingerprint=ckpt.fingerprint(config, data.global_batch, data.manifest.dataset_id),
    )


def resume(t: Training) -> None:
    """Continue from the checkpoint ``--resume`` names, if any: weights, optimiser, schedule,
    random generators (:func:`.checkpointing.load`), then the position and the progress so far."""
    found = checkpointing.load(
        t.config.checkpoints.resume,
        t.checkpoint_dir,
        t.fingerprint,
        t.strategy,
        t.learner.optimizer,
        t.learner.schedule,
        t.learner.precision,
        t.log,
    )
    if found is None:
        return
    progress, p = found.progress, t.position
    p.start_epoch, p.start_step, p.steps_done = found.epoch, found.step, found.steps_done
    p.epochs = list(progress["epochs"])
    p.losses = list(progress["losses"])
    p.partial = progress["partial"] if p.start_step else None
    p.checkpoint_s = list(progress["checkpoint_s"])
    t.hooks.replicas.load(progress.get("replicas"))
    p.resumed_from = str(found.path)
    note = resume_note(
        t.runtime.device, t.config.checkpoints.deterministic, progress.get("deterministic")
    )
    if note is not None:
        checkpointing.warn_on(t.runtime.rank)(note)
    t.log(
        f"resuming from {found.path}: epoch {p.start_epoch + 1}, step {p.start_step} "
        f"({p.steps_done} steps done, written by {found.world_size} rank(s))"
    )


def announce(t: Training) -> None:
    """The banner, and the ranks' placement (gathered on rank 0, with a warning line for each
    problem :func:`~hpcbench.placement.checks.placement_warnings` finds)."""
    config, runtime, data, manifest = t.config, t.runtime, t.data, t.data.manifest
    t.log(
        f"hpcbench train: {t.strategy.name} on {runtime.world_size} rank(s), {runtime.device.type}, {runtime.threads} thread(s)/rank; "
        f"{config.data.model} on {manifest.name} ({manifest.split('train').samples} train samples, "
        f"{'x'.join(str(s) for s in manifest.shape)}); global batch {data.global_batch} "
        f"({'/'.join(map(str, data.batch_sizes))} per rank), {data.steps} steps/epoch, {config.batch.epochs} epoch(s)"
    )
    details = t.strategy.describe()
    if details:
        t.log(f"{t.strategy.name}: {details}")
    if (replicas := t.hooks.replicas).mixed:
        t.log(f"replicas: {replicas.describe()}")
    # where every rank runs, gathered on rank 0: a rank sharing cores, far from its GPU or with
    # more threads than cores is one warning line (and the run's provenance keeps the records)
    placed = t.strategy.gather_object(placement_record(runtime.launch))
    if placed is not None:
        t.placement = [p for p in placed if p is not None]
        for line in placement_warnings(t.placement):
            t.log(f"warning: {line}")
