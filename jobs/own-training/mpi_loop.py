"""The smallest measured MPI training loop: logistic regression with numpy, the gradient summed
over the ranks with mpi4py's Allreduce, measured with hpcbench.measure (the ``# hpcbench``
lines). No torch at all.

    mpiexec -n 4 python jobs/own-training/mpi_loop.py --epochs 5
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from hpcbench import measure  # hpcbench

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--samples", type=int, default=20_000, help="in all, shared by the ranks")
p.add_argument("--batch", type=int, default=256, help="per rank")
args = p.parse_args()
comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()

with measure.run(model="logistic-regression", config=vars(args)) as m:  # hpcbench
    with m.phase("setup"):  # hpcbench
        rng = np.random.default_rng(rank)
        x = rng.normal(size=(args.samples // world, 32))
        y = (x @ np.linspace(-1, 1, 32) > 0).astype(float)
        w = np.zeros(32)
    for _ in range(args.epochs):
        with m.phase("train"):  # hpcbench
            for i in range(0, len(x), args.batch):
                xb, yb = x[i : i + args.batch], y[i : i + args.batch]
                grad = xb.T @ (1 / (1 + np.exp(-xb @ w)) - yb) / len(xb)
                with m.phase("comm"):  # hpcbench
                    comm.Allreduce(MPI.IN_PLACE, grad)
                w -= 0.5 * grad / world
                m.step(samples=len(xb))  # hpcbench
        right = comm.allreduce(int(((x @ w > 0) == y).sum()))
        m.epoch(train_accuracy=right / (len(x) * world))  # hpcbench
    m.final(test_accuracy=right / (len(x) * world))  # hpcbench
