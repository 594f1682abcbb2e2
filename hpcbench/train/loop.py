"""The training run, top to bottom: set up, then for each epoch train / validate, then test.

Timed phases (seconds, the slowest rank's): ``setup`` (dataset, model, process group; excluded
from throughput, as MLPerf does), per epoch ``train`` = ``data`` (waiting for this rank's batch)
+ ``compute`` (forward, backward, optimiser) + ``comm`` (gradient synchronisation that did not
overlap the backward pass), ``val`` and, at the end, ``test``. Throughput = global samples
trained ÷ train time.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hpcbench import __version__
from hpcbench.train.config import TrainConfig
from hpcbench.train.data import TrainData, ensure_dataset
from hpcbench.train.metrics import Clock, Meter
from hpcbench.train.models import build_model
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies import Strategy

FAIL_AT_VARIABLE = "HPCBENCH_FAIL_AT"  # "RANK:STEP": a failure drill (see docs/training.md)


def train_step(
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    criterion: nn.Module,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One optimisation step; returns (mean loss, logits, seconds of non-overlapped communication)."""
    assert strategy.model is not None
    strategy.before_forward()
    optimizer.zero_grad(set_to_none=True)
    logits = strategy.model(x)
    loss = criterion(logits, y)
    (loss * strategy.loss_scale if strategy.loss_scale != 1.0 else loss).backward()
    comm = strategy.finish_gradients()
    optimizer.step()
    return loss.detach(), logits.detach(), comm


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


def make_schedule(config: TrainConfig, optimizer: torch.optim.Optimizer, steps_per_epoch: int):  # noqa: ANN201
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

    def __init__(self, manifest, device: torch.device) -> None:  # noqa: ANN001
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
        "job_id": os.environ.get("HPCBENCH_JOB_ID")
        or os.environ.get("SLURM_JOB_ID")
        or os.environ.get("PBS_JOBID"),
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


