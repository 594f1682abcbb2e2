"""Rank 0's documents of a measured run, in the layout hpcbench's trainer writes
(:mod:`hpcbench.run_documents`): the ranks' records combined as the trainer combines its own
(a phase's time is the slowest rank's, samples are summed over ranks, values are rank 0's), so
that the results reader, the report, ``compare``, ``history`` and ``check`` read them unchanged:
the ranks' :class:`~hpcbench.measure.rank_records.RankRecord` in, a
:class:`~hpcbench.run_documents.Metrics` out.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench import __version__
from hpcbench.measure.values import plain
from hpcbench.placement.checks import placement_warnings
from hpcbench.run_documents import (
    EPOCH_FIELDS,
    EpochRow,
    Metrics,
    Phases,
    Provenance,
    RankTimes,
    TestResult,
    write_energy,
    write_results,
)
from hpcbench.this_rank import MPI_LAUNCHERS, LaunchInfo, container, job_id, node_list

if TYPE_CHECKING:
    from hpcbench.measure.rank_records import EpochRecord, RankRecord, RunMeta
    from hpcbench.placement.record import PlacementRecord


@dataclass(frozen=True)
class RunFacts:
    """What rank 0 knows of the measured run beside the ranks' records: how the user named it
    (model, dataset, strategy, device, config), its place, where it writes, and whether energy
    was sampled (and how often)."""

    meta: RunMeta
    launch: LaunchInfo
    run_dir: Path
    energy: bool
    energy_interval: float


#: the phases the report knows (the others are kept too, as ``<name>_s``)
KNOWN_PHASES = ("setup", "train", "val", "test")
#: what ``final()`` values fill of the trainer's ``test`` record
TEST_VALUES = {"accuracy": "test_accuracy", "loss": "test_loss", "macro_f1": "test_macro_f1"}


def write_documents(m: RunFacts, records: list[RankRecord]) -> Path | None:
    """``metrics.json`` and ``epochs.csv`` (and ``energy.json`` when sampled) in ``m``'s run
    directory: the path of ``metrics.json``."""
    changed: list[str] = []  # what could not be kept as JSON (a last guard: said, never lost)
    metrics = plain(metrics_document(m, records), changed.append, "metrics.json")
    nodes = [r["energy_node"] for r in records if r.get("energy_node")]
    if m.energy:
        from hpcbench.energy.sampler import energy_document

        energy = energy_document(nodes, m.energy_interval, records[0]["windows"])
        write_energy(m.run_dir, plain(energy, changed.append, "energy.json"))
    metrics["warnings"].extend(changed)
    for line in metrics["provenance"].get("placement_warnings", []):
        print(f"hpcbench.measure: warning: {line}", file=sys.stderr, flush=True)
    return write_results(m.run_dir, metrics)[0]


def _slowest(records: list[RankRecord], get: Any) -> float:
    return max((float(get(r) or 0.0) for r in records), default=0.0)


def phase_seconds(records: list[RankRecord], warn: list[str]) -> Phases:
    """Each phase's seconds, the slowest rank's; ``train`` where no phase was named so: the run's
    time outside the other known phases (said in ``warn``)."""
    names = dict.fromkeys(n for r in records for n in r["totals"])
    seconds: Phases = {  # and the program's own phases, as <name>_s
        f"{n}_s": _slowest(records, lambda r, n=n: r["totals"].get(n)) for n in names
    }
    for name in KNOWN_PHASES:
        seconds.setdefault(f"{name}_s", 0.0)
    if not seconds["train_s"]:
        others = sum(float(seconds[f"{n}_s"] or 0.0) for n in ("setup", "val", "test"))
        seconds["train_s"] = max(_slowest(records, lambda r: r["elapsed_s"]) - others, 1e-9)
        warn.append("no train phase timed: the run's time outside set-up, val and test counted")
    for name in ("data", "comm"):  # only where the program timed them (never a guessed 0)
        seconds.setdefault(f"{name}_s", None)
    data, comm = seconds["data_s"], seconds["comm_s"]
    seconds["compute_s"] = (
        max(0.0, float(seconds["train_s"] or 0.0) - (data or 0.0) - (comm or 0.0))
        if data is not None or comm is not None
        else None
    )
    return seconds


def epoch_rows(records: list[RankRecord]) -> list[EpochRow]:
    """One row per epoch rank 0 recorded (:data:`~hpcbench.run_documents.EPOCH_FIELDS` and the
    program's own values); times the slowest rank's, samples summed over the ranks."""
    rows = []
    for i, mine in enumerate(records[0]["epochs"]):
        same = [r["epochs"][i] for r in records if len(r["epochs"]) > i]

        def slowest(phase: str, same: list[EpochRecord] = same) -> float | None:
            if not any(phase in e["seconds"] for e in same):
                return None
            return max(float(e["seconds"].get(phase, 0.0)) for e in same)

        values = dict(mine["values"])
        values.setdefault("train_loss", values.pop("loss", None))
        values.setdefault("train_accuracy", values.pop("accuracy", None))
        train, data, comm = slowest("train"), slowest("data"), slowest("comm")
        known = not any(e.get("unknown_samples") for e in same)
        samples = sum(int(e["samples"]) for e in same) if known else None
        row: EpochRow = dict.fromkeys(k for k, _, _ in EPOCH_FIELDS)
        row.update(
            epoch=i + 1,
            train_time_s=train,
            val_time_s=slowest("val"),
            data_time_s=data,
            comm_time_s=comm,
            compute_time_s=max(0.0, train - (data or 0.0) - (comm or 0.0))
            if train is not None and (data is not None or comm is not None)
            else None,
            samples_per_s=samples / train if train and samples is not None else None,
        )
        row.update((k, v) for k, v in values.items() if v is not None or k not in row)
        rows.append(row)
    return rows


def metrics_document(m: RunFacts, records: list[RankRecord]) -> Metrics:
    """What ``metrics.json`` holds for a measured run (docs/measure.md)."""
    launch = m.launch
    warn = [f"rank {r['rank']}: {w}" for r in records for w in r["warnings"]]
    phases = phase_seconds(records, warn)
    epochs = epoch_rows(records)
    first = records[0]
    batch_sizes = [int(r["first_batch"] or 0) for r in records]
    count = len(epochs) or 1
    steps_per_epoch = int(first["steps"]) // count
    unknown = sum(int(r.get("unknown_samples") or 0) for r in records)
    samples = sum(int(r["samples"]) for r in records) if not unknown else None
    if unknown:
        warn.append(f"{unknown} step(s) of unknown samples (a count refused): the throughput "
                    "is null")  # fmt: skip
    train_s = float(phases["train_s"] or 0.0)
    finals = first["finals"]
    test: TestResult = {k: finals[v] for k, v in TEST_VALUES.items() if v in finals}
    if finals.get("test_samples") is not None:
        test["samples"] = int(finals["test_samples"])
    return {
        "run": {
            "strategy": m.meta["strategy"] or _strategy(launch.launcher, launch.world_size),
            "world_size": launch.world_size,
            "device": m.meta["device"] or _device(),
            "model": m.meta["model"] or "unknown",
            "dataset": m.meta["dataset"],
            "dataset_name": m.meta["dataset"],
            "classes": None,
            "global_batch": sum(batch_sizes),
            "batch_sizes": batch_sizes,
            "epochs": len(epochs),
            "steps_per_epoch": steps_per_epoch,
            "data_order": None,
        },
        "config": m.meta["config"],
        "provenance": _provenance(launch, [r["placement"] for r in records if r.get("placement")]),
        "phases": phases,
        "phase_windows": first["windows"],
        "throughput": {
            "train_samples_per_s": samples / train_s if train_s and samples is not None else None,
            "comm_share": (phases["comm_s"] or 0.0) / train_s if phases["comm_s"] else None,
        },
        "epochs": epochs,
        "validation": epochs[-1].get("val_accuracy") if epochs else None,
        "test": test or None,
        "final": finals,
        "checkpoints": None,
        "replicas": None,
        "precision": None,
        "ranks": [_rank_times(r) for r in records],
        "measured_by": "hpcbench.measure",
        "warnings": warn,
    }


def _rank_times(record: RankRecord) -> RankTimes:
    """One rank's own times and counts (the phases above are the slowest rank's)."""
    return {
        "rank": record["rank"],
        "host": record.get("host"),
        "phases": {f"{k}_s": v for k, v in record["totals"].items()},
        "steps": record.get("steps"),
        "samples": None if record.get("unknown_samples") else record.get("samples"),
        "elapsed_s": record.get("elapsed_s"),
    }


def _device() -> str:
    """The kind of device the program computed on, as far as can be told without a question
    to the device: cuda when it started CUDA, cpu when it has torch, else unknown."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "unknown"
    try:
        return "cuda" if torch.cuda.is_initialized() else "cpu"
    except Exception:
        return "unknown"


def _strategy(launcher: str, world: int) -> str:
    """The strategy a launch implies, as the trainer's ``auto`` chooses it."""
    if world == 1:
        return "single"
    return "mpi" if launcher in MPI_LAUNCHERS else "ddp"


def _provenance(launch: LaunchInfo, placement: list[PlacementRecord]) -> Provenance:
    torch = sys.modules.get("torch")
    placed: Provenance = (
        {"placement": placement, "placement_warnings": placement_warnings(placement)}
        if placement
        else {}
    )
    return {
        **placed,
        "hpcbench": __version__,
        "torch": getattr(torch, "__version__", None),
        "python": platform.python_version(),
        "host": platform.node(),
        "launcher": launch.launcher,
        "job_id": job_id(),
        "nodelist": node_list(),
        "container": container(),
        "program": [*sys.argv][:64],
    }
