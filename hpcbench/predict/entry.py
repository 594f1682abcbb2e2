"""One prediction run as a function (``run_prediction``): what ``python -m hpcbench.predict``
calls, and what a notebook or submitit calls.

Modes:

- ``single``: one process, a plain loop over the units -- read, prepare, predict -- the reference
  every other mode must agree with;
- ``data-parallel``: every rank does every stage on its share (units dealt round-robin), and the
  results are gathered to rank 0 in one buffer;
- ``pipeline``: reader, preprocessor and predictor ranks and one sink (:mod:`.pipeline`), sized by
  ``--roles`` (explicit, or ``auto`` from a calibration: :mod:`.profile`, :mod:`.plan`).

Set-up is done once, by rank 0 (read the checkpoint, list the input), and shared; an error there
is one line from rank 0 and exit 2 on every rank. A failure later on one rank prints its rank and
role and stops every rank (MPI_Abort), so nothing waits on a dead peer.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.data.files import printable
from hpcbench.predict import results, stages
from hpcbench.predict.config import PredictConfig, PredictError, parse_args
from hpcbench.predict.inputs import Items, list_items
from hpcbench.predict.model import DEFAULT_BATCH, Classifier, LoadedModel, load

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return peak_rss_mb()


def reset_peak_rss() -> None:
    """Start the peak resident size afresh (Linux: ``5`` to ``/proc/self/clear_refs``), so the
    run's peak is not the checkpoint load's or the calibration's."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """The peak resident size since :func:`reset_peak_rss` (VmHWM), else over the life."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _device(config: PredictConfig, local_index: int) -> str:
    if config.device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return f"cuda:{local_index % torch.cuda.device_count()}"
    if config.device == "cuda":
        raise PredictError("--device cuda: no CUDA device is visible to this rank")
    return "cpu"


def _set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))


