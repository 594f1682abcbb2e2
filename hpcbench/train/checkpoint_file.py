"""Checkpoints: what a run needs to continue bit-exactly, written so that a crash never leaves a
half file, and read back only after their content is proved whole.

A checkpoint is one file, ``ckpt-<steps done>.pt`` in the checkpoint directory: an 8-byte magic,
the SHA-256 of the payload, then the payload (``torch.save`` of plain containers and tensors,
loaded with ``weights_only=True``: a checkpoint cannot run code). The payload holds

- ``model``, ``optimizer``, ``schedule``: the state dicts (the model unwrapped from DDP);
- ``position``: epoch (0-based), step within it, steps done, and the data order's identity
  (order, seed, global batch, steps per epoch) -- the epoch's sample order is a function of
  (seed, epoch) for both orders, so (epoch, step) is the whole position;
- ``ranks``: what differs between ranks, in rank order: each one's CPU, CUDA, numpy and Python
  random states, and its buffers (the batch-norm statistics its last forward pass updated);
- ``progress``: the epoch rows so far, the per-step losses so far, the partial epoch's summed meter
  and phase seconds;
- ``fingerprint``: the options that decide the trajectory (a checkpoint of another configuration
  is refused, naming the option);
- ``dataset``: what a model's input is -- class names, sample shape and dtype, normalisation,
  colour mode and resize policy of the training set -- so that ``python -m hpcbench.predict``
  prepares new images exactly as training saw them, without the training set at hand.

Replicated state (model, optimiser, schedule) is written once, by rank 0. Replicas are identical
by construction -- rank 0's weights are broadcast at set-up and every rank applies the same summed
gradients with the same optimiser -- and each checkpoint checks it: the ranks all-reduce the min
and max of a checksum of their parameters; a difference stops the run before anything is written.

Writing: temporary file in the directory (exclusive, private), write, fsync, rename, fsync the
directory, then the oldest beyond ``keep`` are removed (only files of our naming). Reading
(``--resume auto``): newest first; one whose magic, hash or content is wrong is skipped with a
warning naming it, and the previous one is used.

Under ``--precision fp16`` the loss scaler's state is kept too (``amp``).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hpcbench.files import open_regular
from hpcbench.jsonfile import JSONObject
from hpcbench.train.checkpoint_parts import (
    CheckpointPosition,
    CheckpointProgress,
    DatasetDescription,
    Fingerprint,
    Payload,
    RankState,
    rng_state,
    set_rng_state,
)
from hpcbench.train.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from hpcbench.data.manifest import Manifest
    from hpcbench.train.strategies.base import Strategy

MAGIC = b"HPCBCKP1"
NAME = re.compile(r"^ckpt-(\d{1,12})\.pt$")
FORMAT_VERSION = 1
DISK_FULL_DRILL = "disk-full"  # HPCBENCH_FAIL_AT=RANK:STEP:disk-full fails the write at STEP

# Options that decide the run's trajectory: a checkpoint continues only the same ones.
TRAJECTORY = (
    "model",
    "epochs",
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "schedule",
    "lr_scaling",
    "lr_reference_batch",
    "warmup_epochs",
    "seed",
    "data_order",
    "max_steps",
    "sync_bn",
    "precision",
    "grad_compression",
    "error_feedback",
)


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used (one line naming the file)."""


def fingerprint(config: TrainConfig, global_batch: int, dataset_id: str) -> Fingerprint:
    """What a checkpoint must match to be resumed from."""
    values: Fingerprint = {name: config.value(name) for name in TRAJECTORY}
    values["global_batch"] = global_batch
    values["dataset"] = dataset_id
    return values