def run(config: TrainConfig, runtime: Runtime, strategy: Strategy, log=print) -> dict[str, Any]:  # noqa: ANN001
    """Train, validate, test; return the results (rank 0 also writes them)."""
    clock = Clock(runtime)
    t0 = clock()
    rank, world = runtime.rank, runtime.world_size
    ensure_dataset(config, rank, log)
    torch.manual_seed(config.seed)
    data = TrainData(config, rank, world)
    manifest = data.manifest
    model = build_model(config.model, tuple(manifest.shape), manifest.num_classes)
    model = strategy.setup(model, data.weight)
    optimizer = make_optimizer(config, model, data.global_batch)
    schedule = make_schedule(config, optimizer, data.steps)
    criterion = nn.CrossEntropyLoss()
    norm = Normalizer(manifest, runtime.device)
    fail_step = _fail_drill(rank)
    strategy.barrier()
    setup_s = float(strategy.all_reduce(np.array([clock() - t0]), "max")[0])
    log(
        f"hpcbench train: {strategy.name} on {world} rank(s), {runtime.device.type}, {runtime.threads} thread(s)/rank; "
        f"{config.model} on {manifest.name} ({manifest.split('train').samples} train samples, "
        f"{'x'.join(str(s) for s in manifest.shape)}); global batch {data.global_batch} "
        f"({'/'.join(map(str, data.batch_sizes))} per rank), {data.steps} steps/epoch, {config.epochs} epoch(s)"
    )
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    wanted = runtime.launch.local_world_size * runtime.threads
    if runtime.device.type == "cpu" and wanted > cores:
        log(
            f"note: {runtime.launch.local_world_size} rank(s) x {runtime.threads} thread(s) on {cores} core(s): "
            "the node is oversubscribed; communication times include waiting for descheduled ranks"
        )
    bar_mode = config.progress == "bar" or (config.progress == "auto" and sys.stderr.isatty())
    epochs: list[dict[str, Any]] = []
    totals = {"train_s": 0.0, "data_s": 0.0, "compute_s": 0.0, "comm_s": 0.0, "val_s": 0.0}
    step_count = 0
    model.train()
    for epoch in range(config.epochs):
        e0 = clock()
        index = strategy.share_index(data, epoch)
        meter = Meter(manifest.num_classes, runtime.device)
        data_s = comm_s = 0.0
        progress = None
        if bar_mode and rank == 0:
            from hpcbench.progress import Progress

            progress = Progress(data.steps, f"epoch {epoch + 1}/{config.epochs}", unit="step")
        batches = iter(data.train_batches(epoch, index))
        for step in range(data.steps):
            d0 = time.perf_counter()
            xb, yb = next(batches)
            x, y = norm(xb, yb)
            data_s += time.perf_counter() - d0
            if fail_step is not None and step_count == fail_step:
                raise RuntimeError(
                    f"failure drill: rank {rank} fails at step {step_count} ({FAIL_AT_VARIABLE})"
                )
            loss, logits, comm = train_step(strategy, optimizer, x, y, criterion)
            comm_s += comm
            schedule.step()
            meter.update(logits, y, loss)
            step_count += 1
            if progress is not None:
                progress.update(step + 1)
        train_s = clock() - e0
        if progress is not None:
            progress.close()
        io = data.io_stats()
        # the slowest rank's times; bytes summed over ranks
        times = strategy.all_reduce(np.array([train_s, data_s, comm_s]), "max")
        bytes_read = int(strategy.all_reduce(np.array([io["bytes_read"]], dtype=np.float64))[0])
        train = Meter.summarise(strategy.all_reduce(meter.vector()), manifest.num_classes)
        v0 = clock()
        validate = (epoch + 1) % config.val_every == 0 or epoch + 1 == config.epochs
        val = evaluate(strategy, data, "val", norm, criterion) if validate else None
        val_s = clock() - v0
        row = {
            "epoch": epoch + 1,
            "train_loss": train["loss"],
            "train_accuracy": train["accuracy"],
            "train_macro_f1": train["macro_f1"],
            "val_loss": val["loss"] if val else None,
            "val_accuracy": val["accuracy"] if val else None,
            "val_macro_f1": val["macro_f1"] if val else None,
            "train_time_s": times[0],
            "val_time_s": val_s,
            "data_time_s": times[1],
            "compute_time_s": max(0.0, times[0] - times[1] - times[2]),
            "comm_time_s": times[2],
            "samples_per_s": data.steps * data.global_batch / times[0],
            "lr": optimizer.param_groups[0]["lr"],
            "bytes_read": bytes_read,
            "bytes_read_rank0": io["bytes_read"],
            "files_opened_rank0": io["files_opened"],
        }
        epochs.append(row)
        for key, value in (
            ("train_s", times[0]),
            ("data_s", times[1]),
            ("comm_s", times[2]),
            ("val_s", val_s),
        ):
            totals[key] += value
        totals["compute_s"] += row["compute_time_s"]
        val_text = f" val acc {val['accuracy']:.4f}" if val else ""
        log(
            f"epoch {epoch + 1}/{config.epochs}: loss {train['loss']:.4f} acc {train['accuracy']:.4f}{val_text} | "
            f"train {times[0]:.2f}s (data {times[1]:.2f} comm {times[2]:.2f}) {row['samples_per_s']:,.0f} samples/s"
        )
    t_test = clock()
    test = evaluate(strategy, data, "test", norm, criterion)
    test_s = clock() - t_test
    results: dict[str, Any] = {
        "run": {
            "strategy": strategy.name,
            "world_size": world,
            "device": str(runtime.device),
            "model": config.model,
            "dataset": str(Path(config.data).resolve()),
            "dataset_name": manifest.name,
            "global_batch": data.global_batch,
            "batch_sizes": data.batch_sizes,
            "epochs": config.epochs,
            "steps_per_epoch": data.steps,
            "data_order": config.data_order,
        },
        "config": config.as_dict(),
        "provenance": _provenance(runtime, strategy.name),
        "phases": {**totals, "test_s": test_s, "setup_s": setup_s},
        "throughput": {
            "train_samples_per_s": config.epochs
            * data.steps
            * data.global_batch
            / totals["train_s"],
            "comm_share": totals["comm_s"] / totals["train_s"] if totals["train_s"] else 0.0,
        },
        "epochs": epochs,
        "validation": epochs[-1]["val_accuracy"],
        "test": test,
    }
    return results
