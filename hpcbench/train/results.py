"""Rank 0's results: ``metrics.json`` (everything) and ``epochs.csv`` (one row per epoch), both
written to a temporary name and renamed; plus the summary printed at the end of a run."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.data.manifest import write_json_atomically

CSV_COLUMNS = [
    "epoch",
    "train_loss",
    "train_accuracy",
    "train_macro_f1",
    "val_loss",
    "val_accuracy",
    "val_macro_f1",
    "train_time_s",
    "val_time_s",
    "data_time_s",
    "compute_time_s",
    "comm_time_s",
    "samples_per_s",
    "lr",
    "bytes_read",
]


def write_results(run_dir: Path, results: dict[str, Any]) -> tuple[Path, Path]:
    run_dir.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    w = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for row in results["epochs"]:
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    csv_path = run_dir / "epochs.csv"
    write_atomically(csv_path, out.getvalue())
    return write_json_atomically(run_dir / "metrics.json", results), csv_path


def summary(results: dict[str, Any], paths: tuple[Path, Path]) -> str:
    t, ph = results["test"], results["phases"]
    run = results["run"]
    lines = [
        f"hpcbench train: {run['strategy']} on {run['world_size']} rank(s) ({run['device']}), "
        f"model {run['model']}, global batch {run['global_batch']}, {run['epochs']} epoch(s)",
        f"  test accuracy {t['accuracy']:.4f}  macro-F1 {t['macro_f1']:.4f}  loss {t['loss']:.4f}"
        if t
        else "  (no test split)",
        f"  train {ph['train_s']:.2f}s = data {ph['data_s']:.2f}s + compute {ph['compute_s']:.2f}s + "
        f"communication {ph['comm_s']:.2f}s; validation {ph['val_s']:.2f}s; test {ph['test_s']:.2f}s; "
        f"set-up {ph['setup_s']:.2f}s (excluded)",
        f"  throughput {results['throughput']['train_samples_per_s']:,.0f} samples/s (train phase)",
        f"  results: {paths[0]} and {paths[1]}",
    ]
    return "\n".join(lines)
