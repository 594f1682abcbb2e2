"""A run's documents, their layout and their one writer: ``metrics.json`` (everything, in the
layout of :data:`METRICS_FORMAT`), ``epochs.csv`` (one row per epoch), ``steps.csv`` (each
step's loss) and ``energy.json``, each written to a temporary name and renamed. hpcbench's
trainer (:mod:`hpcbench.train.documents` builds its results) and the measurement API for any
training (:mod:`hpcbench.measure`) both write through :func:`write_results`, and the results
reader (:mod:`hpcbench.bench.results_reader`) reads what they wrote. No torch here.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically, write_json_atomically

# One record per epoch: (key, also a column of epochs.csv, what it holds).
EPOCH_FIELDS: tuple[tuple[str, bool, str], ...] = (
    ("epoch", True, "1, 2, …"),
    ("train_loss", True, "mean training loss over every rank's samples"),
    ("train_accuracy", True, "training accuracy"),
    ("train_macro_f1", True, "training macro-F1"),
    ("val_loss", True, "validation loss (empty when not validated this epoch)"),
    ("val_accuracy", True, "validation accuracy"),
    ("val_macro_f1", True, "validation macro-F1"),
    ("train_time_s", True, "the epoch's training seconds, the slowest rank's"),
    ("val_time_s", True, "validation seconds (rank 0's)"),
    ("data_time_s", True, "seconds waiting for batches, the slowest rank's"),
    ("compute_time_s", True, "train - data - comm"),
    ("comm_time_s", True, "communication not overlapped with backward, the slowest rank's"),
    ("samples_per_s", True, "global samples trained / train_time_s"),
    ("lr", True, "learning rate after the epoch's last step"),
    ("bytes_read", True, "bytes the data reader read, summed over ranks"),
    ("bytes_read_rank0", False, "bytes rank 0 read"),
    ("files_opened_rank0", False, "files rank 0 opened"),
    (
        "step_breakdown_ms",
        False,
        "with --step-breakdown: milliseconds per step of each part of the step, the mean over "
        "ranks (hpcbench.train.breakdown.PARTS); else None",
    ),
)
CSV_COLUMNS = [key for key, in_csv, _ in EPOCH_FIELDS if in_csv]
#: the layout of metrics.json: a reader refuses another one, and takes a document without it as
#: this one's first form
METRICS_FORMAT = "hpcbench-metrics/1"
STEP_LOSSES = "step_losses"  # in the results dict; written to steps.csv, not metrics.json


def epoch_columns(epochs: list[dict[str, Any]]) -> list[str]:
    """The columns of ``epochs.csv``: :data:`CSV_COLUMNS`, then the epoch records' own values
    (a measured program's ``m.epoch(any_name=…)``) in the order they first appear."""
    known = {key for key, _, _ in EPOCH_FIELDS}
    extra = dict.fromkeys(k for row in epochs for k in row if k not in known)
    return [*CSV_COLUMNS, *extra]


def write_results(run_dir: Path, results: dict[str, Any]) -> tuple[Path, Path]:
    """``metrics.json``, ``epochs.csv`` and ``steps.csv`` in ``run_dir``; the paths of the first
    two."""
    run_dir.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    columns = epoch_columns(results["epochs"])
    w = csv.DictWriter(out, columns, extrasaction="ignore")
    w.writeheader()
    for row in results["epochs"]:
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    csv_path = run_dir / "epochs.csv"
    write_atomically(csv_path, out.getvalue())
    losses = results.get(STEP_LOSSES, [])
    write_atomically(
        run_dir / "steps.csv",
        "step,loss\n" + "".join(f"{i + 1},{loss!r}\n" for i, loss in enumerate(losses)),
    )
    document = {"format": METRICS_FORMAT}
    document.update((k, v) for k, v in results.items() if k != STEP_LOSSES)
    return write_json_atomically(run_dir / "metrics.json", document), csv_path


def write_energy(run_dir: Path, document: dict[str, Any]) -> Path:
    """``energy.json`` (format hpcbench-energy/1, :mod:`hpcbench.energy.sampler`) in ``run_dir``."""
    return write_json_atomically(run_dir / "energy.json", document)
