"""``python -m hpcbench.train``: run one training (:func:`hpcbench.train.entry.run_training`) and
turn its outcome into an exit status.

Exit status: 0 done; 2 an option or dataset the user can fix (one line, also under mpiexec: every
rank finds it and exits by itself); 1 a diverged training (one line, every rank stops at the same
step) or anything else, after printing this rank's traceback and stopping every other rank
(MPI_Abort under mpiexec; torchrun's agent and ``srun --kill-on-bad-exit`` stop the others when
this process exits).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from hpcbench.launch import line_buffered_output

    line_buffered_output()
    from hpcbench.train.entry import report, run_training
    from hpcbench.train.failures import exit_code

    try:
        run_training(argv)
        return 0
    except SystemExit as err:  # argparse: --help, or a usage error already printed
        return err.code if isinstance(err.code, int) else 2
    except BaseException as err:  # report and exit non-zero (the others are stopped)
        if not getattr(err, "hpcbench_reported", False):
            report(err)
        return exit_code(err)


if __name__ == "__main__":
    sys.exit(main())
