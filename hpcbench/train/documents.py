"""Rank 0's results of hpcbench's trainer: what its ``metrics.json`` and ``epochs.csv`` hold,
written (through :mod:`hpcbench.run_documents`, the one writer of a run's documents) only when a
run completes; the run directory is checked during set-up; plus the summary printed at the end.

``metrics.json`` (:func:`final_results`), documented in docs/training.md:

- ``format``: :data:`METRICS_FORMAT` (a metrics.json written before it existed has none);
- ``run``: strategy, world_size, device, model, dataset (absolute path), dataset_name,
  global_batch, batch_sizes (per rank), epochs, steps_per_epoch, data_order;
- ``config``: every option (:class:`hpcbench.train.config.TrainConfig`);
- ``provenance``: versions, host, launcher, job id, node list, threads, backend, MPI, git;
- ``phases``: seconds of train_s, data_s, compute_s, comm_s, val_s (summed over epochs), test_s,
  setup_s;
- ``phase_windows``: rank 0's wall-clock bounds of each phase, ``{"phase", "start", "end"}``
  in unix seconds (device synchronised at each bound): setup, then per epoch train and (when
  validated) val, then test; in time order;
- ``throughput``: train_samples_per_s, comm_share (of the train time);
- ``epochs``: one record per epoch, :data:`EPOCH_FIELDS` (the slowest rank's times);
- ``validation``: the last epoch's validation accuracy; ``test``: loss, accuracy, macro_f1,
  samples (None without a test split).

- ``checkpoints``: enabled, directory, written (this run), max_s and mean_s (seconds per
  checkpoint, over the resumed runs too: what a scheduler's warning signal must leave), and
  resumed_from (the checkpoint this run continued, or None).
- ``precision``: name (fp32, bf16, fp16) and, under fp16, skipped_steps (overflowed steps the
  loss scaler skipped since this process started or resumed) and loss_scale (at the end);
- ``replicas``: device_kinds (of the ranks), mixed, resync_every, resyncs, max_relative_drift
  and the last drifts (step, relative_drift): ranks on different kinds of device re-synchronised
  from rank 0 (:mod:`hpcbench.train.replicas`).

``epochs.csv``: the epoch records' fields marked for it, :data:`CSV_COLUMNS`.

``steps.csv``: each training step's loss, the mean over the global batch (``step,loss``; kept
across resumes: an interrupted and resumed run has the same rows as an uninterrupted one).

``energy.json`` (``--energy on``): the nodes' energy records, docs/energy.md.

Each is typed beside its one writer, :mod:`hpcbench.run_documents`: :class:`Metrics` (and its
parts), :class:`EpochRow`.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpcbench.run_documents import (
    EPOCH_FIELDS,
    STEP_LOSSES,
    Checkpoints,
    EpochRow,
    Metrics,
    Phases,
    PhaseWindow,
    Precision,
    Provenance,
    Replicas,
    TestResult,
)
from hpcbench.train.config import ConfigError, TrainConfig


@dataclass(frozen=True)
class EpochTimes:
    """An epoch's phase seconds: train, data and comm the slowest rank's; val this rank's."""

    train: float
    data: float
    comm: float
    val: float


def epoch_row(
    *,
    epoch: int,
    train: dict[str, float],
    val: dict[str, float] | None,
    times: EpochTimes,
    samples: int,
    lr: float,
    bytes_read: int,
    io_rank0: dict[str, int],
    step_breakdown_ms: dict[str, float] | None = None,
) -> EpochRow:
    """One epoch's record (:data:`EPOCH_FIELDS`, in that order). ``train``/``val``: the
    summaries of :class:`hpcbench.train.metrics.Meter` (``val`` None when not validated);
    ``samples``: global samples trained in the epoch; ``io_rank0``: this rank's read counters."""
    row: EpochRow = {
        "epoch": epoch,
        "train_loss": train["loss"],
        "train_accuracy": train["accuracy"],
        "train_macro_f1": train["macro_f1"],
        "val_loss": val["loss"] if val else None,
        "val_accuracy": val["accuracy"] if val else None,
        "val_macro_f1": val["macro_f1"] if val else None,
        "train_time_s": times.train,
        "val_time_s": times.val,
        "data_time_s": times.data,
        "compute_time_s": max(0.0, times.train - times.data - times.comm),
        "comm_time_s": times.comm,
        "samples_per_s": samples / times.train,
        "lr": lr,
        "bytes_read": bytes_read,
        "bytes_read_rank0": io_rank0["bytes_read"],
        "files_opened_rank0": io_rank0["files_opened"],
        "step_breakdown_ms": step_breakdown_ms,
    }
    assert list(row) == [key for key, _, _ in EPOCH_FIELDS]
    return row


def _total(epochs: list[EpochRow], key: str) -> float:
    return sum((row[key] for row in epochs), 0.0)


