"""One training run as a function: what ``python -m hpcbench.train`` and the submitit helper call.

``run_training(argv)`` parses the options, sets up the rank, trains, and returns the results dict
(rank 0 also writes metrics.json/epochs.csv/steps.csv, energy.json with ``--energy on``
(:mod:`hpcbench.train.energy`), and prints the summary). On an error that every rank
met together (set-up checks, divergence: :mod:`hpcbench.train.failures`) each rank leaves by
itself; on any other error it stops the other ranks (MPI_Abort where there is no agent to do it).
Either way it re-raises. A stop signal ends every rank at the same step after a checkpoint
(:class:`hpcbench.train.stopping.Stopped`, exit 75).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcbench.run_documents import Metrics
    from hpcbench.train.config import TrainConfig
    from hpcbench.train.stopping import StopRequest


def run_training(
    argv: list[str] | None = None, stop: StopRequest | None = None, *, own_process: bool = False
) -> Metrics:
    """``stop``: the stop signals' record, installed as early as possible by the caller, who
    keeps it (a signal after the run then changes nothing); else one is installed here for the
    run and the previous handlers are put back on return. ``own_process``: the process is this
    run's alone (``python -m hpcbench.train``), so a run that compiles nothing leaves PyTorch's
    compiler unloaded (:mod:`hpcbench.train.eager_dynamo`); a notebook's or a helper's process
    keeps PyTorch as it is."""
    from hpcbench.train.command_line import parse_args
    from hpcbench.train.stopping import StopRequest

    own = stop is None
    stop = stop or StopRequest().install()
    try:
        config = parse_args(argv)  # before torch is imported: a usage error answers at once
        if own_process and config.parallelism.compile == "off":
            from hpcbench.train.eager_dynamo import defer

            defer()
        return _train(config, stop)
    finally:
        if own:
            stop.uninstall()


def _train(config: TrainConfig, stop: StopRequest) -> Metrics:
    from hpcbench.run_documents import write_energy, write_results
    from hpcbench.train import loop
    from hpcbench.train.documents import run_dir_of, summary
    from hpcbench.train.energy import RunEnergy, energy_line
    from hpcbench.train.failures import stopped_together
    from hpcbench.train.runtime import make_runtime
    from hpcbench.train.strategies import choose, make_strategy

    runtime = make_runtime(config.parallelism.device, config.parallelism.threads)
    rank = runtime.rank

    def log(message: str) -> None:
        if rank == 0:
            print(message, flush=True)

    strategy = energy = None
    try:
        strategy = make_strategy(choose(config, runtime), config, runtime)
        energy = RunEnergy.start(config, runtime, strategy)
        run_dir = run_dir_of(config) if rank == 0 else None
        results = loop.run(config, runtime, strategy, log, run_dir=run_dir, stop=stop)
        joules = energy.finish(strategy, results["phase_windows"]) if energy else None
        if run_dir is not None:
            paths = write_results(run_dir[0], results)
            results["files"] = {"metrics": str(paths[0]), "epochs": str(paths[1])}
            print(summary(results, paths), flush=True)
            if joules is not None:
                results["files"]["energy"] = str(write_energy(run_dir[0], joules))
                print(energy_line(joules) + f" ({results['files']['energy']})", flush=True)
        strategy.close()
        return results
    except BaseException as err:
        if energy is not None:
            energy.abandon()
        if strategy is not None and stopped_together(err):
            # Every rank is here and leaves by itself. Report first: close() waits for every
            # rank, so no launcher sees a rank exit (and stops the rest) before this line is out.
            report(err, rank)
            err.hpcbench_reported = True  # type: ignore[attr-defined]
            with contextlib.suppress(Exception):  # the error that brought us here matters more
                strategy.close()
        elif strategy is not None and runtime.world_size > 1:
            report(err, rank)  # before MPI_Abort ends this process
            err.hpcbench_reported = True  # type: ignore[attr-defined]
            # MPI_Abort tears the launcher down at once; give it a moment to relay this rank's
            # output first (without it the traceback was cut off now and then).
            time.sleep(1.0)
            strategy.abort()
        raise


def report(err: BaseException, rank: int | None = None) -> None:
    """One line for an error the user can fix; else that line first (it survives a cut-off
    log), then the traceback."""
    import sys
    import traceback

    from hpcbench.train.failures import USAGE_ERRORS, StoppedTogether, TrainingDiverged
    from hpcbench.train.stopping import Stopped

    if isinstance(err, StoppedTogether):
        return  # another rank reported why
    if isinstance(err, Stopped):
        if rank in (0, None) and "with the other ranks" not in str(err):
            print(f"hpcbench train: {err}", file=sys.stderr, flush=True)
        return
    if isinstance(err, (*USAGE_ERRORS, TrainingDiverged)):
        print(f"hpcbench train: error: {err}", file=sys.stderr, flush=True)
    else:
        who = f"rank {rank} " if rank is not None else ""
        print(
            f"hpcbench train: {who}failed: {type(err).__name__}: {err}", file=sys.stderr, flush=True
        )
        traceback.print_exception(err)
        sys.stderr.flush()