def run_prediction(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Classify; rank 0 (the sink) returns the ``predict.json`` document, other ranks None."""
    config = parse_args(argv)
    from hpcbench.launch import detect_launch, is_mpi_launch

    launch = detect_launch()
    world = launch.world_size
    mode = config.mode
    if mode == "auto":
        mode = "single" if world == 1 else "pipeline"
    if mode == "single" and world > 1:
        raise PredictError(f"--mode single runs in one process; {world} ranks were started")
    if world > 1 and not is_mpi_launch(launch, srun_counts=True):
        raise PredictError(
            f"{world} ranks started by {launch.launcher}: the pipeline needs MPI ranks "
            "(mpiexec, or srun --mpi=pmi2)"
        )
    roles = config.explicit_roles
    if mode == "pipeline" and roles is not None and roles.total != world:
        raise PredictError(f"--roles {config.roles}: {roles.total} ranks for the {world} started")
    if mode == "pipeline" and world < 3:
        raise PredictError(
            f"--mode pipeline needs at least 3 ranks (reader, predictor, sink), got {world}; "
            "use --mode data-parallel or single"
        )
    _slow_predictor_drill()  # a bad value is one line before anything starts
    if world == 1 and mode != "pipeline":
        return _single(config, mode)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() != world:
        raise PredictError(
            f"{launch.launcher} started {world} ranks but MPI sees {MPI.COMM_WORLD.Get_size()} "
            "(start with mpiexec or srun --mpi=pmi2, with mpi4py built for that MPI)"
        )
    return _parallel(config, mode, MPI)


# ---- one process -----------------------------------------------------------------------------------
def _single(
    config: PredictConfig,
    mode: str,
    world: int = 1,
    planned: tuple[Any, Any] | None = None,
    shared: tuple[LoadedModel, Items] | None = None,
) -> dict[str, Any]:
    """One process does every stage (``world``, ``planned`` and ``shared``: rank 0 alone in a
    larger world, because the plan found no faster split; the checkpoint and the items it
    already chose and listed, and its run directory already made)."""
    from hpcbench.launch import usable_cores

    if shared is None:
        loaded = load(config.checkpoint, _warn)
        items = list_items(config, loaded.format.classes)
        config.prepare_run_dir()
    else:
        loaded, items = _with_weights(shared[0]), shared[1]
    threads = config.threads or usable_cores()
    _set_threads(threads)
    classifier = Classifier(loaded, _device(config, 0))
    _size_units(config, classifier)
    classifier.warm_up(config.batch_size)
    collector = results.Collector(items, len(loaded.format.classes))
    from hpcbench.predict.pipeline import Counters

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
    rank_rows = [_rank_row(0, counters, start_rss, threads, {**times}, classifier)]
    return _finish(
        config, mode, world, loaded, items, collector, counters.ended - t0, rank_rows, planned
    )


# ---- MPI -------------------------------------------------------------------------------------------
def _parallel(config: PredictConfig, mode: str, MPI: Any) -> dict[str, Any] | None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    role = "set-up"
    try:
        loaded, items, layout = _shared_setup(config, comm)
        threads = config.threads or max(1, layout.cores[layout.node_of_rank[rank]]
                                        // layout.node_of_rank.count(layout.node_of_rank[rank]))  # fmt: skip
        if config.batch_size is None:  # rank 0 sizes the units for every rank
            if rank == 0 and _device(config, 0).startswith("cuda"):
                _size_units(config, Classifier(_with_weights(loaded), _device(config, 0)))
            config.batch_size = comm.bcast(config.batch_size or DEFAULT_BATCH, root=0)
        if mode == "data-parallel":
            role = "data-parallel"
            return _data_parallel(config, comm, MPI, loaded, items, threads)
        return _pipeline(config, comm, MPI, loaded, items, layout, threads)
    except _AgreedError:
        raise
    except BaseException as err:
        _abort(comm, rank, role if role != "set-up" else _ROLE.get("role", "set-up"), err)
        raise


_ROLE: dict[str, str] = {}


class _AgreedError(PredictError):
    """Every rank stops on this error together (rank 0 printed it)."""


def _abort(comm: Any, rank: int, role: str, err: BaseException) -> None:
    """Print this rank's failure, then stop every rank (nothing waits on a dead peer)."""
    import traceback

    if isinstance(err, PredictError):
        print(f"hpcbench predict: rank {rank} ({role}): error: {err}", file=sys.stderr, flush=True)
        code = 2
    else:
        print(f"hpcbench predict: rank {rank} ({role}) failed: {type(err).__name__}: {err}",
              file=sys.stderr, flush=True)  # fmt: skip
        traceback.print_exception(err)
        sys.stderr.flush()
        code = 1
    err.hpcbench_reported = True  # type: ignore[attr-defined]
    time.sleep(1.0)  # let the launcher relay this rank's lines before the abort tears it down
    comm.Abort(code)


def _shared_setup(config: PredictConfig, comm: Any) -> tuple[LoadedModel, Items, Any]:
    """Rank 0 reads the checkpoint and lists the input; every rank gets the result or the error.
    The node layout comes from every rank's host name and CPU affinity."""
    from hpcbench.predict.pipeline import sleepy_barrier
    from hpcbench.predict.plan import Layout

    rank = comm.Get_rank()
    shared: tuple[Any, ...] | str
    if rank == 0:
        try:
            loaded = load(config.checkpoint, _warn)
            items = list_items(config, loaded.format.classes)
            items.close()
            config.prepare_run_dir()
            shared = (loaded.path, loaded.model_name, loaded.format, loaded.steps_done, items)
        except PredictError as err:
            shared = str(err)
    sleepy_barrier(comm)
    shared = comm.bcast(shared if rank == 0 else None, root=0)
    if isinstance(shared, str):
        if rank == 0:
            print(f"hpcbench predict: error: {shared}", file=sys.stderr, flush=True)
        err = _AgreedError(shared)
        err.hpcbench_reported = True  # type: ignore[attr-defined]
        raise err
    path, name, fmt, steps, items = shared
    loaded = LoadedModel(path=path, model_name=name, format=fmt, state={}, steps_done=steps)
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    mine = (socket.gethostname(), affinity or list(range(os.cpu_count() or 1)), _gpus(config))
    node_ids: dict[str, int] = {}
    cores: dict[int, set[int]] = {}
    gpus: dict[int, set[str]] = {}
    node_of_rank = []
    for host, cpus, visible in comm.allgather(mine):
        node = node_ids.setdefault(host, len(node_ids))
        node_of_rank.append(node)
        cores.setdefault(node, set()).update(cpus)
        gpus.setdefault(node, set()).update(visible)
    return (
        loaded,
        items,
        Layout(
            node_of_rank,
            {n: len(c) for n, c in cores.items()},
            {n: len(g) for n, g in gpus.items()},
        ),
    )


def _gpus(config: PredictConfig) -> list[str]:
    """The GPUs this rank could predict on, as IDs (NVML's UUIDs, as CUDA_VISIBLE_DEVICES selects
    them; else that variable's entries), without importing torch or starting CUDA (readers and
    the sink never load either). A node's GPUs are the distinct IDs of its ranks: one GPU bound
    to each task counts as many GPUs as tasks. None known (--device cpu, no NVML, no variable):
    predictors are not taken to share anything."""
    if config.device == "cpu":
        return []
    from hpcbench.energy.nvml import visible_uuids

    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    found = visible_uuids(spec)
    if found is not None:
        return found
    return [f"cuda-visible:{t.strip()}" for t in (spec or "").split(",") if t.strip()]


def _with_weights(loaded: LoadedModel) -> LoadedModel:
    """This rank's copy of the weights (read from the checkpoint file rank 0 chose)."""
    return load(str(loaded.path), _warn)


def _rank_row(
    rank: int,
    counters: Any,
    start_rss: float,
    threads: int,
    extra: dict | None = None,
    classifier: Classifier | None = None,
) -> dict[str, Any]:
    """A rank's figures. Memory: ``rss_at_start_mb`` is the host memory once set up (on a GPU
    the device's context and libraries included: a warm-up forward loaded them),
    ``growth_mb`` what the run's units took on top (what the plan's bound limits), and
    ``device_peak_mb`` a GPU predictor's peak device memory (None on CPUs)."""
    peak = peak_rss_mb()
    row = {
        "rank": rank,
        "host": socket.gethostname(),
        **counters.as_dict(),
        "threads": threads,
        "rss_at_start_mb": start_rss,
        "peak_rss_mb": peak,
        "growth_mb": max(0.0, peak - start_rss),
        "device_peak_mb": classifier.device_peak_mb() if classifier is not None else None,
    }
    if extra:
        row.update(extra)
    return row


def _data_parallel(
    config: PredictConfig, comm: Any, MPI: Any, loaded: LoadedModel, items: Items, threads: int
) -> dict[str, Any] | None:
    from hpcbench.predict.pipeline import Counters, sleepy_barrier

    rank, world = comm.Get_rank(), comm.Get_size()
    _ROLE["role"] = "data-parallel"
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    _set_threads(threads)
    classifier = Classifier(_with_weights(loaded), _device(config, local))
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
    mine = _concatenate(parts, len(loaded.format.classes))
    buf = stages.pack(mine.kind, rank, mine.arrays)
    sizes = comm.gather(buf.nbytes, root=0)
    row = _rank_row(rank, counters, start_rss, threads, None, classifier)
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
    collector = results.Collector(items, len(loaded.format.classes))
    for offset, size in zip(offsets, sizes, strict=True):
        collector.add(stages.unpack(whole[offset : offset + size]))
    return _finish(config, "data-parallel", world, loaded, items, collector, elapsed, rows, None)


def _concatenate(parts: list[stages.Unit], classes: int) -> stages.Unit:
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


def _pipeline(
    config: PredictConfig,
    comm: Any,
    MPI: Any,
    loaded: LoadedModel,
    items: Items,
    layout: Any,
    threads: int,
) -> dict[str, Any] | None:
    from hpcbench.predict import pipeline, plan, profile
    from hpcbench.predict.pipeline import Counters, Idle, sleepy_barrier

    rank, world = comm.Get_rank(), comm.Get_size()
    fmt = loaded.format
    who = f"rank {rank}"
    # ---- the plan: calibrate (unless every credit count is given with explicit roles) ----------
    calibrate = config.explicit_roles is None or config.credits is None
    prof = None
    if config.explicit_roles is not None and config.explicit_roles.total != world:
        raise _agreed_on(rank, f"--roles {config.roles}: {config.explicit_roles.total} ranks for "
                         f"the {world} started")  # fmt: skip
    if calibrate:
        _ROLE["role"] = "calibration"
        buffers = None
        times = None
        if rank == 0:
            predictor_threads = config.threads or threads
            _set_threads(predictor_threads)
            classifier = Classifier(_with_weights(loaded), _device(config, 0))
            times, buffers = profile.stage_times(items, fmt, classifier, config.batch_size,
                                                 config.calibration_items)  # fmt: skip
            items.close()
            del classifier
        sleepy_barrier(comm)
        transfers = profile.ping_pong(comm, MPI, buffers)
        if rank == 0:
            transfers = [t + _slow_link_drill() for t in transfers]
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
    if the_plan.alone:
        return _alone(config, comm, the_plan, prof, loaded, items)
    role = the_plan.role_of_rank[rank]
    _ROLE["role"] = role
    if rank == 0 and not config.quiet:
        print(_plan_lines(the_plan, prof if calibrate else None), flush=True)
    readers = the_plan.ranks_of("reader")
    preprocessors = the_plan.ranks_of("preprocess")
    predictors = the_plan.ranks_of("predict")
    first = preprocessors or predictors
    first_link = "reader->" + ("preprocess" if preprocessors else "predict")
    credits = the_plan.credits
    classifier = None
    if role == "predict":  # the predictors of one node share its GPUs in turn
        node = layout.node_of_rank[rank]
        local = [r for r in predictors if layout.node_of_rank[r] == node].index(rank)
        _set_threads(threads)
        classifier = Classifier(_with_weights(loaded), _device(config, local))
        classifier.warm_up(config.batch_size)
    counters = Counters(role=role)
    longest = pipeline.sleep_cap(config.batch_size, the_plan.predicted_items_per_s)
    idle = Idle(config.stall_timeout, f"{who} ({role})", longest)
    reset_peak_rss()
    start_rss = rss_mb()
    sleepy_barrier(comm)
    t0 = time.perf_counter()
    counters.start()
    collector = None
    strict = config.strict
    slow = _slow_predictor_drill()
    drilled = _drilled(rank)
    if role == "reader":
        units = items.units(config.batch_size)
        if preprocessors:

            def work(n: int, ids: np.ndarray) -> stages.Unit:
                return stages.read_unit(items, n, ids)
        else:

            def work(n: int, ids: np.ndarray) -> stages.Unit:
                return stages.prepare_unit(stages.read_unit(items, n, ids), fmt, items, strict)

        pipeline.run_reader(
            comm, MPI, units, drilled(work), first, credits[first_link], idle, counters
        )
    elif role == "preprocess":
        pipeline.run_worker(
            comm, MPI, readers, credits[first_link],
            drilled(lambda unit: stages.prepare_unit(unit, fmt, items, strict)),
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
        pipeline.run_worker(comm, MPI, producers, credits[link_in], drilled(predict), [0],
                            credits["predict->sink"], idle, counters)  # fmt: skip
    else:
        collector = results.Collector(items, len(fmt.classes))
        dispenser = pipeline.Dispenser(comm, MPI, len(items.units(config.batch_size)))
        pipeline.run_sink(comm, MPI, predictors, credits["predict->sink"], collector.add, idle,
                          counters, dispenser)  # fmt: skip
    elapsed = time.perf_counter() - t0
    items.close()
    row = _rank_row(rank, counters, start_rss, threads, None, classifier)
    sleepy_barrier(comm)
    rows = comm.gather(row, root=0)
    if rank != 0:
        return None
    assert collector is not None
    return _finish(
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


def _agreed_on(rank: int, message: str) -> _AgreedError:
    if rank == 0:
        print(f"hpcbench predict: error: {message}", file=sys.stderr, flush=True)
    err = _AgreedError(message)
    err.hpcbench_reported = True  # type: ignore[attr-defined]
    return err


def _drilled(rank: int) -> Any:
    """Wrap a stage's work in this rank's failure drill (``HPCBENCH_FAIL_AT=RANK:UNIT[:MODE]``,
    counted in units this rank has worked on), if one names it."""
    from hpcbench.train.drills import act, drill_for

    drill = drill_for(rank)

    def wrap(fn: Any) -> Any:
        if drill is None:
            return fn
        done = [0]

        def wrapped(*args: Any) -> Any:
            act(drill, done[0], "unit", "hpcbench predict")
            done[0] += 1
            return fn(*args)

        return wrapped

    return wrap


def _slow_predictor_drill() -> float:
    """``HPCBENCH_PREDICT_SLOW=SECONDS``: each predictor sleeps this long per unit (a drill for
    the backpressure test: readers then run far ahead unless credits hold them)."""
    text = os.environ.get("HPCBENCH_PREDICT_SLOW", "")
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        raise PredictError(f"HPCBENCH_PREDICT_SLOW={text!r}: expected seconds") from None


def _size_units(config: PredictConfig, classifier: Classifier) -> None:
    """``--batch-size`` unset: 32 on a CPU; on a GPU the smallest unit whose per-image cost is
    within 10 % of the best of 32-512 (a GPU fed 32 images at a time waits on the host)."""
    if config.batch_size is not None:
        return
    if classifier.device.type != "cuda":
        config.batch_size = DEFAULT_BATCH
        return
    config.batch_size = classifier.sized_batch()
    if not config.quiet:
        print(
            f"unit size: {config.batch_size} images (measured on {classifier.device})", flush=True
        )


def _slow_link_drill() -> float:
    """``HPCBENCH_PREDICT_SLOW_LINK=SECONDS``: the calibration adds this to each unit's measured
    transfer, as a slow interconnect would (a drill: every split then costs more than it saves)."""
    text = os.environ.get("HPCBENCH_PREDICT_SLOW_LINK", "")
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        raise PredictError(f"HPCBENCH_PREDICT_SLOW_LINK={text!r}: expected seconds") from None


def _alone(
    config: PredictConfig,
    comm: Any,
    the_plan: Any,
    prof: Any,
    loaded: LoadedModel,
    items: Items,
) -> dict[str, Any] | None:
    """Every split of the ranks is predicted slower than one process: rank 0 predicts alone,
    the others wait (never slower than one process, by the calibration)."""
    from hpcbench.predict.pipeline import sleepy_barrier

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
        document = _single(config, "single", world, (the_plan, prof), (loaded, items))
    sleepy_barrier(comm)
    return document


def _plan_lines(the_plan: Any, prof: Any) -> str:
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


def _finish(
    config: PredictConfig,
    mode: str,
    world: int,
    loaded: LoadedModel,
    items: Items,
    collector: results.Collector,
    elapsed: float,
    rank_rows: list[dict[str, Any]],
    planned: tuple[Any, Any] | None,
) -> dict[str, Any]:
    classes = loaded.format.classes
    if collector.missing:
        raise PredictError(f"{collector.missing} image(s) never reached the sink")
    for i, why in sorted(collector.reasons.items())[:20]:
        where = printable(items.paths[i] if items.paths else items.names[i])
        _warn(f"hpcbench predict: warning: {where}: unreadable image, skipped ({printable(why)})")
    if len(collector.reasons) > 20:
        _warn(f"hpcbench predict: warning: {len(collector.reasons) - 20} more unreadable image(s)")
    done = int((collector.status == 0).sum())
    document: dict[str, Any] = {
        "format": results.FORMAT,
        "mode": mode,
        "world_size": world,
        "checkpoint": str(loaded.path),
        "model": loaded.model_name,
        "input": items.description,
        "batch_size": config.batch_size,
        "measured": {
            "items": done,
            "seconds": elapsed,
            "items_per_s": done / elapsed if elapsed > 0 else None,
        },
        "stages": results.stage_report(rank_rows, elapsed),
        "ranks": rank_rows,
        "metrics": results.metrics(collector, classes),
        "skipped": [
            {"item": items.names[i], "reason": why} for i, why in sorted(collector.reasons.items())
        ],
    }
    if planned is not None:
        the_plan, prof = planned
        document["plan"] = the_plan.as_dict()
        if prof is not None:
            document["profile"] = prof.as_dict()
            x = (
                the_plan.one_process_items_per_s
                if the_plan.alone
                else the_plan.predicted_items_per_s
            )
            document["measured"]["vs_predicted"] = (
                (done / elapsed) / x if x and elapsed > 0 else None
            )
    run_dir = Path(config.run_dir()).expanduser().resolve()
    csv_text = results.predictions_csv(collector, classes, config.top_k, loaded.format.class_ids)
    paths = results.write(run_dir, csv_text, document)
    document["files"] = {"predictions": str(paths[0]), "report": str(paths[1])}
    print(results.summary(document, paths), flush=True)
    return document