def _phases(epochs: list[EpochRow], test_s: float, setup_s: float) -> Phases:
    """The run's seconds per phase: the epochs' train, data, compute, comm and val times summed,
    the test's and the set-up's."""
    return {
        "train_s": _total(epochs, "train_time_s"),
        "data_s": _total(epochs, "data_time_s"),
        "compute_s": _total(epochs, "compute_time_s"),
        "comm_s": _total(epochs, "comm_time_s"),
        "val_s": _total(epochs, "val_time_s"),
        "test_s": test_s,
        "setup_s": setup_s,
    }


def final_results(
    *,
    config: TrainConfig,
    strategy: str,
    world_size: int,
    device: str,
    dataset_name: str,
    batch_sizes: list[int],
    classes: int | None = None,
    steps_per_epoch: int,
    provenance: Provenance,
    epochs: list[EpochRow],
    test: TestResult | None,
    test_s: float,
    setup_s: float,
    phase_windows: list[PhaseWindow],
    checkpoints: Checkpoints | None = None,
    step_losses: list[float] | None = None,
    replicas: Replicas | None = None,
    precision: Precision | None = None,
) -> Metrics:
    """What ``metrics.json`` holds (the layout in this module's docstring); ``step_losses``
    go to ``steps.csv`` instead."""
    global_batch = sum(batch_sizes)
    phases = _phases(epochs, test_s, setup_s)
    train_s = phases["train_s"]
    return {
        "run": {
            "strategy": strategy,
            "world_size": world_size,
            "device": device,
            "model": config.data.model,
            "dataset": str(Path(config.data.data).resolve()),
            "dataset_name": dataset_name,
            "classes": classes,
            "global_batch": global_batch,
            "batch_sizes": batch_sizes,
            "epochs": config.batch.epochs,
            "steps_per_epoch": steps_per_epoch,
            "data_order": config.data.data_order,
        },
        "config": config.as_dict(),
        "provenance": provenance,
        "phases": phases,
        "phase_windows": phase_windows,
        "throughput": {
            "train_samples_per_s": config.batch.epochs * steps_per_epoch * global_batch / train_s,
            "comm_share": phases["comm_s"] / train_s if train_s else 0.0,
        },
        "epochs": epochs,
        "validation": epochs[-1]["val_accuracy"],
        "test": test,
        "checkpoints": checkpoints,
        "replicas": replicas,
        "precision": precision,
        STEP_LOSSES: step_losses or [],
    }


def default_run_dir() -> str:
    return os.environ.get("HPCBENCH_RUN_DIR") or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}"


def run_dir_of(config: TrainConfig) -> tuple[Path, str]:
    """Where rank 0 writes, and the option (or variable) that said so, for error messages."""
    if config.output.output_dir:
        return Path(config.output.output_dir).resolve(), "--output-dir"
    env = "$HPCBENCH_RUN_DIR" if os.environ.get("HPCBENCH_RUN_DIR") else "the default run directory"
    return Path(default_run_dir()).resolve(), env


def prepare_run_dir(run_dir: Path, option: str = "--output-dir") -> None:
    """Create ``run_dir`` and prove that it takes new files (one temporary file, created and
    removed), before any training; :class:`ConfigError` naming ``option`` otherwise."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{option} {run_dir}: is a file, not a directory; give a directory")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hpcbench-write-test-", dir=run_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(
            f"{option} {run_dir}: cannot write there ({err.strerror or err}); "
            "give a writable directory"
        ) from None


def summary(results: Metrics, paths: tuple[Path, Path]) -> str:
    t, ph = results["test"], results["phases"]
    run = results["run"]
    lines = [
        f"hpcbench train: {run['strategy']} on {run['world_size']} rank(s) ({run['device']}), "
        f"model {run['model']}, global batch {run['global_batch']}, {run['epochs']} epoch(s)",
        f"  test: {t['samples']} unlabeled sample(s), no accuracy (classify them with "
        "python -m hpcbench.predict)"
        if t and t.get("unlabeled")
        else f"  test accuracy {t['accuracy']:.4f}  macro-F1 {t['macro_f1']:.4f}  loss {t['loss']:.4f}"
        if t
        else "  (no test split)",
        f"  train {ph['train_s']:.2f}s = data {ph['data_s']:.2f}s + compute {ph['compute_s']:.2f}s + "
        f"communication {ph['comm_s']:.2f}s; validation {ph['val_s']:.2f}s; test {ph['test_s']:.2f}s; "
        f"set-up {ph['setup_s']:.2f}s (excluded)",
        f"  throughput {results['throughput']['train_samples_per_s']:,.0f} samples/s (train phase)",
        f"  results: {paths[0]} and {paths[1]}",
    ]
    return "\n".join(lines)
