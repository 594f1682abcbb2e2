"""The model a prediction uses, and the input format it expects, from a trainer checkpoint.

``--checkpoint`` names a checkpoint file, or a training run directory (or its ``checkpoints/``):
then the newest checkpoint there that proves whole is used (a corrupt newer one is skipped with a
warning, as ``--resume auto`` does). The checkpoint's ``dataset`` entry says how training saw its
inputs -- classes, sample shape, stored dtype, per-channel mean/std, colour mode, resize policy --
and :class:`InputFormat` applies exactly that to new images: decode, convert, resize (the
converters' code), store as the dataset would (uint8, or float16 of x/255), then
``stored * scale + shift`` (the trainer's :class:`~hpcbench.train.normalize.Normalizer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.predict.config import PredictError


@dataclass(frozen=True)
class InputFormat:
    classes: list[str]
    shape: tuple[int, int, int]  # C, H, W
    dtype: str  # how the dataset stored pixels: uint8 or float16
    mean: list[float]
    std: list[float]
    mode: str  # L or RGB
    resize: str  # crop | stretch | pad
    class_ids: list[str] | None = None  # the source metadata's own class ids, where it had them

    @property
    def size(self) -> tuple[int, int]:  # width, height (the converters' order)
        return self.shape[2], self.shape[1]

    def scale_shift(self) -> tuple[np.ndarray, np.ndarray]:
        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1, 1, 1)
        std = np.asarray(self.std, dtype=np.float32).reshape(-1, 1, 1)
        unit = np.float32(1 / 255 if self.dtype == "uint8" else 1.0)
        return unit / std, -mean / std

    def stored(self, pixels: np.ndarray) -> np.ndarray:
        """uint8 pixels as the dataset stores them (the trainer's input before normalisation)."""
        if self.dtype == "uint8":
            return pixels
        return (pixels / np.float32(255)).astype(np.float16)

    @property
    def stored_dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.dtype == "uint8" else np.float16)


@dataclass
class LoadedModel:
    path: Path
    model_name: str
    format: InputFormat
    state: dict[str, Any]  # the model's state dict
    steps_done: int


def find_checkpoint(given: str) -> Path:
    """The checkpoint file ``given`` names (a file, a run directory or a checkpoints directory)."""
    from hpcbench.train.checkpoint_file import checkpoint_files

    path = Path(given).expanduser()
    if path.is_file():
        return path
    if not path.exists():
        raise PredictError(f"--checkpoint {given}: no such file or directory")
    for directory in (path / "checkpoints", path):
        files = checkpoint_files(directory)
        if files:
            return files[0][1]
    raise PredictError(
        f"--checkpoint {given}: no checkpoint (ckpt-N.pt) in it or in its checkpoints/"
    )


def load(given: str, warn: Any) -> LoadedModel:
    """Read and check the checkpoint ``given`` names; the newest valid one of a directory."""
    from hpcbench.train.config import ConfigError

    try:
        return _load(given, warn)
    except ConfigError as err:  # e.g. a checkpoints directory that cannot be listed
        raise PredictError(str(err)) from None


def _load(given: str, warn: Any) -> LoadedModel:
    from hpcbench.train.checkpoint_file import CheckpointError, checkpoint_files, decode

    path = find_checkpoint(given)
    candidates = [path]
    if not Path(given).expanduser().is_file():
        candidates = [p for _, p in checkpoint_files(path.parent)]
    payload = None
    for candidate in candidates:
        try:
            payload = decode(candidate)
            path = candidate
            break
        except CheckpointError as err:
            if len(candidates) == 1:
                raise PredictError(str(err)) from None
            warn(f"hpcbench predict: warning: skipping {err}; trying the previous checkpoint")
    if payload is None:
        raise PredictError(f"--checkpoint {given}: no usable checkpoint (each one is damaged)")
    dataset = payload.get("dataset") or {}
    if not dataset.get("classes"):
        raise PredictError(
            f"{path}: holds no description of its training set (written by an older hpcbench); "
            "train again, or resume it once, to write a checkpoint that does"
        )
    fmt = InputFormat(
        classes=[str(c) for c in dataset["classes"]],
        shape=tuple(int(v) for v in dataset["shape"]),  # type: ignore[arg-type]
        dtype=str(dataset["dtype"]),
        mean=[float(v) for v in dataset["mean"]],
        std=[float(v) for v in dataset["std"]],
        mode=str(dataset["mode"]),
        resize=str(dataset["resize"]),
        class_ids=(
            [str(c) for c in dataset["class_ids"]]
            if isinstance(dataset.get("class_ids"), list)
            and len(dataset["class_ids"]) == len(dataset["classes"])
            else None
        ),
    )
    fp = payload.get("fingerprint", {})
    return LoadedModel(
        path=path.resolve(),
        model_name=str(fp.get("model", "small_cnn")),
        format=fmt,
        state=payload["model"],
        steps_done=int(payload.get("position", {}).get("steps_done", 0)),
    )


