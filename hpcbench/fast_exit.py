"""Ending a process that imported torch without the interpreter's teardown.

A Python process that imported torch spends about a second of CPU after its last line (measured
on a 2-core machine: 3.3 s for ``import torch, torch._dynamo`` and a normal exit, 2.2 s when the
process leaves as below): the interpreter frees every module and object one by one and
runs the C++ destructors of torch's libraries. Each rank of each launch pays it, while its job,
its launcher and the ranks beside it wait. :func:`exit_now` does what a normal exit does that
matters, then leaves at once:

1. waits for the process's non-daemon threads as the interpreter does before it exits: first
   threading's own exit hooks, which tell concurrent.futures' worker threads (torch.compile's
   pools among them) to stop, then the threads themselves;
2. runs the functions registered with :mod:`atexit` (logging's flush, multiprocessing's clean-up
   of child processes, torch.compile's worker pool, a user's own);
3. flushes stdout and stderr;
4. finalizes MPI if mpi4py initialized it (mpi4py would at the interpreter's end: mpiexec and
   srun expect every rank to);
5. calls the C library's ``exit(status)``, as a C program ends: the exit handlers of the
   libraries loaded (MPI's, its fabrics', CUDA's) still run; Python's teardown does not.
   ``os._exit`` would skip them too, and MPICH's process manager then kills ranks that had
   finalized MPI (seen at 4 ranks in 5 launches of 6).

Everything hpcbench writes is closed before that (files are written whole under a temporary name,
then renamed), so nothing is lost. Used by ``python -m hpcbench.train`` and ``python -m
hpcbench.predict``; library calls (:func:`hpcbench.train.entry.run_training` in a notebook or
under submitit) return normally and leave the interpreter alone.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from typing import NoReturn


def exit_now(status: int) -> NoReturn:
    """Leave this process with ``status`` after its threads, exit functions, output and MPI."""
    try:
        _wait_for_threads()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.Finalize()
        # PyDLL: the GIL stays held, so no daemon thread runs Python code while libraries end
        leave = ctypes.PyDLL(None).exit
    except BaseException:  # an exit function that fails: let the interpreter end as usual
        sys.exit(status)
    leave(status)
    os._exit(status)  # not reached: exit() does not return


def _wait_for_threads() -> None:
    """What the interpreter does with threads at its end: ``threading._shutdown`` runs the hooks
    registered with ``threading._register_atexit`` (concurrent.futures stops its idle workers
    there) and joins every non-daemon thread; without them, a pool's idle worker waits for work
    for ever. Where that private function is missing, the threads are joined directly."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
        return
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
