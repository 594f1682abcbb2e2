"""Times an in-place sum allreduce of a float32 buffer, through mpi4py (run under mpiexec) or
torch.distributed/gloo (run under torchrun); rank 0 prints the median milliseconds as JSON.

    mpiexec -n 2 python benchmarks/allreduce_worker.py mpi 25 30
    torchrun --standalone --nproc-per-node 2 benchmarks/allreduce_worker.py gloo 25 30
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np


def main() -> None:
    kind, megabytes, repeats = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    n = int(megabytes * 2**20 // 4)
    times = []
    if kind == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        buf = np.ones(n, dtype=np.float32)
        for _ in range(repeats + 3):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            times.append(time.perf_counter() - t)
        rank = comm.Get_rank()
    else:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        buf = torch.ones(n, dtype=torch.float32)
        for _ in range(repeats + 3):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - t)
        rank = dist.get_rank()
        dist.destroy_process_group()
    if rank == 0:
        print(
            json.dumps(
                {
                    "kind": kind,
                    "megabytes": megabytes,
                    "median_ms": 1000 * statistics.median(times[3:]),
                }
            )
        )


if __name__ == "__main__":
    main()
