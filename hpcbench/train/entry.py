"""One training run as a function: what ``python -m hpcbench.train`` and the submitit helper call.

``run_training(argv)`` parses the options, sets up the rank, trains, and returns the results dict
(rank 0 also writes metrics.json/epochs.csv and prints the summary). On any error it stops the
other ranks (MPI_Abort where there is no agent to do it) and re-raises.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def default_run_dir() -> str:
    return os.environ.get("HPCBENCH_RUN_DIR") or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}"


def run_training(argv: list[str] | None = None) -> dict[str, Any]:
    from hpcbench.train import loop
    from hpcbench.train.config import parse_args
    from hpcbench.train.results import summary, write_results
    from hpcbench.train.runtime import make_runtime
    from hpcbench.train.strategies import choose, make_strategy

    config = parse_args(argv)
    runtime = make_runtime(config.device, config.threads)
    rank = runtime.rank

    def log(message: str) -> None:
        if rank == 0:
            print(message, flush=True)

    strategy = None
    try:
        strategy = make_strategy(choose(config, runtime), config, runtime)
        results = loop.run(config, runtime, strategy, log)
        if rank == 0:
            run_dir = Path(config.output_dir or default_run_dir()).resolve()
            paths = write_results(run_dir, results)
            results["files"] = {"metrics": str(paths[0]), "epochs": str(paths[1])}
            print(summary(results, paths), flush=True)
        strategy.close()
        return results
    except BaseException as err:
        if strategy is not None and runtime.world_size > 1:
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

    from hpcbench.data.manifest import DataError
    from hpcbench.train.config import ConfigError

    if isinstance(err, (ConfigError, DataError)):
        print(f"hpcbench train: error: {err}", file=sys.stderr, flush=True)
    else:
        who = f"rank {rank} " if rank is not None else ""
        print(
            f"hpcbench train: {who}failed: {type(err).__name__}: {err}", file=sys.stderr, flush=True
        )
        traceback.print_exception(err)
        sys.stderr.flush()
