"""A run's documents, their layout and their one writer: ``metrics.json`` (everything, in the
layout of :data:`METRICS_FORMAT`), ``epochs.csv`` (one row per epoch), ``steps.csv`` (each
step's loss) and ``energy.json``, each written to a temporary name and renamed. hpcbench's
trainer (:mod:`hpcbench.train.documents` builds its results) and the measurement API for any
training (:mod:`hpcbench.measure`) both write through :func:`write_results`, and the results
reader (:mod:`hpcbench.bench.reading.results_reader`) reads what they wrote. No torch here.

The types of ``metrics.json`` are here, beside its writer: :class:`Metrics` (the whole
document, format :data:`METRICS_FORMAT`) and its parts :class:`RunInfo`, :class:`Phases`,
:class:`PhaseWindow`, :class:`Throughput`, :class:`EpochRow` (also a row of ``epochs.csv``),
:class:`TestResult`, :class:`Checkpoints`, :class:`Precision`, :class:`Replicas`,
:class:`RankTimes` and :class:`Provenance`. Read one through
:func:`hpcbench.bench.reading.results_reader.read_metrics`. ``energy.json`` is typed here too,
:class:`EnergyDocument` (its :class:`EnergyNode` and their :class:`EnergyDevice`).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from hpcbench.atomic import write_atomically, write_json_atomically
from hpcbench.jsonfile import JSONObject, JSONValue

if TYPE_CHECKING:
    from typing_extensions import NotRequired

    from hpcbench.placement.record import PlacementRecord

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


class RunInfo(TypedDict):
    """``metrics.json``'s ``run``: what ran, on what, with which batches."""

    strategy: str
    world_size: int
    device: str
    model: str
    dataset: str | None
    dataset_name: str | None
    classes: int | None
    global_batch: int
    batch_sizes: list[int]
    epochs: int
    steps_per_epoch: int
    data_order: str | None


class Phases(TypedDict):
    """``phases``: seconds per phase (summed over epochs; a measured run's own phases are kept
    too, as ``<name>_s``); data, comm and compute None where a measured program did not time
    them."""

    train_s: float
    data_s: float | None
    compute_s: float | None
    comm_s: float | None
    val_s: float
    test_s: float
    setup_s: float


class PhaseWindow(TypedDict):
    """One of ``phase_windows``: a phase's wall-clock bounds on rank 0, unix seconds."""

    phase: str
    start: float
    end: float


class Throughput(TypedDict):
    """``throughput``: training samples per second and the share of it spent communicating."""

    train_samples_per_s: float | None
    comm_share: float | None


class EpochRow(TypedDict):
    """One of ``epochs`` (:data:`EPOCH_FIELDS`, in that order; a measured program's own values
    follow); the fields marked for it are a row of ``epochs.csv``."""

    epoch: int
    train_loss: float | None
    train_accuracy: float | None
    train_macro_f1: float | None
    val_loss: float | None
    val_accuracy: float | None
    val_macro_f1: float | None
    train_time_s: float | None
    val_time_s: float | None
    data_time_s: float | None
    compute_time_s: float | None
    comm_time_s: float | None
    samples_per_s: float | None
    lr: float | None
    bytes_read: int | None
    bytes_read_rank0: int | None
    files_opened_rank0: int | None
    step_breakdown_ms: dict[str, float] | None


class TestResult(TypedDict, total=False):
    """``test``: the test split's loss, accuracy, macro-F1 and samples (``unlabeled``: a test
    split without labels, samples only)."""

    loss: float
    accuracy: float
    macro_f1: float
    samples: int
    unlabeled: bool


class Checkpoints(TypedDict):
    """``checkpoints``: whether written, where, how many, seconds per checkpoint, resumed from."""

    enabled: bool
    directory: str
    written: int
    max_s: float | None
    mean_s: float | None
    resumed_from: str | None