def parameter_checksum(model: torch.nn.Module) -> float:
    """A number that differs when any parameter's bits differ, the same on every device: each
    parameter's words (its bits as 16- or 32-bit integers, in logical order, whatever its memory
    layout) summed plainly and weighted by position, in 64-bit integers. Integer sums wrap
    exactly whatever the order, so a GPU rank and a CPU rank holding the same bits get the same
    number (float sums would differ in the last bits); reduced below 2**52, a float64 carries it
    exactly through the ranks' all-reduce. Compared across ranks at each checkpoint. Buffers
    (batch-norm statistics) are left out: each rank updates its own in the forward pass, and
    rank 0's are broadcast before the next one (DDP's ``broadcast_buffers``, the mpi strategy
    likewise)."""
    total = 0
    with torch.no_grad():
        for i, t in enumerate(model.parameters()):
            flat = t.detach().contiguous().reshape(-1)
            words = flat.view(torch.int16 if flat.element_size() == 2 else torch.int32)
            words = words.to(torch.int64)
            place = torch.arange(1, words.numel() + 1, device=words.device, dtype=torch.int64)
            total += (i + 1) * int(words.sum()) + int((words * place).sum())
    return float(total % (1 << 52))


def rank_state(model: torch.nn.Module) -> RankState:
    """What differs between ranks: the generators, and the buffers this rank's last forward
    updated (its evaluation uses them)."""
    return {"rng": rng_state(), "buffers": {n: b.detach().cpu() for n, b in model.named_buffers()}}


# ---- files ---------------------------------------------------------------------------------------
MAX_FILE_BYTES = 1 << 40  # a checkpoint or weights file read at most (1 TiB)


