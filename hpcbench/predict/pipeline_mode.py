"""The pipeline mode of a prediction run: reader, preprocessor and predictor ranks and one sink
(:mod:`.pipeline_ranks`), sized by ``--roles`` (explicit, or ``auto`` from a calibration:
:mod:`.profile`, :mod:`.plan`); rank 0 predicts alone when every split is predicted slower than
one process."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hpcbench.predict import links, outputs, pipeline_ranks, plan, profile, stages
from hpcbench.predict.config import PredictConfig
from hpcbench.predict.inputs import Items
from hpcbench.predict.links import Idle, sleepy_barrier
from hpcbench.predict.model import Classifier, LoadedModel
from hpcbench.predict.pipeline_ranks import Counters
from hpcbench.predict.rank import (
    ROLE,
    agreed_on,
    device_for,
    drilled,
    rank_row,
    reset_peak_rss,
    rss_mb,
    set_threads,
    slow_link_drill,
    slow_predictor_drill,
    with_weights,
)
from hpcbench.predict.single import single


def pipeline_run(
    config: PredictConfig,
    comm: Any,
    MPI: Any,
    loaded: LoadedModel,
    items: Items,
    layout: Any,
    threads: int,
) -> dict[str, Any] | None:
    """This rank's part of the pipeline: the plan (calibrated unless every credit count is given
    with explicit roles), then its role until the input is done; rank 0 returns the document."""
    rank, world = comm.Get_rank(), comm.Get_size()
    the_plan, prof, calibrate = _plan(config, comm, MPI, loaded, items, layout, threads)
    if the_plan.alone:
        return alone(config, comm, the_plan, prof, loaded, items)
    role = the_plan.role_of_rank[rank]
    ROLE["role"] = role
    if rank == 0 and not config.quiet:
        print(plan_lines(the_plan, prof if calibrate else None), flush=True)
    classifier = None
    if role == "predict":  # the predictors of one node share its GPUs in turn
        predictors = the_plan.ranks_of("predict")
        node = layout.node_of_rank[rank]
        local = [r for r in predictors if layout.node_of_rank[r] == node].index(rank)
        set_threads(threads)
        classifier = Classifier(with_weights(loaded), device_for(config, local))
        classifier.warm_up(config.batch_size)
    counters = Counters(role=role)
    longest = links.sleep_cap(config.batch_size, the_plan.predicted_items_per_s)
    idle = Idle(config.stall_timeout, f"rank {rank} ({role})", longest)
    reset_peak_rss()
    start_rss = rss_mb()
    sleepy_barrier(comm)
    t0 = time.perf_counter()
    counters.start()
    collector = _play(role, the_plan, config, comm, MPI, loaded, items, classifier, idle, counters)
    elapsed = time.perf_counter() - t0
    items.close()
    row = rank_row(rank, counters, start_rss, threads, None, classifier)
    sleepy_barrier(comm)
    rows = comm.gather(row, root=0)
    if rank != 0:
        return None
    assert collector is not None
    return outputs.finish(
        config,
        "pipeline",
        world,
        loaded,
        items,
        collector,
        elapsed,
        rows,
        (the_plan, prof if calibrate else None),
    )


def _plan(
    config: PredictConfig,
    comm: Any,
    MPI: Any,
    loaded: LoadedModel,
    items: Items,
    layout: Any,
    threads: int,
) -> tuple[Any, Any, bool]:
    """(the plan, the profile it was made from, whether it was calibrated): rank 0 times the
    stages on a few units and every pair of ranks times a transfer, unless every credit count is
    given with explicit roles."""
    rank, world = comm.Get_rank(), comm.Get_size()
    fmt = loaded.format
    calibrate = config.explicit_roles is None or config.credits is None
    prof = None
    if config.explicit_roles is not None and config.explicit_roles.total != world:
        raise agreed_on(rank, f"--roles {config.roles}: {config.explicit_roles.total} ranks for "
                         f"the {world} started")  # fmt: skip
    if calibrate:
        ROLE["role"] = "calibration"
        buffers = None
        times = None
        if rank == 0:
            predictor_threads = config.threads or threads
            set_threads(predictor_threads)
            classifier = Classifier(with_weights(loaded), device_for(config, 0))
            times, buffers = profile.stage_times(items, fmt, classifier, config.batch_size,
                                                 config.calibration_items)  # fmt: skip
            items.close()
            del classifier
        sleepy_barrier(comm)
        transfers = profile.ping_pong(comm, MPI, buffers)
        if rank == 0:
            transfers = [t + slow_link_drill() for t in transfers]
            prof = profile.profile_of(times, transfers)
        prof = comm.bcast(prof, root=0)
    if prof is None:  # explicit roles and credits: nothing to size
        prof = plan.Profile(*([0.0] * 10))
    the_plan = plan.make_plan(
        prof, layout, config.batch_size, config.explicit_roles, config.credits
    )
    if not calibrate:  # no profile: nothing predicted, no bound computed
        the_plan.predicted_items_per_s = None
        the_plan.memory_bound_bytes = {}
        the_plan.stage_cost_s = {}
        the_plan.bottleneck = "not calibrated (explicit --roles and --credits)"
    return the_plan, prof, calibrate


def _reader_work(
    items: Items, fmt: Any, strict: bool, raw: bool
) -> Callable[[int, np.ndarray], stages.Unit]:
    """What a reader does with a unit: read it (``raw``: preprocessors prepare it), or read and
    prepare it for the predictors."""
    if raw:
        return lambda n, ids: stages.read_unit(items, n, ids)
    return lambda n, ids: stages.prepare_unit(stages.read_unit(items, n, ids), fmt, items, strict)


def _play(
    role: str,
    the_plan: Any,
    config: PredictConfig,
    comm: Any,
    MPI: Any,
    loaded: LoadedModel,
    items: Items,
    classifier: Classifier | None,
    idle: Idle,
    counters: Counters,
) -> outputs.Collector | None:
    """Run this rank's role to the end of the input; the sink's collector (None elsewhere)."""
    fmt, strict = loaded.format, config.strict
    readers = the_plan.ranks_of("reader")
    preprocessors = the_plan.ranks_of("preprocess")
    predictors = the_plan.ranks_of("predict")
    first = preprocessors or predictors
    first_link = "reader->" + ("preprocess" if preprocessors else "predict")
    credits = the_plan.credits
    slow = slow_predictor_drill()
    drill = drilled(comm.Get_rank())
    collector = None
    if role == "reader":
        units = items.units(config.batch_size)
        work = _reader_work(items, fmt, strict, raw=bool(preprocessors))
        pipeline_ranks.run_reader(
            comm, MPI, units, drill(work), first, credits[first_link], idle, counters
        )
    elif role == "preprocess":
        pipeline_ranks.run_worker(
            comm, MPI, readers, credits[first_link],
            drill(lambda unit: stages.prepare_unit(unit, fmt, items, strict)),
            predictors, credits["preprocess->predict"], idle, counters,
        )  # fmt: skip
    elif role == "predict":
        assert classifier is not None

        def predict(unit: stages.Unit) -> stages.Unit:
            if slow:
                time.sleep(slow)
            return stages.predict_unit(unit, classifier)

        producers = preprocessors or readers
        link_in = "preprocess->predict" if preprocessors else first_link
        pipeline_ranks.run_worker(comm, MPI, producers, credits[link_in], drill(predict), [0],
                                  credits["predict->sink"], idle, counters)  # fmt: skip
    else:
        collector = outputs.Collector(items, len(fmt.classes))
        dispenser = links.Dispenser(comm, MPI, len(items.units(config.batch_size)))
        pipeline_ranks.run_sink(comm, MPI, predictors, credits["predict->sink"], collector.add,
                                idle, counters, dispenser)  # fmt: skip
    return collector


def alone(
    config: PredictConfig,
    comm: Any,
    the_plan: Any,
    prof: Any,
    loaded: LoadedModel,
    items: Items,
) -> dict[str, Any] | None:
    """Every split of the ranks is predicted slower than one process: rank 0 predicts alone,
    the others wait (never slower than one process, by the calibration)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    document = None
    if rank == 0:
        if not config.quiet:
            print(
                f"pipeline plan: none: the calibration predicts the fastest split of {world} "
                f"ranks ({the_plan.roles.text()}) at {the_plan.predicted_items_per_s:.1f} "
                f"images/s, bound by {the_plan.bottleneck}, slower than one process "
                f"({the_plan.one_process_items_per_s:.1f} images/s): rank 0 predicts alone",
                flush=True,
            )
        document = single(config, "single", world, (the_plan, prof), (loaded, items))
    sleepy_barrier(comm)
    return document


def plan_lines(the_plan: Any, prof: Any) -> str:
    lines = [f"pipeline plan: {the_plan.roles.text()} (rank 0 is the sink)"]
    if prof is not None:
        costs = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in the_plan.stage_cost_s.items())
        lines.append(f"  measured ms per image and rank: {costs}")
        lines.append(
            f"  predicted {the_plan.predicted_items_per_s:.1f} images/s, bound by {the_plan.bottleneck}"
            f" (one process: {the_plan.one_process_items_per_s:.1f})"
        )
    lines.append(
        "  credits per link: " + ", ".join(f"{k} {v}" for k, v in the_plan.credits.items())
    )
    return "\n".join(lines)
