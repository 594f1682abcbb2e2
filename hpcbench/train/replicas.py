"""Replicas on different kinds of device stay one model.

When a node has fewer GPUs than ranks, the extra ranks train on the CPU beside the GPU ranks
(``--rank-weights`` gives them a smaller share). Their gradients are summed exactly, but a GPU
and a CPU round the same update differently, so the replicas drift apart by a few units in the
last place (about 1e-9 relative after a few hundred steps). The exact replica check that every
checkpoint makes would then stop the run.

So in a run whose ranks are on more than one kind of device, every rank takes rank 0's
parameters, buffers and optimiser state (a broadcast) at every multiple of ``--resync-every``
steps, and always before a checkpoint, an evaluation and the end of the run. A resume starts every
rank from rank 0's state: it continues bit-exactly where the checkpoint fell on a step the run
re-synchronises at anyway (a multiple of ``--resync-every``, a ``--checkpoint-every`` step, an
epoch's end); one written between (a stop signal's) continues as a run re-synchronised at that
step, which departs from the uninterrupted run by the drift that was re-synchronised away. Before each re-synchronisation the
drift is measured: the largest difference of any parameter from rank 0's, relative to the
largest magnitude of that parameter, over all ranks; ``metrics.json`` keeps the count and the
largest drift (``replicas``). The exact check stays for everything else: a run whose ranks are
all on one kind of device is never re-synchronised, so a replica that departs from the others
there still stops the run at its next checkpoint.

The failure drill ``HPCBENCH_FAIL_AT=RANK:STEP:other-device`` rehearses this on CPUs: from that
step on the rank nudges its parameters after every step (by a few units in the last place, as a
GPU's rounding would), and it counts as a device of its own kind. ``RANK:STEP:drift`` nudges them
without that, to show the exact check still catches a replica that departs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from hpcbench.run_documents import Drift
from hpcbench.run_documents import Replicas as ReplicasRecord
from hpcbench.train.checkpoint_parts import ReplicaState
from hpcbench.train.drills import Drill

if TYPE_CHECKING:
    from torch import nn

    from hpcbench.train.strategies.base import Strategy

KINDS = ("cpu", "cuda", "other")  # the drill's "other-device" counts as the third
KEPT = 100  # the drifts a record keeps (the last ones)
NUDGE = 1.0 + 2.0**-21  # about four units in the last place of a float32


def device_kind(device: torch.device, drill: Drill | None) -> str:
    if drill is not None and drill.mode == "other-device":
        return "other"
    return device.type if device.type in KINDS else "other"


def nudge(model: nn.Module, drill: Drill | None, steps_done: int) -> None:
    """The drift drills: scale this rank's parameters by a hair from the drill's step on."""
    if drill is None or drill.mode not in ("drift", "other-device") or steps_done < drill.step:
        return
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(NUDGE)


def synchronised_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """What makes a replica: parameters, buffers and the optimiser's per-parameter tensors (in
    parameter order, keys sorted: the same list on every rank)."""
    tensors = [p.data for p in model.parameters()] + list(model.buffers())
    for p in model.parameters():
        state = optimizer.state.get(p, {})
        tensors.extend(v for _, v in sorted(state.items()) if isinstance(v, torch.Tensor))
    return tensors


@dataclass
class Replicas:
    """Whether this run's ranks are on more than one kind of device, and its re-synchronisations."""

    kinds: list[str]  # the kinds of device the ranks are on
    every: int  # steps between re-synchronisations (when mixed)
    last_step: int = -1  # the step count at the last re-synchronisation
    count: int = 0
    max_drift: float | None = None  # the largest relative drift so far
    drifts: list[Drift] = field(default_factory=list)  # the last (step, drift) pairs

    @property
    def mixed(self) -> bool:
        return len(self.kinds) > 1

    @classmethod
    def of(cls, strategy: Strategy, kind: str, every: int) -> Replicas:
        """Agreed on by every rank (one all-reduce of a one-hot vector)."""
        counts = strategy.all_reduce(np.array([float(kind == k) for k in KINDS]))
        return cls([k for k, n in zip(KINDS, counts, strict=True) if n > 0], every)

    def describe(self) -> str:
        if not self.mixed:
            return ""
        return (
            f"ranks on {' and '.join(self.kinds)}: rank 0's parameters, buffers and optimiser "
            f"state are broadcast every {self.every} steps and before each checkpoint, "
            "evaluation and the end (their drift is in metrics.json)"
        )

    def due(self, steps_done: int) -> bool:
        return self.mixed and steps_done % self.every == 0

    def resync(
        self,
        strategy: Strategy,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        steps_done: int,
    ) -> None:
        """Every rank takes rank 0's state (a no-op where every rank is on one kind of device,
        or nothing trained since the last time); the drift seen first is recorded."""
        if not self.mixed or steps_done == self.last_step:
            return
        params = [p.data for p in model.parameters()]
        mine = [p.detach().clone() for p in params]
        strategy.broadcast_tensors(synchronised_state(model, optimizer))
        ratios = [
            (before - now).abs().max() / now.abs().max().clamp_min(torch.finfo(now.dtype).tiny)
            for before, now in zip(mine, params, strict=True)
            if now.numel() and now.is_floating_point()
        ]
        drift = float(torch.stack([r.float() for r in ratios]).max()) if ratios else 0.0
        drift = float(strategy.all_reduce(np.array([drift]), "max")[0])
        self.last_step, self.count = steps_done, self.count + 1
        self.max_drift = drift if self.max_drift is None else max(self.max_drift, drift)
        self.drifts = [*self.drifts, {"step": steps_done, "relative_drift": drift}][-KEPT:]

    def record(self) -> ReplicasRecord:
        """What ``metrics.json`` says (``replicas``)."""
        return {
            "device_kinds": self.kinds,
            "mixed": self.mixed,
            "resync_every": self.every if self.mixed else None,
            "resyncs": self.count,
            "max_relative_drift": self.max_drift,
            "drifts": self.drifts,
        }

    def state(self) -> ReplicaState:
        """What a checkpoint keeps, so that a resumed run's record goes on."""
        return {
            "count": self.count,
            "max_drift": self.max_drift,
            "drifts": self.drifts,
            "last_step": self.last_step,
        }

    def load(self, state: ReplicaState | None) -> None:
        if state:
            self.count, self.drifts = int(state["count"]), list(state["drifts"])
            self.max_drift, self.last_step = state["max_drift"], int(state["last_step"])
