"""``ddp``: PyTorch DistributedDataParallel (gloo on CPU, nccl on GPU).

The process group comes from torchrun's variables, or from :func:`hpcbench.train.runtime.rendezvous`
under srun/mpiexec. Unequal rank weights: DDP averages gradients over ranks, so each rank scales
its loss by ``weight × world`` and the average becomes the weighted sum. DDP's settings are its
fastest for these models: gradients as views of its buckets (``gradient_as_bucket_view``, zeroed
in place, never copied) and ``static_graph`` (every model here uses every parameter in every
step, the same way). ``--grad-compression fp16|bf16`` uses DDP's own compression hooks
(each bucket cast to the 16-bit type, all-reduced in it, divided and widened back). Non-overlapped
communication is measured with a comm hook wrapping DDP's own allreduce hook: the time from the
last bucket becoming ready to the end of backward; on a GPU as device time between two CUDA
events, read when the epoch ends (a host clock there would count the backward still queued on the
GPU as communication, and its synchronisation would stop the host from running ahead every step).
A world of one rank communicates nothing: no allreduce, no buffer broadcast, no communication time.
"""

from __future__ import annotations

import gc
import inspect
import os
import time
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    allreduce_hook,
    bf16_compress_hook,
    fp16_compress_hook,
)

from hpcbench.this_rank import MPI_LAUNCHERS
from hpcbench.train.config import TrainConfig
from hpcbench.train.runtime import Runtime, rendezvous
from hpcbench.train.strategies.base import Strategy


def no_communication(state, bucket):
    """A world of one: the bucket is already the sum (DDP's own hook would still launch a
    collective per bucket)."""
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


class DDPStrategy(Strategy):
    name = "ddp"

    def __init__(self, config: TrainConfig, runtime: Runtime) -> None:
        super().__init__(config, runtime)
        if not dist.is_initialized():
            if runtime.launch.launcher != "torchrun":
                addr, port = rendezvous(runtime.launch)
                os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
            dist.init_process_group(
                runtime.backend,
                init_method="env://",
                rank=runtime.rank,
                world_size=runtime.world_size,
                timeout=timedelta(minutes=10),
            )
        self._last_ready = 0.0
        self._ready: torch.cuda.Event | None = None  # on a GPU: the last bucket's ready event
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # (ready, done) events

    def setup(self, model: nn.Module, weight: float) -> nn.Module:
        model = model.to(self.runtime.device)
        if self.config.data.sync_bn:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        self.eval_model = model
        on_gpu = self.runtime.device.type == "cuda"
        alone = self.runtime.world_size == 1
        self.model = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[self.runtime.device.index] if on_gpu else None,
            bucket_cap_mb=self.config.parallelism.bucket_mb,
            gradient_as_bucket_view=True,
            static_graph=True,
            **_buffer_sync(not alone),
        )

        # Unannotated on purpose: register_comm_hook checks that the bucket's annotation *is*
        # dist.GradBucket, and this module's postponed annotations would make it a string.
        hook = {"none": allreduce_hook, "fp16": fp16_compress_hook, "bf16": bf16_compress_hook}[
            self.config.parallelism.grad_compression
        ]
        if alone:
            hook = no_communication

        def timed_allreduce(state, bucket):
            if alone:
                return hook(state, bucket)
            if on_gpu:  # where the GPU will be when this bucket is ready (no host wait)
                self._ready = torch.cuda.Event(enable_timing=True)
                self._ready.record()
            else:
                self._last_ready = time.perf_counter()
            return hook(state, bucket)

        self.model.register_comm_hook(None, timed_allreduce)
        self.loss_scale = weight * self.runtime.world_size
        return self.model

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        # The gradients are views of DDP's buckets: zeroed in place, they stay views (set to
        # None, DDP would copy each new gradient into its bucket again).
        optimizer.zero_grad(set_to_none=False)

    def finish_gradients(self) -> float:
        if self.runtime.world_size == 1:
            return 0.0
        if self.runtime.device.type == "cuda":
            # The stream waits for the last allreduce after DDP's backward: the device time from
            # the last bucket becoming ready to then is the communication backward did not hide,
            # read once the device has caught up (settled_comm_s), not now.
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            if self._ready is not None:
                self._pairs.append((self._ready, done))
            return 0.0
        # On CPUs DDP's backward returned after its last allreduce finished.
        return max(0.0, time.perf_counter() - self._last_ready)

    def compute_done_event(self) -> Any:
        return self._ready  # the last bucket's ready event on a GPU (None on CPUs)

    def settled_comm_s(self) -> float:
        total = 0.0
        for ready, done in self._pairs:
            done.synchronize()
            total += max(0.0, ready.elapsed_time(done)) / 1000
        self._pairs.clear()
        return total

    def all_reduce(self, values: np.ndarray, op: str = "sum") -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(self.runtime.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return t.cpu().numpy()

    def barrier(self) -> None:
        dist.barrier()

    def gather_object(self, obj: object) -> list[object] | None:
        # Over the run's process group; with nccl the pickled bytes go through the current GPU,
        # which make_runtime set.
        out = [None] * self.runtime.world_size if self.runtime.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast_object(self, obj: object) -> object:
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def broadcast_tensors(self, tensors: list[torch.Tensor]) -> None:
        """One flat buffer per dtype, on the CPU under gloo (ranks on different devices), on the
        GPU under nccl."""
        device = self.runtime.device if self.runtime.backend == "nccl" else torch.device("cpu")
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        with torch.no_grad():
            for group in by_dtype.values():
                flat = torch.cat([t.detach().reshape(-1).to(device) for t in group])
                dist.broadcast(flat, src=0)
                at = 0
                for t in group:
                    t.copy_(flat[at : at + t.numel()].view_as(t))
                    at += t.numel()

    def abort(self) -> None:
        if self.runtime.launch.launcher in MPI_LAUNCHERS:
            from mpi4py import MPI  # no agent to stop the others under mpiexec

            MPI.COMM_WORLD.Abort(1)

    def close(self) -> None:
        # The DDP wrapper and its comm hook (which refers back to this object) form a cycle; left
        # to the collector it may be freed at interpreter exit, after the process group, and its
        # C++ reducer then aborts the process ("terminate called without an active exception",
        # seen under load). Free it now, then leave together.
        self.model = None
        self.eval_model = None
        gc.collect()
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def _buffer_sync(on: bool) -> dict[str, bool]:
    """DDP's buffer synchronisation before each forward: ``forward_sync_buffers`` where this
    torch has it (``broadcast_buffers`` warns there, on every rank), else ``broadcast_buffers``.
    Buffers are synchronised at the start either way."""
    params = inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
    return {"forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers": on}
