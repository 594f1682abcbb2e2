"""One prediction run as a function (``run_prediction``): what ``python -m hpcbench.predict``
calls, and what a notebook or submitit calls.

Modes:

- ``single``: one process, a plain loop over the units -- read, prepare, predict -- the reference
  every other mode must agree with;
- ``data-parallel``: every rank does every stage on its share (units dealt round-robin), and the
  results are gathered to rank 0 in one buffer;
- ``pipeline``: reader, preprocessor and predictor ranks and one sink (:mod:`.pipeline_ranks`),
  sized by ``--roles`` (explicit, or ``auto`` from a calibration: :mod:`.profile`, :mod:`.plan`).

Set-up is done once, by rank 0 (read the checkpoint, list the input), and shared; an error there
is one line from rank 0 and exit 2 on every rank. A failure later on one rank prints its rank and
role and stops every rank (MPI_Abort), so nothing waits on a dead peer.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from hpcbench.predict.config import PredictConfig, PredictError, parse_args
from hpcbench.predict.data_parallel import data_parallel
from hpcbench.predict.inputs import Items, list_items
from hpcbench.predict.links import sleepy_barrier
from hpcbench.predict.model import DEFAULT_BATCH, Classifier, LoadedModel, load
from hpcbench.predict.pipeline_mode import pipeline_run
from hpcbench.predict.plan import Layout
from hpcbench.predict.rank import (
    ROLE,
    AgreedError,
    abort,
    device_for,
    size_units,
    slow_predictor_drill,
    visible_gpus,
    warn,
    with_weights,
)
from hpcbench.predict.single import single


def run_prediction(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Classify; rank 0 (the sink) returns the ``predict.json`` document, other ranks None."""
    config = parse_args(argv)
    from hpcbench.this_rank import detect_launch, is_mpi_launch

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
    slow_predictor_drill()  # a bad value is one line before anything starts
    if world == 1 and mode != "pipeline":
        return single(config, mode)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() != world:
        raise PredictError(
            f"{launch.launcher} started {world} ranks but MPI sees {MPI.COMM_WORLD.Get_size()} "
            "(start with mpiexec or srun --mpi=pmi2, with mpi4py built for that MPI)"
        )
    return parallel(config, mode, MPI)


def parallel(config: PredictConfig, mode: str, MPI: Any) -> dict[str, Any] | None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    role = "set-up"
    try:
        loaded, items, layout = shared_setup(config, comm)
        threads = config.threads or max(1, layout.cores[layout.node_of_rank[rank]]
                                        // layout.node_of_rank.count(layout.node_of_rank[rank]))  # fmt: skip
        if config.batch_size is None:  # rank 0 sizes the units for every rank
            if rank == 0 and device_for(config, 0).startswith("cuda"):
                size_units(config, Classifier(with_weights(loaded), device_for(config, 0)))
            config.batch_size = comm.bcast(config.batch_size or DEFAULT_BATCH, root=0)
        if mode == "data-parallel":
            role = "data-parallel"
            return data_parallel(config, comm, MPI, loaded, items, threads)
        return pipeline_run(config, comm, MPI, loaded, items, layout, threads)
    except AgreedError:
        raise
    except BaseException as err:
        abort(comm, rank, role if role != "set-up" else ROLE.get("role", "set-up"), err)
        raise


def shared_setup(config: PredictConfig, comm: Any) -> tuple[LoadedModel, Items, Any]:
    """Rank 0 reads the checkpoint and lists the input; every rank gets the result or the error.
    The node layout comes from every rank's host name and CPU affinity."""
    rank = comm.Get_rank()
    shared: tuple[Any, ...] | str
    if rank == 0:
        try:
            loaded = load(config.checkpoint, warn)
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
        err = AgreedError(shared)
        err.hpcbench_reported = True  # type: ignore[attr-defined]
        raise err
    path, name, fmt, steps, items = shared
    loaded = LoadedModel(path=path, model_name=name, format=fmt, state={}, steps_done=steps)
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    mine = (
        socket.gethostname(),
        affinity or list(range(os.cpu_count() or 1)),
        visible_gpus(config),
    )
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
