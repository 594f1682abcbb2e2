"""Per-epoch measurements: loss, accuracy and macro-F1 from a confusion matrix accumulated on
the device (no host sync per step), phase timers that synchronise the device before reading
the clock, and the phases' wall-clock windows (unix times, for the energy sampler's figures)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from hpcbench.run_documents import PhaseWindow
from hpcbench.train.runtime import Runtime


class Meter:
    """Sums over one phase of one epoch on this rank; reduced over ranks by the strategy."""

    def __init__(self, num_classes: int, device: torch.device) -> None:
        self.k = num_classes
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.confusion = torch.zeros(num_classes * num_classes, dtype=torch.int64, device=device)

    @torch.no_grad()
    def update(self, logits: torch.Tensor, labels: torch.Tensor, mean_loss: torch.Tensor) -> None:
        self.loss_sum += mean_loss.double() * len(labels)
        pred = logits.argmax(1)
        self.confusion += torch.bincount(labels * self.k + pred, minlength=self.k * self.k)

    def vector(self) -> np.ndarray:
        """[loss sum, confusion…] as float64, for one all-reduce."""
        return np.concatenate(
            [[self.loss_sum.item()], self.confusion.cpu().numpy().astype(np.float64)]
        )

    @staticmethod
    def summarise(vector: np.ndarray, k: int) -> dict[str, float]:
        confusion = vector[1:].reshape(k, k)
        n = confusion.sum()
        tp = np.diag(confusion)
        predicted, actual = confusion.sum(0), confusion.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = np.where(predicted + actual > 0, 2 * tp / (predicted + actual), 0.0)
        present = actual > 0
        return {
            "loss": float(vector[0] / n) if n else float("nan"),
            "accuracy": float(tp.sum() / n) if n else float("nan"),
            "macro_f1": float(f1[present].mean()) if present.any() else float("nan"),
            "samples": int(n),
        }


class Clock:
    """Wall-clock seconds with the device synchronised first (CUDA work is asynchronous)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def __call__(self) -> float:
        self.runtime.synchronize()
        return time.perf_counter()

    def wall(self) -> float:
        """Unix seconds, with the device synchronised first."""
        self.runtime.synchronize()
        return time.time()


class PhaseWindows:
    """This rank's wall-clock bounds of each phase: ``[{"phase", "start", "end"}]`` in unix
    seconds, each bound read after synchronising the device (metrics.json's phase_windows)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.rows: list[PhaseWindow] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.clock.wall()
        yield
        self.rows.append({"phase": name, "start": start, "end": self.clock.wall()})


class EpochSeconds:
    """An epoch's training seconds on this rank: (train, data wait, communication), counted on
    from ``before`` (what a resumed epoch had done), checkpoint pauses left out of train."""

    def __init__(self, clock: Clock, before: np.ndarray) -> None:
        self.clock, self.before = clock, before
        self.start = clock()
        self.data = self.comm = self.paused = 0.0

    def so_far(self) -> list[float]:
        train = self.clock() - self.start - self.paused + float(self.before[0])
        return [train, self.data + float(self.before[1]), self.comm + float(self.before[2])]

    @contextmanager
    def pause(self) -> Iterator[None]:
        """Time that is not training time (a checkpoint's)."""
        p0 = time.perf_counter()
        try:
            yield
        finally:
            self.paused += time.perf_counter() - p0
