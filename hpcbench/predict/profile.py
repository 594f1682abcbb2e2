"""Calibration for ``--roles auto``: each stage timed per item on this hardware, and each link's
transfer timed between two ranks.

Rank 0 reads, decodes and predicts the first ``--calibration-items`` images in units of
``--batch-size`` (the predictor warmed up by one forward pass first, with the torch threads a
predictor rank will use), while the other ranks sleep; a stage's cost per image is that of the
median unit (a unit slowed by another process on the node does not skew the plan). Then ranks 0 and 1 time a ping-pong of one
unit of each link's size (raw bytes, prepared pixels, probabilities): a unit's transfer is the
fastest of three round trips less that of an empty message. Packing a unit (one copy) is counted
with its transfer. The result is a :class:`hpcbench.predict.plan.Profile`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hpcbench.predict import stages
from hpcbench.predict.inputs import Items
from hpcbench.predict.model import Classifier, InputFormat
from hpcbench.predict.plan import Profile

TAG_PING = 31


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def stage_times(
    items: Items, fmt: InputFormat, classifier: Classifier, batch: int, sample: int
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Seconds per item of each stage over the first ``sample`` items, and one packed unit per
    link (raw, prepared, results) for the transfer timing."""
    units = items.units(batch)
    chosen, count = [], 0
    for ids in units:
        if count >= sample:
            break
        chosen.append(ids)
        count += len(ids)
    names = ("read", "prepare", "predict", "pack_raw", "pack_prepared", "pack_result", "collect")
    per_item: dict[str, list[float]] = {k: [] for k in names}
    packed: list[np.ndarray] = []
    warm = False
    from hpcbench.predict.outputs import Collector

    sink = Collector(items, len(fmt.classes))
    for number, ids in enumerate(chosen):
        n = max(len(ids), 1)
        raw, t = _timed(stages.read_unit, items, number, ids)
        per_item["read"].append(t / n)
        prepared, t = _timed(stages.prepare_unit, raw, fmt, items, False)
        per_item["prepare"].append(t / n)
        if not warm:  # the first forward pass allocates and picks kernels
            stages.predict_unit(prepared, classifier)
            warm = True
        result, t = _timed(stages.predict_unit, prepared, classifier)
        per_item["predict"].append(t / n)
        buffers = []
        for link, unit in (("pack_raw", raw), ("pack_prepared", prepared), ("pack_result", result)):
            buf, t = _timed(stages.pack, unit.kind, unit.number, unit.arrays)
            per_item[link].append(t / n)
            buffers.append(buf)
        t0 = time.perf_counter()
        sink.add(stages.unpack(buffers[2]))
        per_item["collect"].append((time.perf_counter() - t0) / n)
        if number == 0:
            packed = buffers
    # the median unit: one unit slowed by another process on the node does not skew the plan
    cost = {k: float(np.median(v)) for k, v in per_item.items()}
    first = max(len(chosen[0]), 1)
    return {
        "read_s": cost["read"],
        "prepare_s": cost["prepare"],
        "predict_s": cost["predict"],
        "sink_s": cost["collect"],
        "pack_s": [cost["pack_raw"], cost["pack_prepared"], cost["pack_result"]],
        "raw_item_bytes": packed[0].nbytes / first,
        "prepared_item_bytes": packed[1].nbytes / first,
        "result_item_bytes": packed[2].nbytes / first,
        "items_in_unit": float(first),
    }, packed


def ping_pong(
    comm: Any, mpi: Any, buffers: list[np.ndarray] | None, repeats: int = 3
) -> list[float]:
    """Rank 0: one-way seconds of each buffer to rank 1 (rank 1 echoes a word); others: []."""
    rank = comm.Get_rank()
    ack = np.zeros(1, dtype=np.int64)
    sizes = comm.bcast([b.nbytes for b in buffers] if rank == 0 else None, root=0)
    if rank == 1:
        for size in [0, *sizes]:
            buf = np.empty(max(size, 1), dtype=np.uint8)
            for _ in range(repeats):
                comm.Recv([buf, mpi.BYTE], 0, TAG_PING)
                comm.Send([ack, mpi.INT64_T], 0, TAG_PING)
        return []
    if rank != 0:
        return []
    assert buffers is not None
    times = []
    for buf in [np.zeros(1, dtype=np.uint8), *buffers]:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            comm.Send([buf, mpi.BYTE], 1, TAG_PING)
            comm.Recv([ack, mpi.INT64_T], 1, TAG_PING)
            best = min(best, time.perf_counter() - t0)
        times.append(best)
    empty = times[0]
    return [max(t - empty, 0.0) + empty / 2 for t in times[1:]]


def profile_of(times: dict[str, Any], transfers: list[float]) -> Profile:
    per_unit = max(times["items_in_unit"], 1.0)
    raw, prepared, result = (
        t / per_unit + pack for t, pack in zip(transfers, times["pack_s"], strict=True)
    )
    return Profile(
        read_s=times["read_s"],
        prepare_s=times["prepare_s"],
        predict_s=times["predict_s"],
        sink_s=times["sink_s"],
        raw_link_s=raw,
        prepared_link_s=prepared,
        result_link_s=result,
        raw_item_bytes=times["raw_item_bytes"],
        prepared_item_bytes=times["prepared_item_bytes"],
        result_item_bytes=times["result_item_bytes"],
    )
