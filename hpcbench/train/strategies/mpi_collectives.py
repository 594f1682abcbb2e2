"""The mpi strategy's collectives over its communicator: the epoch's index scattered from rank
0, all-reduce of figures, barrier, gather and broadcast of objects and tensors, abort, and
leaving together."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from hpcbench.train.data import TrainData
    from hpcbench.train.runtime import Runtime


class MpiCollectives:
    """What ranks do together through mpi4py, for a strategy that holds ``comm`` and ``MPI``."""

    comm: Any
    MPI: Any
    runtime: Runtime

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def share_index(self, data: TrainData, epoch: int) -> np.ndarray | None:
        if data.sharded is not None:
            return None
        counts = [data.steps * b for b in data.batch_sizes]
        mine = np.empty(counts[self.runtime.rank], dtype=np.int64)
        send = None
        if self.runtime.rank == 0:
            slices = data.rank_slices(data.epoch_index(epoch))
            flat = np.concatenate([s.reshape(-1) for s in slices])
            displs = np.cumsum([0] + counts[:-1])
            send = [flat, counts, displs, self.MPI.INT64_T]
        self.comm.Scatterv(send, [mine, self.MPI.INT64_T], root=0)
        return mine.reshape(data.steps, data.batch_size)

    def all_reduce(self, values: np.ndarray, op: str = "sum") -> np.ndarray:
        out = np.ascontiguousarray(values, dtype=np.float64).copy()
        self.comm.Allreduce(
            self.MPI.IN_PLACE, out, op=self.MPI.SUM if op == "sum" else self.MPI.MAX
        )
        return out

    def barrier(self) -> None:
        self.comm.Barrier()

    def gather_object(self, obj: object) -> list[object] | None:
        return self.comm.gather(obj, root=0)

    def broadcast_object(self, obj: object) -> object:
        return self.comm.bcast(obj, root=0)

    def broadcast_tensors(self, tensors: list[torch.Tensor]) -> None:
        self._broadcast(tensors)

    def abort(self) -> None:
        self.comm.Abort(1)

    def close(self) -> None:
        # Leave together: a rank that exits first (with a non-zero status after an agreed stop)
        # could make the launcher stop the others while they still print.
        self.comm.Barrier()
