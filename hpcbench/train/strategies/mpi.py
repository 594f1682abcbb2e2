"""``mpi``: data-parallel training with mpi4py, as the reference studies did it by hand, but fast.

- The index: rank 0 draws the epoch's global batches and ``Scatterv``s each rank its slice
  (int64 buffers; ranks may have different batch sizes).
- Initial weights and buffers: ``Bcast`` from rank 0 (flat buffers, one per dtype); buffers
  (batch-norm statistics) again before every forward, as DDP's ``broadcast_buffers`` does.
- Gradients: parameters are grouped into contiguous float32 buckets in reverse order (the order
  backward produces them; the first bucket 1 MiB, then ``--bucket-mb``, as DDP). On the CPU each
  parameter's ``.grad`` *is* its slice of a bucket (as DDP's ``gradient_as_bucket_view``):
  backward accumulates into the bucket (zeroed before the step, one fill per bucket), and the
  sums land where the optimiser reads them; nothing is copied in or out. Each rank's share of
  the global batch scales its loss before backward (as DDP's averaging does), so the buckets
  need no scaling pass either. A post-accumulate-grad hook counts a bucket's gradients; when it
  is complete a non-blocking ``Iallreduce(IN_PLACE, SUM)`` starts, while backward goes on.
  Buckets start strictly in order, so every rank issues the same collectives in the same order.
  After backward the rank waits for all of them. Uppercase, buffer-based calls only: nothing is
  pickled in a training step. ``--no-overlap`` starts every bucket after backward.
- GPU gradients: when the MPI library takes CUDA buffers (``--cuda-aware-mpi auto`` asks it:
  ``MPIX_Query_cuda_support``, which MPICH and Open MPI both export), the buckets live on the
  GPU, the gradients are views of them as on the CPU, and each bucket goes to ``Iallreduce``
  as a device buffer once the stream that computed it has passed it (an event, polled: the host
  never waits for the GPU in a gradient hook). Otherwise (and with compression, whose summing
  operation runs on the host) they are staged: when a bucket is ready its gradients are copied
  into its pinned host bucket on a side stream, overlapping the rest of backward, and its
  all-reduce starts once that copy is done (buckets still start strictly in order); the sums go
  back to the GPU without blocking the host.
- A world of one rank communicates nothing: no buckets, no hooks, no broadcasts; the step is
  ``single``'s.
- ``--grad-compression bf16|fp16``: each bucket is rounded into a 16-bit copy, and that copy is
  all-reduced (half the bytes) with a sum in the 16-bit type (a user-defined MPI operation: MPI
  has no bfloat16; the additions are torch's, float32 inside, rounded once per addition); the
  sums are widened back into the bucket. Every rank gets the same bits. With
  ``--error-feedback`` each rank keeps what the rounding lost and adds it to the next step's
  gradients first (per-rank state, saved in checkpoints). Mixed precision (``--precision``) does
  not change any of this: the gradients are float32 either way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
from torch import nn

from hpcbench.train.config import ConfigError, TrainConfig
from hpcbench.train.drills import drill_for
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies.base import Strategy
from hpcbench.train.strategies.mpi_buckets import (
    FIRST_BUCKET_BYTES,
    WIRE_TYPES,
    Bucket,
    is_dense,
    mpi_takes_cuda_buffers,
    slot,
    sum_16bit,
)
from hpcbench.train.strategies.mpi_collectives import MpiCollectives

if TYPE_CHECKING:
    pass


class MPIStrategy(MpiCollectives, Strategy):
    name = "mpi"

    def __init__(self, config: TrainConfig, runtime: Runtime) -> None:
        super().__init__(config, runtime)
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        if self.comm.Get_size() != runtime.world_size:
            raise ConfigError(
                f"--strategy mpi: the launcher started {runtime.world_size} ranks but MPI sees "
                f"{self.comm.Get_size()} (start with mpiexec/srun --mpi=pmi2, with mpi4py built for that MPI)"
            )
        self.overlap = config.parallelism.overlap
        if (
            self.overlap
            and runtime.device.type == "cuda"
            and MPI.Query_thread() < MPI.THREAD_MULTIPLE
        ):
            self.overlap = False  # CUDA hooks run on autograd's threads
        self.buckets: list[Bucket] = []
        self.device_buckets = (
            runtime.device.type == "cuda"
            and config.parallelism.grad_compression == "none"
            and (
                config.parallelism.cuda_aware_mpi == "on"
                or (config.parallelism.cuda_aware_mpi == "auto" and mpi_takes_cuda_buffers())
            )
        )
        drill = drill_for(runtime.rank)  # it rehearses a GPU rank beside CPU ranks: staged
        self.rehearses_staging = drill is not None and drill.mode == "other-device"
        self._bucket_of: dict[nn.Parameter, int] = {}
        self._next = 0  # the next bucket to stage (in order)
        self._staged: list[Bucket] = []  # staged, not yet started (in order)
        self._copy_stream = (  # staged GPU gradients go to the host on this stream
            torch.cuda.Stream(runtime.device)
            if runtime.device.type == "cuda" and not self.device_buckets
            else None
        )
        self._buffers: list[torch.Tensor] = []
        self.wire_type = WIRE_TYPES.get(config.parallelism.grad_compression)
        self.op = MPI.SUM if self.wire_type is None else sum_16bit(MPI, self.wire_type)

    # ---- set-up ---------------------------------------------------------------------------------
    def setup(self, model: nn.Module, weight: float) -> nn.Module:
        self.model = self.eval_model = model.to(self.runtime.device)
        self.loss_scale = weight  # the weighted sum over ranks is the global mean
        if self.comm.Get_size() == 1:  # a world of one communicates nothing: no buckets, no hooks
            return self.model
        self._broadcast(list(model.parameters()) + list(model.buffers()))
        self._buffers = [b for b in model.buffers()]
        params = [p for p in model.parameters() if p.requires_grad]
        cap, current, size = FIRST_BUCKET_BYTES, [], 0
        for p in reversed(params):
            current.append(p)
            size += p.numel() * 4
            if size >= cap:
                self._add_bucket(current)
                current, size, cap = [], 0, int(self.config.parallelism.bucket_mb * 2**20)
        if current:
            self._add_bucket(current)
        if self.overlap:
            for p in params:
                p.register_post_accumulate_grad_hook(self._grad_ready)
        return self.model

    def _add_bucket(self, params: list[nn.Parameter]) -> None:
        n = sum(p.numel() for p in params)
        device = self.runtime.device if self.device_buckets else torch.device("cpu")
        flat = torch.zeros(
            n,
            dtype=torch.float32,
            device=device,
            pin_memory=self.runtime.device.type == "cuda" and device.type == "cpu",
        )
        views = not self.rehearses_staging and all(
            p.device == flat.device and p.dtype == torch.float32 and is_dense(p) for p in params
        )
        spans, at = [], 0
        for p in params:
            spans.append((at, at + p.numel()))
            self._bucket_of[p] = len(self.buckets)
            if views:  # in the parameter's own layout (channels_last too): what fused steps want
                p.grad = slot(flat, at, at + p.numel(), p)
            at += p.numel()
        bucket = Bucket(params, flat, spans, views=views, pending=len(params))
        if self.wire_type is not None:
            bucket.wire = torch.empty(n, dtype=self.wire_type)
            if self.config.parallelism.error_feedback:
                bucket.residual = torch.zeros(n, dtype=torch.float32)
        self.buckets.append(bucket)

    def describe(self) -> str:
        if not self.buckets:
            return "one rank: no buckets, nothing communicated"
        sizes = "/".join(f"{b.flat.numel() * 4 / 2**20:.1f}" for b in self.buckets)
        where = (
            "gradients in the buckets"
            if all(b.views for b in self.buckets)
            else "gradients staged through host buckets"
        )
        if self.device_buckets:
            where += ", CUDA buffers passed to MPI"
        wire = (
            f", sent as {self.config.parallelism.grad_compression}"
            if self.wire_type is not None
            else ""
        )
        return f"{len(self.buckets)} bucket(s) of {sizes} MiB, {where}{wire}"

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.buckets:
            optimizer.zero_grad(set_to_none=True)
        for b in self.buckets:
            if b.views:
                b.flat.zero_()
            else:
                for p in b.params:
                    p.grad = None

    def gradients(self) -> list[torch.Tensor]:
        """The buckets themselves where the gradients live in them (three tensors, not one per
        parameter)."""
        if not self.buckets:
            return super().gradients()
        found: list[torch.Tensor] = []
        for b in self.buckets:
            if b.views:
                found.append(b.flat)
            else:
                found.extend(p.grad for p in b.params if p.grad is not None)
        return found

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Bcast tensors from rank 0, one flat host buffer per dtype."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1).cpu() for t in group])
            self.comm.Bcast(flat.numpy(), root=0)
            at = 0
            with torch.no_grad():
                for t in group:
                    t.copy_(flat[at : at + t.numel()].view_as(t))
                    at += t.numel()

    # ---- the step -------------------------------------------------------------------------------
    def before_forward(self) -> None:
        if self._buffers:
            self._broadcast(self._buffers)

    def _grad_ready(self, p: nn.Parameter) -> None:
        b = self.buckets[self._bucket_of[p]]
        b.pending -= 1
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0:
            self._stage(self.buckets[self._next])
            self._next += 1
        self._start_staged()
        started = [x.request for x in self.buckets if x.request is not None]
        if started:  # let MPI progress the ones already started
            with self.breakdown.part("allreduce_progress"):
                self.MPI.Request.Testall(started)

    def _stage(self, b: Bucket) -> None:
        """Get ``b``'s gradients where MPI will read them, without waiting on a GPU: a device
        bucket marks the compute stream's position; a staged one is copied to its pinned host
        bucket on a side stream once the gradients are computed (overlapping the rest of
        backward); on a CPU the copy is done now. The bucket then waits its turn
        (:meth:`_start_staged`)."""
        b.ready = None
        if b.flat.is_cuda:
            b.ready = torch.cuda.Event()
            b.ready.record(torch.cuda.current_stream(b.flat.device))
        elif not b.views:
            with torch.no_grad(), self.breakdown.part("bucket_copy"):
                if self._copy_stream is None:
                    for p, (lo, hi) in zip(b.params, b.spans, strict=True):
                        if p.grad is None:
                            b.flat[lo:hi].zero_()
                        else:
                            slot(b.flat, lo, hi, p).copy_(p.grad)
                else:
                    if b.returned is not None:  # last step's sums have left the host bucket
                        b.returned.synchronize()
                    computed = torch.cuda.Event()
                    computed.record(torch.cuda.current_stream(self.runtime.device))
                    with torch.cuda.stream(self._copy_stream):
                        self._copy_stream.wait_event(computed)
                        for p, (lo, hi) in zip(b.params, b.spans, strict=True):
                            if p.grad is None:
                                b.flat[lo:hi].zero_()
                            else:
                                slot(b.flat, lo, hi, p).copy_(p.grad, non_blocking=True)
                        b.ready = torch.cuda.Event()
                        b.ready.record(self._copy_stream)
        self._staged.append(b)

    def _start_staged(self, wait: bool = False) -> None:
        """Start, strictly in bucket order, the staged buckets whose gradients are in place;
        ``wait``: wait for each (after backward). Every rank must issue the same kind of
        collective for a bucket (MPI never matches a blocking Allreduce with an Iallreduce), and
        which buckets a GPU rank starts in its hooks depends on its copies' timing: so buckets
        are always started with Iallreduce, except under ``--no-overlap``, which every rank has,
        where they all start here with the blocking Allreduce (MPI's fastest paths)."""
        blocking = not self.config.parallelism.overlap
        while self._staged:
            b = self._staged[0]
            if b.ready is not None:
                if wait:
                    with self.breakdown.part("bucket_copy"):
                        b.ready.synchronize()
                elif not b.ready.query():
                    return
            self._staged.pop(0)
            self._start(b, blocking=blocking)

    def _start(self, b: Bucket, blocking: bool = False) -> None:
        """Start ``b``'s all-reduce (its gradients in place); ``blocking``: to the end now."""
        if b.wire is not None:
            with torch.no_grad(), self.breakdown.part("bucket_copy"):
                if b.residual is not None:
                    b.flat.add_(b.residual)
                b.wire.copy_(b.flat)
                if b.residual is not None:
                    torch.sub(b.flat, b.wire, out=b.residual)
        with self.breakdown.part("allreduce_start"):
            word = self.MPI.FLOAT if b.wire is None else self.MPI.UINT16_T
            if blocking:
                self.comm.Allreduce(self.MPI.IN_PLACE, [b.array, word], op=self.op)
                b.request = self.MPI.REQUEST_NULL
            else:
                b.request = self.comm.Iallreduce(self.MPI.IN_PLACE, [b.array, word], op=self.op)

    def finish_gradients(self) -> float:
        if not self.buckets:
            return 0.0
        started = time.perf_counter()
        while self._next < len(self.buckets):  # unused parameters, or --no-overlap
            self._stage(self.buckets[self._next])
            self._next += 1
        self._start_staged(wait=True)
        self.MPI.Request.Waitall([b.request for b in self.buckets])
        waited = time.perf_counter() - started
        for b in self.buckets:
            if b.wire is not None:
                with self.breakdown.part("bucket_copy"):
                    b.flat.copy_(b.wire)
            if not b.views:
                gpu = self._copy_stream is not None  # from pinned memory, without waiting
                with torch.no_grad(), self.breakdown.part("bucket_copy"):
                    for p, (lo, hi) in zip(b.params, b.spans, strict=True):
                        summed = slot(b.flat, lo, hi, p)
                        if p.grad is None:  # an unused parameter: in its own layout
                            p.grad = torch.empty_like(p)
                        p.grad.copy_(summed, non_blocking=gpu)
                    if gpu:
                        b.returned = torch.cuda.Event()
                        b.returned.record(torch.cuda.current_stream(self.runtime.device))
            b.pending, b.request = len(b.params), None
        self._next = 0
        return waited

    # ---- outside the step ------------------------------------------------------------------------
    def rank_state(self) -> dict[str, torch.Tensor]:
        """This rank's own state: the error-feedback residuals (none without them)."""
        return {
            str(i): b.residual.clone() for i, b in enumerate(self.buckets) if b.residual is not None
        }

    def load_rank_state(self, state: dict[str, torch.Tensor]) -> None:
        for i, b in enumerate(self.buckets):
            if b.residual is not None and str(i) in state:
                b.residual.copy_(state[str(i)])
