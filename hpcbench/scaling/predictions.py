"""A calibration file (:mod:`.calibrate`) read back, and the model's predictions from it as rows
and as the table ``hpcbench predict-scaling`` prints."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.jsonfile import JsonFileError, parse_json
from hpcbench.scaling.model import (
    Compute,
    LinkFit,
    Prediction,
    bucket_sizes,
    fit_allreduce,
    fit_compute,
    predict,
)
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

FIRST_BUCKET = 1 << 20  # bytes: the mpi strategy's and DDP's first bucket
STRATEGY_BACKENDS = {name: k.backends for name, k in STRATEGY_KINDS.items() if k.backends}


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


NOT_OURS = "not a calibration written by python -m hpcbench.scaling?"
MAX_BYTES = 64 << 20  # a calibration file is a few KiB
MAX_COUNT = 10_000_000  # ranks, nodes, cores, threads, batch: beyond any machine
MAX_SIZE = 1 << 50  # bytes of one gradient tensor or one all-reduce


def load(path: Path) -> Calibration:
    """The calibration at ``path``, every field checked (CalibrationError: one line naming the
    file and the key); the fits must give finite figures."""
    from hpcbench.files import read_regular

    def refuse(constant: str) -> float:
        raise ValueError(f"{constant} is not a number a calibration holds")

    try:
        record = parse_json(read_regular(path, MAX_BYTES), path, parse_constant=refuse)
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such calibration file") from None
    except JsonFileError as err:
        raise CalibrationError(f"{path}: not a calibration file ({err.why})") from None
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or err
        raise CalibrationError(f"{path}: not a calibration file ({why})") from None
    check = _Checker(Path(path))
    check.record(record)
    machine = record["machine"]
    try:
        compute = fit_compute(
            record["compute"]["batches"],
            record["compute"]["step_s"],
            record["compute"]["backward_share"],
            machine["cores_per_node"],
            machine["threads_per_rank"],
        )
        fits = {}
        for backend, rows in record["allreduce"].items():
            if rows:
                try:
                    fits[backend] = fit_allreduce(rows)
                except ValueError as err:
                    raise CalibrationError(f"{path}: allreduce.{backend}: {err}") from None
    except (ArithmeticError, ValueError) as err:
        raise CalibrationError(f"{path}: its timings cannot be fitted ({err})") from None
    if not fits:
        raise CalibrationError(f"{path}: holds no all-reduce timings")
    for backend, fit in fits.items():
        if not all(math.isfinite(v) for v in (fit.alpha, fit.beta, fit.rms_relative_error)):
            raise CalibrationError(f"{path}: allreduce.{backend}: its timings fit no finite line")
    if not (math.isfinite(compute.base) and math.isfinite(compute.per_sample)):
        raise CalibrationError(f"{path}: compute: its timings fit no finite line")
    return Calibration(Path(path), record, compute, fits)


class _Checker:
    """Checks a calibration record field by field; the first problem is one CalibrationError
    naming the key (``compute.step_s[1]``) and what it should be."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, value: Any, should: str) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise CalibrationError(f"{self.path}: {key} is {shown}: {should} ({NOT_OURS})")

    def table(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, value, "expected a table of fields")
        return value

    def field(self, table: dict[str, Any], prefix: str, name: str) -> Any:
        if name not in table:
            raise CalibrationError(f"{self.path}: {prefix}{name} is missing ({NOT_OURS})")
        return table[name]

    def count(self, key: str, value: Any, low: int = 1, high: int = MAX_COUNT) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(key, value, f"expected a whole number from {low} to {high:,}")
        return value

    def number(self, key: str, value: Any, low: float, high: float, above: bool = False) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not (value > low if above else value >= low):
            self.fail(key, value, f"expected a finite number {'>' if above else '>='} {low:g}")
        if value > high:
            self.fail(key, value, f"expected a number up to {high:g}")
        return float(value)

    def items(self, key: str, value: Any, at_least: int = 1) -> list[Any]:
        if not isinstance(value, list) or len(value) < at_least:
            self.fail(key, value, f"expected a list of at least {at_least}")
        return value

    def record(self, record: Any) -> None:
        top = self.table("the file", record)
        machine = self.table("machine", self.field(top, "", "machine"))
        for name in ("nodes", "ranks_per_node", "cores_per_node", "threads_per_rank"):
            self.count(f"machine.{name}", self.field(machine, "machine.", name))
        if not isinstance(self.field(machine, "machine.", "device"), str):
            self.fail("machine.device", machine["device"], "expected a device name (cpu, cuda)")
        if not isinstance(self.field(top, "", "model"), str):
            self.fail("model", top["model"], "expected a model name")
        sizes = self.items("parameter_bytes", self.field(top, "", "parameter_bytes"))
        for i, n in enumerate(sizes):
            self.count(f"parameter_bytes[{i}]", n, 1, MAX_SIZE)
        compute = self.table("compute", self.field(top, "", "compute"))
        batches = self.items("compute.batches", self.field(compute, "compute.", "batches"))
        seconds = self.items("compute.step_s", self.field(compute, "compute.", "step_s"))
        if len(seconds) != len(batches):
            self.fail("compute.step_s", seconds, f"expected {len(batches)} times, one a batch")
        for i, (b, s) in enumerate(zip(batches, seconds, strict=True)):
            self.number(f"compute.batches[{i}]", b, 0, MAX_COUNT, above=True)
            self.number(f"compute.step_s[{i}]", s, 0, 1e9, above=True)
        share = self.field(compute, "compute.", "backward_share")
        self.number("compute.backward_share", share, 0, 1)
        allreduce = self.table("allreduce", self.field(top, "", "allreduce"))
        for backend, rows in allreduce.items():
            for i, row in enumerate(self.items(f"allreduce.{backend}", rows, 0)):
                key = f"allreduce.{backend}[{i}]"
                if not isinstance(row, list) or len(row) != 3:
                    self.fail(key, row, "expected [ranks, bytes, seconds]")
                self.count(f"{key}[0]", row[0])
                self.number(f"{key}[1]", row[1], 0, MAX_SIZE)
                self.number(f"{key}[2]", row[2], 0, 1e9, above=True)


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
    rows = [
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
    for row in rows:
        if not all(math.isfinite(v) for v in row.as_dict().values()):
            raise CalibrationError(
                f"{cal.path}: its figures give no finite prediction at {row.ranks} ranks"
            )
    return rows


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
