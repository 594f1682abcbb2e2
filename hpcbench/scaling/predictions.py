"""A calibration file (:mod:`.calibrate`) read back, and the model's predictions from it as rows
and as the table ``hpcbench predict-scaling`` prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.scaling.model import (
    Compute,
    LinkFit,
    Prediction,
    bucket_sizes,
    fit_allreduce,
    fit_compute,
    predict,
)

FIRST_BUCKET = 1 << 20  # bytes: the mpi strategy's and DDP's first bucket
STRATEGY_BACKENDS = {"mpi": ("mpi",), "ddp": ("nccl", "gloo")}


class CalibrationError(ValueError):
    """A calibration file that cannot be used (one line naming it)."""


@dataclass
class Calibration:
    path: Path
    record: dict[str, Any]
    compute: Compute
    fits: dict[str, LinkFit]  # backend -> its all-reduce fit

    @property
    def machine(self) -> dict[str, Any]:
        return self.record["machine"]

    def backend_of(self, strategy: str) -> str | None:
        for backend in STRATEGY_BACKENDS[strategy]:
            if backend in self.fits:
                return backend
        return None

    def buckets(self, bucket_mb: float = 25.0) -> list[int]:
        return bucket_sizes(self.record["parameter_bytes"], FIRST_BUCKET, int(bucket_mb * 2**20))


def load(path: Path) -> Calibration:
    try:
        record = json.loads(Path(path).read_text())
        machine = record["machine"]
        compute = fit_compute(
            record["compute"]["batches"],
            record["compute"]["step_s"],
            record["compute"]["backward_share"],
            machine["cores_per_node"],
            machine["threads_per_rank"],
        )
        fits = {b: fit_allreduce(rows) for b, rows in record["allreduce"].items() if rows}
        if not all(int(n) > 0 for n in record["parameter_bytes"]):
            raise ValueError("parameter_bytes must be sizes > 0")
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such calibration file") from None
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as err:
        raise CalibrationError(
            f"{path}: not a calibration written by python -m hpcbench.scaling ({err})"
        ) from None
    if not fits:
        raise CalibrationError(f"{path}: holds no all-reduce timings")
    return Calibration(Path(path), record, compute, fits)


def communication_hides(cal: Calibration, backend: str, ranks_per_node: int) -> bool:
    """Whether an all-reduce can run while backward computes. On GPUs it can (NCCL's kernels,
    or the host, do it beside the stream). On CPUs it is CPU work: MPI libraries progress a
    non-blocking collective only inside the rank's own MPI calls (no progress thread by
    default), so the rank's core does every copy and sum itself, overlapped or not; gloo has
    threads of its own, which find a free core only when the ranks leave one."""
    m = cal.machine
    if m["device"] != "cpu":
        return True
    if backend == "mpi":
        return False
    return ranks_per_node * m["threads_per_rank"] < m["cores_per_node"]


def predictions(
    cal: Calibration,
    strategy: str,
    ranks: list[int],
    ranks_per_node: int,
    *,
    global_batch: int | None = None,
    batch_per_rank: float | None = None,
    overlap: bool = True,
    bucket_mb: float = 25.0,
) -> list[Prediction]:
    """The model's rows for ``strategy`` at each of ``ranks``. ``overlap``: buckets start
    during backward, as the strategies do by default (False: ``--no-overlap``); their time is
    counted as hidden only where :func:`communication_hides` says it can be."""
    backend = cal.backend_of(strategy)
    if backend is None:
        raise CalibrationError(
            f"{cal.path}: no all-reduce timings for {strategy} "
            f"({' or '.join(STRATEGY_BACKENDS[strategy])}); calibrate with --backends"
        )
    hides = overlap and communication_hides(cal, backend, ranks_per_node)
    return [
        predict(
            cal.compute,
            cal.fits[backend],
            cal.buckets(bucket_mb),
            n,
            ranks_per_node,
            global_batch=global_batch,
            batch_per_rank=batch_per_rank,
            overlap=hides,
        )
        for n in ranks
    ]


def describe(cal: Calibration) -> list[str]:
    """What the calibration measured and what the fits say, a few lines."""
    m, c = cal.machine, cal.compute
    lines = [
        f"calibration {cal.path}: {cal.record['model']} ({sum(cal.record['parameter_bytes']) / 2**20:.1f} "
        f"MiB of gradients) on {m['nodes']} node(s) x {m['ranks_per_node']} rank(s), "
        f"{m['cores_per_node']} core(s)/node, {m['threads_per_rank']} thread(s)/rank, {m['device']}",
        f"  compute per rank: {c.base * 1000:.2f} ms + {c.per_sample * 1000:.3f} ms/sample "
        f"(backward {c.backward_share:.0%})",
    ]
    for backend, f in cal.fits.items():
        lines.append(
            f"  {backend} all-reduce: latency {f.alpha * 1e6:.1f} us, "
            f"{1 / f.beta / 1e9 if f.beta else float('inf'):.2f} GB/s per link "
            f"({f.points} timings, {f.ring_points} of them ring-like, the rest tree-like; "
            f"rms error {f.rms_relative_error:.0%})"
        )
    if m["nodes"] == 1:
        lines.append(
            "  note: calibrated on one node: the links between nodes were not measured, so "
            "predictions beyond one node assume the node's own bandwidth (optimistic)"
        )
    return lines


def table(rows: list[Prediction], strategy: str) -> list[str]:
    out = [
        f"{'ranks':>6} {'nodes':>5} {'batch/rank':>10} {'compute ms':>10} {'comm ms':>8} "
        f"{'step ms':>8} {'samples/s':>10} {'speedup':>8} {'efficiency':>10}   ({strategy})"
    ]
    for r in rows:
        out.append(
            f"{r.ranks:>6} {r.nodes:>5} {r.batch_per_rank:>10.1f} {r.compute_s * 1000:>10.1f} "
            f"{r.comm_exposed_s * 1000:>8.1f} {r.step_s * 1000:>8.1f} {r.samples_per_s:>10.1f} "
            f"{r.speedup:>8.2f} {r.efficiency:>10.2f}"
        )
    return out
