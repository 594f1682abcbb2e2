"""``python -m hpcbench.train``: parse, set up the rank, run, report; fail fast on any rank.

Exit status: 0 done; 2 an option or dataset the user can fix (one line); 1 anything else, after
printing this rank's traceback and stopping every other rank (MPI_Abort under mpiexec; torchrun's
agent and ``srun --kill-on-bad-exit`` stop the others when this process exits).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from hpcbench.train.env import line_buffered_output

    line_buffered_output()
    from hpcbench.data.manifest import DataError
    from hpcbench.train.config import ConfigError, parse_args

    try:
        config = parse_args(argv)
    except ConfigError as err:
        print(f"hpcbench train: error: {err}", file=sys.stderr)
        return 2
    from hpcbench.train import loop
    from hpcbench.train.results import summary, write_results
    from hpcbench.train.runtime import make_runtime
    from hpcbench.train.strategies import choose, make_strategy

    strategy = None
    try:
        runtime = make_runtime(config.device, config.threads)
        rank = runtime.rank

        def log(message: str) -> None:
            if rank == 0:
                print(message, flush=True)

        strategy = make_strategy(choose(config, runtime), config, runtime)
        results = loop.run(config, runtime, strategy, log)
        if rank == 0:
            run_dir = Path(config.output_dir or _default_run_dir()).resolve()
            paths = write_results(run_dir, results)
            print(summary(results, paths), flush=True)
        strategy.close()
        return 0
    except (ConfigError, DataError) as err:
        print(f"hpcbench train: error: {err}", file=sys.stderr, flush=True)
        _stop_others(strategy)
        return 2
    except BaseException:  # noqa: BLE001 - report, stop the other ranks, exit non-zero
        traceback.print_exc()
        sys.stderr.flush()
        _stop_others(strategy)
        return 1


def _default_run_dir() -> str:
    import os
    import time

    return os.environ.get("HPCBENCH_RUN_DIR") or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}"


def _stop_others(strategy) -> None:  # noqa: ANN001
    if strategy is not None and strategy.runtime.world_size > 1:
        strategy.abort()


if __name__ == "__main__":
    sys.exit(main())
