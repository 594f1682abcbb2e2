"""The scaling model: step time, throughput and efficiency of data-parallel training at N ranks,
predicted from a calibration on the user's own machine (:mod:`hpcbench.scaling.calibrate`).

Pure arithmetic on the calibration's numbers (no torch, no MPI): it runs on a login node.

**All-reduce.** Two textbook costs for ``n`` bytes over ``p`` ranks, with a latency ``α`` per
message and ``β`` seconds per byte (Thakur, Rabenseifner & Gropp, 2005):

- ring (reduce-scatter + all-gather): ``2(p−1)·α + 2(p−1)/p · n·β`` — bandwidth-optimal, what
  MPI libraries, NCCL and gloo use for large messages;
- tree / recursive doubling: ``⌈log2 p⌉ · (α + n·β)`` — latency-optimal, used for small ones.

One ``α`` and ``β`` are fitted to the calibration's timings (every message size at every rank
count measured) by least squares on the relative error, each timing explained by the algorithm
that is the faster one under the fit (re-chosen until the choice settles); a prediction takes
the faster of the two, as the libraries switch between them by message size.
With ranks on several nodes the fit's ``β`` is the slowest link's, which the ring is bound by.

**Step.** ``compute(b)`` per rank at per-rank batch ``b`` (a line through the calibrated
batches, measured with every core of a node busy), times ``max(1, ranks per node × threads ÷
cores)`` when ranks share cores; plus the communication that backward does not hide: each
gradient bucket is ready when backward has produced its share of the gradients (buckets in the
strategy's order and sizes), its all-reduce starts when it is ready and the previous one is
done, and what finishes after backward is exposed (``overlap=False``: every all-reduce after
backward); plus two small all-reduces per step (the stop flag and loss; the buffers).

**Figures.** Throughput = ranks × b ÷ step. Speedup against one rank training the same global
batch alone, efficiency = speedup ÷ ranks (strong scaling, ``global_batch``); or against one
rank at the same per-rank batch (weak scaling, ``batch_per_rank``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

SMALL_MESSAGE = 16  # bytes: the per-step agreement and similar small all-reduces


@dataclass(frozen=True)
class LinkFit:
    """The fitted latency (s) and inverse bandwidth (s/byte), and how well they fit."""

    alpha: float
    beta: float
    points: int
    rms_relative_error: float
    ring_points: int  # of the timings, how many the ring explains (the rest: the tree)


def _features(algorithm: str, n: float, p: int) -> tuple[float, float]:
    if algorithm == "ring":
        return 2.0 * (p - 1), 2.0 * (p - 1) / p * n
    steps = math.ceil(math.log2(p))
    return float(steps), steps * n


def _algorithm(alpha: float, beta: float, n: float, p: int) -> str:
    costs = {
        name: alpha * a + beta * b
        for name, (a, b) in ((k, _features(k, n, p)) for k in ("ring", "tree"))
    }
    return min(costs, key=costs.__getitem__)


def _solve(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """α, β ≥ 0 minimising Σ (α·a + β·b − 1)² over ``rows`` (features divided by the time)."""
    saa = sum(a * a for a, _ in rows)
    sab = sum(a * b for a, b in rows)
    sbb = sum(b * b for _, b in rows)
    sa, sb = sum(a for a, _ in rows), sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    if det > 1e-9 * saa * sbb:
        alpha, beta = (sa * sbb - sb * sab) / det, (sb * saa - sa * sab) / det
        if alpha >= 0 and beta >= 0:
            return alpha, beta
    candidates = [(sa / saa if saa else 0.0, 0.0), (0.0, sb / sbb if sbb else 0.0)]
    return min(candidates, key=lambda ab: sum((ab[0] * a + ab[1] * b - 1) ** 2 for a, b in rows))


def fit_allreduce(samples: Sequence[Sequence[float]]) -> LinkFit:
    """One (α, β) for ``samples`` of (ranks, bytes, seconds), ranks ≥ 2: each timing is
    explained by the algorithm that is faster under the current fit, the fit solved again on
    those features (least squares on the relative error), until the choice settles."""
    points = [(int(p), float(n), float(t)) for p, n, t in samples if p >= 2 and t > 0]
    if len(points) < 2:
        raise ValueError("the calibration has fewer than two all-reduce timings to fit")
    smallest = min(points, key=lambda x: x[1])
    largest = max(points, key=lambda x: x[1])
    alpha = smallest[2] / _features("tree", smallest[1], smallest[0])[0]
    beta = largest[2] / _features("ring", largest[1], largest[0])[1]
    chosen: list[str] = []
    for _ in range(20):
        now = [_algorithm(alpha, beta, n, p) for p, n, _ in points]
        if now == chosen:
            break
        chosen = now
        rows = []
        for (p, n, t), name in zip(points, chosen, strict=True):
            a, b = _features(name, n, p)
            rows.append((a / t, b / t))
        alpha, beta = _solve(rows)
    errors = [(allreduce_s_of(alpha, beta, n, p) / t - 1) ** 2 for p, n, t in points]
    return LinkFit(
        alpha=alpha,
        beta=beta,
        points=len(points),
        rms_relative_error=math.sqrt(sum(errors) / len(errors)),
        ring_points=chosen.count("ring"),
    )


def allreduce_s_of(alpha: float, beta: float, n: float, p: int) -> float:
    if p <= 1:
        return 0.0
    return min(alpha * a + beta * b for a, b in (_features(k, n, p) for k in ("ring", "tree")))


def allreduce_s(fit: LinkFit, n: float, p: int) -> float:
    """Predicted seconds of one all-reduce of ``n`` bytes over ``p`` ranks (0 for one rank):
    the faster of ring and tree."""
    return allreduce_s_of(fit.alpha, fit.beta, n, p)


@dataclass(frozen=True)
class Compute:
    """Per-rank compute seconds of one step: ``base + per_sample × b``; the share of it that
    is backward; measured with ``ranks_per_node`` ranks of ``threads`` threads on ``cores``."""

    base: float
    per_sample: float
    backward_share: float
    cores: int
    threads: int

    def step_s(self, batch: float, ranks_per_node: int) -> float:
        shared = max(1.0, ranks_per_node * self.threads / self.cores)
        return (self.base + self.per_sample * batch) * shared


def fit_compute(
    batches: Sequence[float],
    seconds: Sequence[float],
    backward_share: float,
    cores: int,
    threads: int,
) -> Compute:
    """A line through (batch, seconds) (through the origin with one point)."""
    if len(batches) == 1 or len(set(batches)) == 1:
        return Compute(0.0, seconds[0] / batches[0], backward_share, cores, threads)
    n = len(batches)
    mx, my = sum(batches) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in batches)
    slope = sum((x - mx) * (y - my) for x, y in zip(batches, seconds, strict=True)) / sxx
    slope = max(slope, 0.0)
    return Compute(max(0.0, my - slope * mx), slope, backward_share, cores, threads)


@dataclass(frozen=True)
class Prediction:
    ranks: int
    nodes: int
    batch_per_rank: float
    compute_s: float
    comm_exposed_s: float
    step_s: float
    samples_per_s: float
    speedup: float
    efficiency: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def exposed_comm_s(
    fits: LinkFit,
    buckets: Sequence[float],
    ranks: int,
    backward_s: float,
    overlap: bool = True,
) -> float:
    """Seconds of gradient all-reduce that backward does not hide (buckets in readiness order)."""
    total = sum(buckets)
    if ranks <= 1 or total <= 0:
        return 0.0
    if not overlap:
        return sum(allreduce_s(fits, n, ranks) for n in buckets)
    finish, produced = 0.0, 0.0
    for n in buckets:
        produced += n
        ready = backward_s * produced / total
        finish = max(finish, ready) + allreduce_s(fits, n, ranks)
    return max(0.0, finish - backward_s)


def predict(
    compute: Compute,
    fits: LinkFit,
    buckets: Sequence[float],
    ranks: int,
    ranks_per_node: int,
    *,
    global_batch: int | None = None,
    batch_per_rank: float | None = None,
    overlap: bool = True,
) -> Prediction:
    """The model's figures at ``ranks`` ranks, ``ranks_per_node`` of them per node."""
    if (global_batch is None) == (batch_per_rank is None):
        raise ValueError("give global_batch or batch_per_rank")
    b = global_batch / ranks if global_batch is not None else float(batch_per_rank or 0)
    per_node = min(ranks, ranks_per_node)
    nodes = math.ceil(ranks / per_node)
    comp = compute.step_s(b, per_node)
    backward = comp * compute.backward_share
    exposed = exposed_comm_s(fits, buckets, ranks, backward, overlap)
    fixed = 2 * allreduce_s(fits, SMALL_MESSAGE, ranks)
    step = comp + exposed + fixed
    throughput = ranks * b / step
    alone = (global_batch if global_batch is not None else b) / compute.step_s(
        global_batch if global_batch is not None else b, 1
    )
    speedup = throughput / alone
    return Prediction(
        ranks=ranks,
        nodes=nodes,
        batch_per_rank=b,
        compute_s=comp,
        comm_exposed_s=exposed + fixed,
        step_s=step,
        samples_per_s=throughput,
        speedup=speedup,
        efficiency=speedup / ranks,
    )


def bucket_sizes(parameter_bytes: Sequence[int], first_cap: int, cap: int) -> list[int]:
    """Gradient bucket sizes in the order backward fills them (parameters in reverse), as the
    mpi strategy and DDP group them: the first bucket up to ``first_cap`` bytes, then ``cap``."""
    sizes, current, limit = [], 0, first_cap
    for n in reversed(parameter_bytes):
        current += n
        if current >= limit:
            sizes.append(current)
            current, limit = 0, cap
    if current:
        sizes.append(current)
    return sizes
