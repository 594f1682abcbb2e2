"""One process does every stage of a prediction run -- read, prepare, predict -- in a plain loop
over the units: the reference every other mode must agree with."""

from __future__ import annotations

import time
from typing import Any

from hpcbench.predict import outputs, stages
from hpcbench.predict.config import PredictConfig
from hpcbench.predict.inputs import Items, list_items
from hpcbench.predict.model import Classifier, LoadedModel, load
from hpcbench.predict.pipeline_ranks import Counters
from hpcbench.predict.rank import (
    device_for,
    rank_row,
    reset_peak_rss,
    rss_mb,
    set_threads,
    size_units,
    warn,
    with_weights,
)


def single(
    config: PredictConfig,
    mode: str,
    world: int = 1,
    planned: tuple[Any, Any] | None = None,
    shared: tuple[LoadedModel, Items] | None = None,
) -> dict[str, Any]:
    """One process does every stage (``world``, ``planned`` and ``shared``: rank 0 alone in a
    larger world, because the plan found no faster split; the checkpoint and the items it
    already chose and listed, and its run directory already made)."""
    from hpcbench.this_rank import usable_cores

    if shared is None:
        loaded = load(config.checkpoint, warn)
        items = list_items(config, loaded.format.classes)
        config.prepare_run_dir()
    else:
        loaded, items = with_weights(shared[0]), shared[1]
    threads = config.threads or usable_cores()
    set_threads(threads)
    classifier = Classifier(loaded, device_for(config, 0))
    size_units(config, classifier)
    classifier.warm_up(config.batch_size)
    collector = outputs.Collector(items, len(loaded.format.classes))
    counters = Counters(role="single")
    reset_peak_rss()
    start_rss = rss_mb()
    times = {"read_s": 0.0, "prepare_s": 0.0, "predict_s": 0.0}
    t0 = time.perf_counter()
    counters.start()
    for number, ids in enumerate(items.units(config.batch_size)):
        a = time.perf_counter()
        raw = stages.read_unit(items, number, ids)
        b = time.perf_counter()
        prepared = stages.prepare_unit(raw, loaded.format, items, config.strict)
        c = time.perf_counter()
        result = stages.predict_unit(prepared, classifier)
        d = time.perf_counter()
        collector.add(result)
        times["read_s"] += b - a
        times["prepare_s"] += c - b
        times["predict_s"] += d - c
        counters.items += len(ids)
        counters.units += 1
    counters.end()
    counters.busy_s = counters.ended - t0
    rank_rows = [rank_row(0, counters, start_rss, threads, {**times}, classifier)]
    return outputs.finish(
        config, mode, world, loaded, items, collector, counters.ended - t0, rank_rows, planned
    )