class Precision(TypedDict):
    """``precision``: fp32, bf16 or fp16; under fp16 the loss scaler's skipped steps and scale."""

    name: str
    skipped_steps: NotRequired[int]
    loss_scale: NotRequired[float]


class Drift(TypedDict):
    step: int
    relative_drift: float


class Replicas(TypedDict):
    """``replicas``: ranks on different kinds of device, re-synchronised from rank 0."""

    device_kinds: list[str]
    mixed: bool
    resync_every: int | None
    resyncs: int
    max_relative_drift: float | None
    drifts: list[Drift]


class Provenance(TypedDict, total=False):
    """``provenance``: versions, host, launcher, job and nodes; the trainer adds threads, backend,
    MPI, git and a user model's source, a measured run the program's command line."""

    hpcbench: str
    torch: str | None
    python: str
    host: str
    launcher: str
    job_id: str | None
    nodelist: str | None
    container: JSONValue
    threads: int
    backend: str | None
    mpi: str
    git: str | None
    model_source: JSONObject
    program: list[str]
    placement: list[PlacementRecord]  # every rank's place, as it ran
    placement_warnings: list[str]


class RankTimes(TypedDict):
    """One of a measured run's ``ranks``: that rank's own times and counts."""

    rank: int
    host: str | None
    phases: dict[str, float]
    steps: int | None
    samples: int | None
    elapsed_s: float | None


class Metrics(TypedDict):
    """``metrics.json``, as :func:`write_results` writes it (``format`` absent from a document
    of this layout's first form; ``step_losses`` only in the results handed to the writer, which
    puts them in ``steps.csv``); ``final``, ``ranks``, ``measured_by`` and ``warnings`` only
    in a measured run's (:mod:`hpcbench.measure`)."""

    format: NotRequired[str]
    run: RunInfo
    config: JSONObject
    provenance: Provenance
    phases: Phases
    phase_windows: list[PhaseWindow]
    throughput: Throughput
    epochs: list[EpochRow]
    validation: float | None
    test: TestResult | None
    checkpoints: Checkpoints | None
    replicas: Replicas | None
    precision: Precision | None
    step_losses: NotRequired[list[float]]
    final: NotRequired[JSONObject]
    ranks: NotRequired[list[RankTimes]]
    measured_by: NotRequired[str]
    warnings: NotRequired[list[str]]


class EnergyDevice(TypedDict):
    """One device of a node in ``energy.json``: how it was read (or why not), its samples, and
    its joules per phase and in all (None where the samples do not cover them)."""

    name: str
    kind: str
    method: str
    reason: str
    used: bool
    interval_s: float
    samples: list[list[float]]  # [unix seconds, cumulative joules]
    phases: dict[str, float | None]
    total_j: float | None


class EnergyNode(TypedDict):
    """One host of ``energy.json``."""

    host: str
    devices: list[EnergyDevice]


class EnergyDocument(TypedDict):
    """``energy.json`` (format ``hpcbench-energy/1``, :mod:`hpcbench.energy.sampler`)."""

    format: str
    interval_s: float
    nodes: list[EnergyNode]


def epoch_columns(epochs: list[EpochRow]) -> list[str]:
    """The columns of ``epochs.csv``: :data:`CSV_COLUMNS`, then the epoch records' own values
    (a measured program's ``m.epoch(any_name=…)``) in the order they first appear."""
    known = {key for key, _, _ in EPOCH_FIELDS}
    extra = dict.fromkeys(k for row in epochs for k in row if k not in known)
    return [*CSV_COLUMNS, *extra]


def write_results(run_dir: Path, results: Metrics) -> tuple[Path, Path]:
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


def write_energy(run_dir: Path, document: EnergyDocument) -> Path:
    """``energy.json`` (format hpcbench-energy/1, :mod:`hpcbench.energy.sampler`) in ``run_dir``."""
    return write_json_atomically(run_dir / "energy.json", document)
