"""``python -m hpcbench.predict``: classify images with a trained checkpoint, in one process or as
an MPI pipeline (:func:`hpcbench.predict.entry.run_prediction`), and turn the outcome into an exit
status.

Exit status: 0 done; 2 an option, checkpoint or input the user can fix (one line; under MPI
every rank exits by itself), or an unreadable image with ``--strict``; 1 anything else, after the
failing rank printed its rank, role and traceback and stopped every other rank (MPI_Abort).

glibc's allocator keeps the memory a batch frees for the next batch (:mod:`hpcbench.allocator`),
and the process leaves without the interpreter's teardown (:mod:`hpcbench.fast_exit`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from hpcbench.allocator import keep_freed_memory
    from hpcbench.this_rank import line_buffered_output

    keep_freed_memory()

    line_buffered_output()
    from hpcbench.predict.config import PredictError
    from hpcbench.predict.entry import run_prediction

    try:
        run_prediction(argv)
        return 0
    except SystemExit as err:  # argparse: --help, or a usage error already printed
        return err.code if isinstance(err.code, int) else 2
    except PredictError as err:
        if not getattr(err, "hpcbench_reported", False) and _launch_rank() == 0:
            print(f"hpcbench predict: error: {err}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("hpcbench predict: interrupted", file=sys.stderr, flush=True)
        return 130


def _launch_rank() -> int:
    """This process's rank (every rank meets an error in the options; rank 0 says it)."""
    from hpcbench.this_rank import detect_launch

    return detect_launch().rank


if __name__ == "__main__":
    from hpcbench.fast_exit import exit_now

    exit_now(main())
