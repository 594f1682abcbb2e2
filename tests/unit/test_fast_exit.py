"""Leaving without the interpreter's teardown (:mod:`hpcbench.fast_exit`), in real processes: the
status kept, the threads waited for, the exit functions run, the buffered output out, and MPI
finalized under a real mpiexec."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import have_module, mpiexec_available, require

LEAVES = """
import atexit, sys, threading, time
from pathlib import Path
from hpcbench.fast_exit import exit_now

out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))

def late():
    time.sleep(0.3)
    (out / "thread").write_text("finished")

threading.Thread(target=late).start()
sys.stdout.write("no newline, still in the buffer")
sys.stderr.write("and on stderr")
exit_now(3)
raise AssertionError("exit_now returned")
"""


def test_the_status_threads_exit_functions_and_buffered_output_all_survive(tmp_path: Path):
    r = subprocess.run(
        [sys.executable, "-c", LEAVES, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 3, r.stderr
    assert r.stdout == "no newline, still in the buffer"
    assert r.stderr == "and on stderr"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "finished"


FINALIZED = """
import sys
from pathlib import Path
from mpi4py import MPI
from hpcbench.fast_exit import exit_now

comm = MPI.COMM_WORLD
marker = Path(sys.argv[1]) / f"finalized-{comm.Get_rank()}"

def on_finalize(comm, keyval, value):  # MPI_Finalize deletes COMM_SELF's attributes first
    marker.write_text("yes")
    return MPI.SUCCESS

keyval = MPI.Comm.Create_keyval(delete_fn=on_finalize)
MPI.COMM_SELF.Set_attr(keyval, "watch")
comm.Barrier()
exit_now(0)
"""


POOLS = """
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from hpcbench.fast_exit import exit_now

threads = ThreadPoolExecutor(2)
processes = ProcessPoolExecutor(1)  # torch.compile's inductor keeps pools like these
assert threads.submit(pow, 2, 3).result() == 8 and processes.submit(pow, 2, 4).result() == 16
exit_now(0)
"""


def test_a_process_holding_executor_pools_leaves_instead_of_waiting_for_them(tmp_path: Path):
    """concurrent.futures' worker threads are not daemons: the interpreter tells them to stop
    (threading's own exit hooks) before it waits for them, and so must exit_now."""
    r = subprocess.run(
        [sys.executable, "-c", POOLS], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr


def test_mpi_is_finalized_on_every_rank_and_mpiexec_sees_every_rank_end_well(tmp_path: Path):
    """Four ranks, twice: a rank that finalized MPI and then left by ``os._exit`` (without the C
    libraries' exit handlers) was killed by MPICH's process manager in 5 launches of 6."""
    require(mpiexec_available() and have_module("mpi4py"), "mpiexec and mpi4py")
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(FINALIZED))
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    mpiexec = shutil.which("mpiexec", path=path)
    for launch in ("first", "second"):
        out = tmp_path / launch
        out.mkdir()
        r = subprocess.run(
            [str(mpiexec), "-n", "4", sys.executable, str(script), str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(p.name for p in out.glob("finalized-*")) == [
            f"finalized-{k}" for k in range(4)
        ]