DEFAULT_BATCH = 32  # images per unit on CPUs
GPU_BATCHES = (32, 64, 128, 256, 512)  # the unit sizes tried on a GPU


def smallest_fast_enough(per_image_s: dict[int, float], tolerance: float = 1.1) -> int:
    """The smallest batch whose seconds per image are within ``tolerance`` of the best: larger
    ones cost memory (units in flight) and latency for little more throughput."""
    best = min(per_image_s.values())
    return min(b for b, cost in per_image_s.items() if cost <= tolerance * best)


class Classifier:
    """The model in eval mode and its normalisation: ``probabilities(stored pixels)``."""

    def __init__(self, loaded: LoadedModel, device: str = "cpu") -> None:
        import torch

        from hpcbench.train.models import build_model

        self.torch = torch
        self.device = torch.device(device)
        from hpcbench.train.config import ConfigError

        try:
            model = build_model(loaded.model_name, loaded.format.shape, len(loaded.format.classes))
        except ConfigError as err:  # a model this installation does not have
            raise PredictError(f"{loaded.path}: {err}") from None
        try:
            model.load_state_dict(loaded.state)
        except RuntimeError as err:
            first = str(err).splitlines()[0]
            raise PredictError(
                f"{loaded.path}: weights do not fit {loaded.model_name}: {first}"
            ) from None
        self.model = model.to(self.device).eval()
        scale, shift = loaded.format.scale_shift()
        self.scale = torch.from_numpy(scale).to(self.device)
        self.shift = torch.from_numpy(shift).to(self.device)
        self.format = loaded.format

    def warm_up(self, batch: int) -> None:
        """One forward pass of a batch of zeros: on a GPU this loads the device's libraries and
        picks kernels, so that neither a rank's memory growth nor its first unit counts them;
        then the device's peak memory starts afresh (:meth:`device_peak_mb`)."""
        shape = (max(1, batch), *self.format.shape)
        self.probabilities(np.zeros(shape, dtype=np.dtype(self.format.dtype)))
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def per_image_s(self, batch: int, repeats: int = 3) -> float:
        """Seconds per image of a forward pass at ``batch`` (after one warm-up pass; each pass
        reads its probabilities back, so the device is synchronised)."""
        import time

        x = np.zeros((batch, *self.format.shape), dtype=np.dtype(self.format.dtype))
        self.probabilities(x)
        t0 = time.perf_counter()
        for _ in range(repeats):
            self.probabilities(x)
        return (time.perf_counter() - t0) / (repeats * batch)

    def sized_batch(self, sizes: tuple[int, ...] = GPU_BATCHES) -> int:
        """The unit size that keeps this GPU busy: each of ``sizes`` timed, the smallest whose
        per-image cost is within 10 % of the best (a size the memory refuses ends the search)."""
        costs: dict[int, float] = {}
        for size in sizes:
            try:
                costs[size] = self.per_image_s(size)
            except self.torch.cuda.OutOfMemoryError:
                self.torch.cuda.empty_cache()
                break
        return smallest_fast_enough(costs) if costs else sizes[0]

    def device_peak_mb(self) -> float | None:
        """Peak MiB the model's tensors took on the GPU since :meth:`warm_up` (None on a CPU)."""
        if self.device.type != "cuda":
            return None
        return self.torch.cuda.max_memory_allocated(self.device) / 2**20

    def probabilities(self, stored: np.ndarray) -> np.ndarray:
        """float32 (n, classes) softmax of the model over a batch of stored pixels."""
        torch = self.torch
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(stored)).to(self.device)
            x = x.float().mul_(self.scale).add_(self.shift)
            return torch.softmax(self.model(x).float(), dim=1).cpu().numpy()
