"""The parts of a checkpoint's payload (:mod:`.checkpoint_file`), each as a ``TypedDict`` whose
keys are those written: what a reader of a checkpoint finds in it, without reading the writer.
The payload is ``torch.save`` of plain containers and tensors, so that ``weights_only`` loading
reads it; these types change nothing on disk. Also here: a process's random generators taken
into such a part and put back (:func:`rng_state`, :func:`set_rng_state`)."""

from __future__ import annotations

import random
from typing import Any, TypedDict

import numpy as np
import torch

from hpcbench.jsonfile import JSONObject
from hpcbench.run_documents import Drift, EpochRow

Fingerprint = JSONObject  # the options that decide the trajectory, the global batch, the dataset


class RngState(TypedDict):
    """One process's random generators as tensors and lists."""

    torch: torch.Tensor
    cuda: list[torch.Tensor]
    numpy: list[Any]  # numpy's (kind, keys as int64 tensor, pos, has_gauss, cached)
    python: list[Any]  # Python's (version, internal state, gauss)


class RankState(TypedDict, total=False):
    """What differs between ranks: the generators, the buffers this rank's last forward
    updated, and the strategy's own per-rank state (tensors)."""

    rng: RngState
    buffers: dict[str, torch.Tensor]
    strategy: dict[str, torch.Tensor]


class CheckpointPosition(TypedDict):
    """Where the run was: epoch (0-based), step within it, steps done, by how many ranks."""

    epoch: int
    step: int
    steps_done: int
    world_size: int
    steps_per_epoch: int


class PartialSums(TypedDict):
    """A checkpoint inside an epoch: the epoch's metric sums and (train, data, comm) seconds."""

    meter: torch.Tensor
    times: torch.Tensor


class ReplicaState(TypedDict):
    """What a checkpoint keeps of the replicas' re-synchronisation, so that its record goes on."""

    count: int
    max_drift: float | None
    drifts: list[Drift]
    last_step: int


class CheckpointProgress(TypedDict, total=False):
    """The run's progress so far: the epoch rows, the per-step losses, each checkpoint's
    seconds, the replicas' record, whether the run was deterministic, and the partial epoch."""

    epochs: list[EpochRow]
    losses: list[float]
    checkpoint_s: list[float]
    replicas: ReplicaState
    deterministic: bool
    partial: PartialSums | None


class DatasetDescription(TypedDict):
    """The training set's input format, as :mod:`hpcbench.predict` needs it (plain values)."""

    name: str
    classes: list[str]
    shape: list[int]
    dtype: str
    mean: list[float]
    std: list[float]
    mode: str  # "L" or "RGB"
    resize: str
    class_ids: list[str] | None  # the source's own ids of the classes (categories[].id)


class Payload(TypedDict):
    """A checkpoint file's whole content."""

    format: int
    fingerprint: Fingerprint
    position: CheckpointPosition
    model: dict[str, torch.Tensor]
    optimizer: JSONObject  # torch's optimiser state dict (tensors inside)
    schedule: JSONObject  # torch's scheduler state dict
    ranks: list[RankState]
    progress: CheckpointProgress
    dataset: DatasetDescription | JSONObject  # {} when written without one
    amp: JSONObject  # the fp16 loss scaler's state dict ({} otherwise)
    saved_at: float


# ---- random number generators ------------------------------------------------------------------
def rng_state() -> RngState:
    """This process's generators as tensors and lists (what ``weights_only`` loading accepts)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": [version, list(internal), gauss],
    }


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
