"""``python -m hpcbench.train``: run one training (:func:`hpcbench.train.entry.run_training`) and
turn its outcome into an exit status.

The stop signals (SIGUSR2, SIGTERM) are caught first thing, before the heavy imports, so that a
scheduler's early warning never kills a rank that is still starting.

Exit status: 0 done; 75 stopped by a signal after writing a checkpoint (run again with
``--resume auto``); 2 an option or dataset the user can fix (one line, also under mpiexec: every
rank finds it and exits by itself); 1 a diverged training (one line, every rank stops at the same
step) or anything else, after printing this rank's traceback and stopping every other rank
(MPI_Abort under mpiexec; torchrun's agent and ``srun --kill-on-bad-exit`` stop the others when
this process exits).

glibc's allocator keeps the memory a step frees for the next step (:mod:`hpcbench.allocator`:
a sixth less time per CPU step, measured), and the process then leaves without the
interpreter's teardown (:mod:`hpcbench.fast_exit`: about a second of CPU less per rank).
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from hpcbench.train.stopping import StopRequest

    stop = StopRequest().install()
    from hpcbench.allocator import keep_freed_memory

    keep_freed_memory()
    from hpcbench.this_rank import line_buffered_output

    line_buffered_output()
    from hpcbench.train.entry import report, run_training
    from hpcbench.train.failures import exit_code

    try:
        run_training(argv, stop, own_process=True)
        return 0
    except SystemExit as err:  # argparse: --help, or a usage error already printed
        return err.code if isinstance(err.code, int) else 2
    except BaseException as err:  # report and exit non-zero (the others are stopped)
        if not getattr(err, "hpcbench_reported", False):
            report(err)
        return exit_code(err)


if __name__ == "__main__":
    from hpcbench.fast_exit import exit_now

    exit_now(main())