def checkpoint_files(directory: Path) -> list[tuple[int, Path]]:
    """Our checkpoints in ``directory``, newest (most steps) first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise CheckpointError(f"{directory}: cannot list checkpoints ({err.strerror})") from None
    found = [(int(m.group(1)), directory / n) for n in names if (m := NAME.match(n))]
    return sorted(found, reverse=True)


def encode(payload: Payload) -> bytes:
    buf = io.BytesIO()
    torch.save(payload, buf)
    body = buf.getvalue()
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(path: Path) -> Payload:
    """The payload of ``path``; :class:`CheckpointError` naming it when it is not a whole,
    readable checkpoint of ours."""
    try:
        # a regular file only (a FIFO or a device would block the read for ever), no link
        with os.fdopen(open_regular(path, follow_symlinks=False), "rb") as fh:
            if os.fstat(fh.fileno()).st_size > MAX_FILE_BYTES:
                raise CheckpointError(f"{path}: larger than {MAX_FILE_BYTES >> 30} GiB")
            data = fh.read()
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(data) < 40 or data[:8] != MAGIC:
        raise CheckpointError(f"{path}: not an hpcbench checkpoint (no header)")
    body = data[40:]
    if hashlib.sha256(body).digest() != data[8:40]:
        raise CheckpointError(f"{path}: corrupt or truncated (its SHA-256 does not match)")
    try:
        payload = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as err:  # any unpickling problem means: unusable
        raise CheckpointError(
            f"{path}: unreadable checkpoint ({type(err).__name__}: {str(err).splitlines()[0]})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: a checkpoint of another format version")
    return payload


def write(directory: Path, steps_done: int, payload: Payload, keep: int) -> Path:
    """Write the checkpoint atomically and durably, then remove our oldest beyond ``keep``."""
    directory.mkdir(parents=True, exist_ok=True)
    data = encode(payload)
    final = directory / f"ckpt-{steps_done}.pt"
    tmp = directory / f".ckpt-{steps_done}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            if _disk_full_drill(steps_done):
                fh.write(data[: len(data) // 2])
                fh.flush()
                raise OSError(28, "No space left on device (failure drill)")
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    for _, old in checkpoint_files(directory)[keep:]:
        old.unlink(missing_ok=True)
    return final


def _umask() -> int:
    from hpcbench.atomic import current_umask

    return current_umask()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _disk_full_drill(steps_done: int) -> bool:
    from hpcbench.train.drills import drill_for

    drill = drill_for(0)
    return drill is not None and drill.mode == DISK_FULL_DRILL and drill.step == steps_done


# ---- choosing what to resume from -----------------------------------------------------------------
@dataclass
class Resumed:
    path: Path
    payload: Payload


def find(
    resume: str, directory: Path, warn: Any, expected: Fingerprint, world_size: int
) -> Resumed | None:
    """The checkpoint ``--resume`` names: ``none`` nothing; ``auto`` the newest valid one in
    ``directory`` (None when there is none; an unusable newer one is skipped with a warning);
    a run directory (or a checkpoints directory): its newest valid one, as ``predict
    --checkpoint`` takes it (an error when it has none); else that file (an unusable one is an
    error)."""
    if resume == "none":
        return None
    if resume != "auto":
        path = Path(resume).expanduser()
        if not path.is_dir():
            payload = decode(path)
            check_compatible(path, payload, expected, world_size)
            return Resumed(path, payload)
        # a run directory (or its checkpoints/), as predict --checkpoint takes it: its newest
        directory = path / "checkpoints" if checkpoint_files(path / "checkpoints") else path
        if not checkpoint_files(directory):
            raise CheckpointError(
                f"--resume {resume}: no checkpoint (ckpt-N.pt) in it or in its checkpoints/"
            )
    for _, path in checkpoint_files(directory):
        try:
            payload = decode(path)
        except CheckpointError as err:
            warn(f"hpcbench train: warning: skipping {err}; trying the previous checkpoint")
            continue
        check_compatible(path, payload, expected, world_size)
        return Resumed(path, payload)
    if resume != "auto":
        raise CheckpointError(f"--resume {resume}: none of its checkpoints is usable")
    return None


def check_compatible(path: Path, payload: Payload, expected: Fingerprint, world_size: int) -> None:
    theirs = payload.get("fingerprint", {})
    for name, value in expected.items():
        if theirs.get(name) != value:
            flag = "--" + name.replace("_", "-")
            what = {
                "global_batch": "global batch",
                "dataset": "dataset (--data)",
            }.get(name, flag)
            raise CheckpointError(
                f"{path}: written by a run with {what} {theirs.get(name)!r}, this run has "
                f"{value!r} (another --checkpoint-dir, or --resume none)"
            )
    ranks = payload["position"]["world_size"]
    if expected["data_order"] == "shards" and ranks != world_size:
        raise CheckpointError(
            f"{path}: written by {ranks} rank(s) with --data-order shards, whose batches depend "
            f"on the number of ranks; this run has {world_size} (use --data-order global to "
            "change the number of ranks)"
        )


def restore(
    resumed: Resumed,
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    rank: int,
) -> None:
    """Load the replicated state on this rank and its own random generators (rank ``r`` of a
    run at another world size takes those of rank ``r mod`` the old one)."""
    p = resumed.payload
    assert strategy.eval_model is not None
    strategy.eval_model.load_state_dict(p["model"])
    optimizer.load_state_dict(p["optimizer"])
    schedule.load_state_dict(p["schedule"])
    states = p["ranks"]
    mine = states[rank % len(states)]
    set_rng_state(mine["rng"])
    if len(states) == strategy.runtime.world_size:  # this rank's own buffers and state
        with torch.no_grad():
            for name, buf in strategy.eval_model.named_buffers():
                buf.copy_(mine["buffers"][name])
        strategy.load_rank_state(mine.get("strategy", {}))


def payload(
    *,
    fp: Fingerprint,
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    position: CheckpointPosition,
    ranks: list[RankState],
    progress: CheckpointProgress,
    dataset: DatasetDescription | None = None,
    amp: JSONObject | None = None,
) -> Payload:
    assert strategy.eval_model is not None
    return {
        "format": FORMAT_VERSION,
        "fingerprint": fp,
        "position": position,
        "model": strategy.eval_model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "ranks": ranks,
        "progress": plain(progress),
        "dataset": plain(dataset or {}),
        "amp": plain(amp or {}),
        "saved_at": time.time(),
    }


def dataset_description(manifest: Manifest) -> DatasetDescription:
    """The training set's input format, as :mod:`hpcbench.predict` needs it (plain values)."""
    options = manifest.options or {}
    return {
        "name": manifest.name,
        "classes": list(manifest.classes),
        "shape": [int(v) for v in manifest.shape],
        "dtype": manifest.dtype,
        "mean": [float(v) for v in manifest.mean],
        "std": [float(v) for v in manifest.std],
        "mode": "L" if manifest.channels == 1 else "RGB",
        "resize": str(options.get("resize", "crop")),
        # the source's own class ids (a metadata JSON's categories[].id), for predictions.csv
        "class_ids": manifest.class_ids(),
    }


def plain(value: Any) -> Any:
    """``value`` with numpy scalars made Python numbers (what ``weights_only`` loading takes)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
