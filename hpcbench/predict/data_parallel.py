"""The data-parallel mode of a prediction run: every rank does every stage on its share (units
dealt round-robin), and the results are gathered to rank 0 in one buffer."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hpcbench.predict import outputs, stages
from hpcbench.predict.config import PredictConfig
from hpcbench.predict.inputs import Items
from hpcbench.predict.links import sleepy_barrier
from hpcbench.predict.model import Classifier, LoadedModel
from hpcbench.predict.pipeline_ranks import Counters
from hpcbench.predict.rank import (
    ROLE,
    device_for,
    rank_row,
    reset_peak_rss,
    rss_mb,
    set_threads,
    with_weights,
)


def data_parallel(
    config: PredictConfig, comm: Any, MPI: Any, loaded: LoadedModel, items: Items, threads: int
) -> dict[str, Any] | None:
    rank, world = comm.Get_rank(), comm.Get_size()
    ROLE["role"] = "data-parallel"
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    set_threads(threads)
    classifier = Classifier(with_weights(loaded), device_for(config, local))
    classifier.warm_up(config.batch_size)
    counters = Counters(role="data-parallel")
    reset_peak_rss()
    start_rss = rss_mb()
    sleepy_barrier(comm)
    t0 = time.perf_counter()
    counters.start()
    parts: list[stages.Unit] = []
    for number, ids in enumerate(items.units(config.batch_size)):
        if number % world != rank:
            continue
        a = time.perf_counter()
        raw = stages.read_unit(items, number, ids)
        prepared = stages.prepare_unit(raw, loaded.format, items, config.strict)
        parts.append(stages.predict_unit(prepared, classifier))
        counters.busy_s += time.perf_counter() - a
        counters.items += len(ids)
        counters.units += 1
    counters.end()
    mine = concatenate(parts, len(loaded.format.classes))
    buf = stages.pack(mine.kind, rank, mine.arrays)
    sizes = comm.gather(buf.nbytes, root=0)
    row = rank_row(rank, counters, start_rss, threads, None, classifier)
    if rank == 0:
        assert sizes is not None
        whole = np.empty(sum(sizes), dtype=np.uint8)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        comm.Gatherv([buf, MPI.BYTE], [whole, sizes, offsets, MPI.BYTE], root=0)
    else:
        comm.Gatherv([buf, MPI.BYTE], None, root=0)
    rows = comm.gather(row, root=0)
    if rank != 0:
        return None
    elapsed = time.perf_counter() - t0
    collector = outputs.Collector(items, len(loaded.format.classes))
    for offset, size in zip(offsets, sizes, strict=True):
        collector.add(stages.unpack(whole[offset : offset + size]))
    return outputs.finish(
        config, "data-parallel", world, loaded, items, collector, elapsed, rows, None
    )


def concatenate(parts: list[stages.Unit], classes: int) -> stages.Unit:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return stages.Unit(stages.RESULTS, 0, [empty, np.zeros(0, np.int8),
                                               np.zeros((0, classes), np.float32),
                                               np.zeros(0, np.uint8)])  # fmt: skip
    ids = np.concatenate([p.arrays[0] for p in parts])
    status = np.concatenate([p.arrays[1] for p in parts])
    probs = np.concatenate([p.arrays[2].reshape(-1, classes) for p in parts])
    texts = [t for p in parts for t in stages.reasons_of(p.arrays[3])]
    return stages.Unit(stages.RESULTS, 0, [ids, status, probs, stages._reasons(texts)])
