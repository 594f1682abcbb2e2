"""Batches from the reader to the device: stored pixels (uint8 or float16) made normalised float32,
staged on a side stream on a GPU so that the copy overlaps the step."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hpcbench.data.manifest import Manifest


class Normalizer:
    """Stored pixels (uint8 or float16) -> normalised float32 on the device, in two halves:
    :meth:`stage` moves a batch to the device as stored (on a GPU through pinned memory, a
    non-blocking copy on a side stream: it may run in the prefetch thread), :meth:`normalize`
    makes it float32 on the compute stream."""

    def __init__(
        self,
        manifest: Manifest,
        device: torch.device,
        layout: torch.memory_format = torch.contiguous_format,
    ) -> None:
        scale, shift = manifest.normalization()
        self.layout = layout  # of a 4-d batch (--channels-last)
        self.scale, self.shift = (
            torch.from_numpy(scale).to(device),
            torch.from_numpy(shift).to(device),
        )
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def stage(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, Any]:
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        if self.stream is None:
            return xt.to(self.device), yt.to(self.device), None
        xt, yt = xt.pin_memory(), yt.pin_memory()
        with torch.cuda.stream(self.stream):
            xd = xt.to(self.device, non_blocking=True)
            yd = yt.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        return xd, yd, copied

    def normalize(
        self, xd: torch.Tensor, yd: torch.Tensor, copied: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if copied is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(copied)
            xd.record_stream(current)  # the side stream's memory is used here
            yd.record_stream(current)
        if xd.dim() == 4 and self.layout != torch.contiguous_format:
            x = xd.to(torch.float32, memory_format=self.layout)
        else:
            x = xd.float()
        return x.mul_(self.scale).add_(self.shift), yd

    def __call__(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self.normalize(*self.stage(x, y))
