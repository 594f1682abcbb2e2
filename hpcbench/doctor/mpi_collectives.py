"""The doctor's all-reduce over MPI (mpi4py), for jobs whose training reduces through MPI (the
trainer's ``mpi`` strategy): the few calls of ``torch.distributed`` the sweeps make
(``all_reduce``, ``new_group``, ``destroy_process_group``), answered by ``MPI.COMM_WORLD`` on the
tensors' host memory, so that the same sweep measures either backend the same way."""

from __future__ import annotations

from typing import Any


class MpiUnavailable(RuntimeError):
    """``--backend mpi`` where the ranks are not one MPI world: one line saying why."""


class MpiCollectives:
    """The subset of ``torch.distributed`` the doctor's sweeps use, over ``MPI.COMM_WORLD``."""

    def __init__(self, rank: int, world: int) -> None:
        try:
            from mpi4py import MPI
        except ImportError as err:
            raise MpiUnavailable(f"--backend mpi: mpi4py cannot be imported ({err})") from None
        self.mpi = MPI
        self.comm = MPI.COMM_WORLD
        if self.comm.Get_size() != world or self.comm.Get_rank() != rank:
            raise MpiUnavailable(
                f"--backend mpi: MPI sees rank {self.comm.Get_rank()} of {self.comm.Get_size()}, "
                f"the launch rank {rank} of {world}: start the doctor with mpiexec (or srun with "
                "the site's MPI plugin)"
            )
        self._groups: list[Any] = []

    def new_group(self, members: list[int]) -> Any:
        """Every rank calls it, as torch's: members get their communicator, the others None."""
        color = 0 if self.comm.Get_rank() in members else self.mpi.UNDEFINED
        group = self.comm.Split(color, key=self.comm.Get_rank())
        if group == self.mpi.COMM_NULL:
            return None
        self._groups.append(group)
        return group

    def all_reduce(self, tensor: Any, group: Any = None) -> None:
        (group or self.comm).Allreduce(self.mpi.IN_PLACE, tensor.numpy(), op=self.mpi.SUM)

    def destroy_process_group(self) -> None:
        for group in self._groups:
            group.Free()
        self._groups.clear()
