"""The mpi strategy's gradient buckets: a flat buffer per group of parameters (the first one
small, so that its all-reduce starts early), whether this MPI takes CUDA buffers, and the sum
of 16-bit floats as an MPI operation for compressed gradients."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

FIRST_BUCKET_BYTES = 1 << 20


@dataclass
class Bucket:
    params: list[nn.Parameter]
    flat: torch.Tensor  # float32 host buffer
    spans: list[tuple[int, int]] = field(default_factory=list)
    views: bool = False  # the parameters' .grad are slices of ``flat``
    wire: torch.Tensor | None = None  # --grad-compression: the 16-bit copy that travels
    residual: torch.Tensor | None = None  # --error-feedback: what the rounding lost
    pending: int = 0
    request: object = None
    ready: object = None  # on a GPU: the event after which MPI may read ``flat``
    returned: object = None  # on a GPU: the event after which the sums have left ``flat``

    @property
    def array(self) -> np.ndarray | torch.Tensor:
        """What the all-reduce sends: the bucket (a CUDA tensor as itself: mpi4py takes its
        ``__cuda_array_interface__``), or its 16-bit copy as uint16 words."""
        if self.wire is not None:
            return self.wire.view(torch.uint16).numpy()
        return self.flat if self.flat.is_cuda else self.flat.numpy()


def mpi_takes_cuda_buffers() -> bool | None:
    """Whether the MPI library in this process says it takes CUDA device buffers
    (``MPIX_Query_cuda_support``, after MPI_Init); None when no loaded MPI library exports
    that query."""
    import ctypes

    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = sorted(
            {
                line.split()[-1]
                for line in maps
                if "libmpi" in line and line.rstrip().split()[-1].startswith("/")
            }
        )
    for path in paths:
        try:
            query = ctypes.CDLL(path).MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        return bool(query())
    return None


def is_dense(p: torch.Tensor) -> bool:
    """Whether ``p``'s elements fill its storage without gaps or overlaps (contiguous or
    channels_last): a slice of a bucket can then take its strides."""
    return p.is_contiguous() or (
        p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)
    )


def slot(flat: torch.Tensor, lo: int, hi: int, p: torch.Tensor) -> torch.Tensor:
    """``p``'s slice of a bucket, shaped as ``p`` and laid out as ``p`` is in memory (a
    channels_last weight's elements in NHWC order). Every rank lays its buckets out so, whether
    its gradients are the slices themselves or are copied in and out of them (a GPU rank beside
    CPU ranks), so that the all-reduce adds each element to the same element of every rank."""
    part = flat[lo:hi]
    return part.as_strided(p.shape, p.stride()) if is_dense(p) else part.view(p.shape)


WIRE_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def sum_16bit(MPI, dtype: torch.dtype):  # noqa: N803 - the mpi4py module
    """A commutative MPI operation that adds buffers of 16-bit floats (carried as uint16)."""

    def add(inbuf, inoutbuf, datatype) -> None:
        a = torch.from_numpy(np.frombuffer(inbuf, dtype=np.uint16)).view(dtype)
        b = torch.from_numpy(np.frombuffer(inoutbuf, dtype=np.uint16)).view(dtype)
        b.add_(a)

    return MPI.Op.Create(add, commute=True)
