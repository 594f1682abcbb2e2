"""hpcbench's measurement of a PyTorch Lightning run, as a callback: the same documents as
:mod:`hpcbench.measure`'s (and as hpcbench's trainer's), with no line of the loop to change.

    from hpcbench.measure.lightning import HpcbenchCallback

    trainer = L.Trainer(callbacks=[HpcbenchCallback(model="my_net")], ...)
    trainer.fit(module, train_loader, val_loader)

Set-up is the time from the fit's set-up to its first training epoch; each epoch's training and
validation are the ``train`` and ``val`` phases (a validation inside an epoch is taken out of its
training time); each training batch is a step of its samples (the first tensor's length); the
epoch's logged scalars (``self.log``) are its values, named as logged (``val/acc`` as
``val_acc``). With ``until="test"`` the measurement goes on through ``trainer.test`` (the
``test`` phase, its logged ``test*`` scalars as final values) and ends after it; else at the end
of the fit. The rank, world size and node are Lightning's. Needs the ``lightning`` package
(``pip install 'hpcbench[lightning]'``), or ``pytorch_lightning``.
"""

from __future__ import annotations

import re
import socket
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    from pytorch_lightning import Callback  # type: ignore[no-redef]

from hpcbench.launch import LaunchInfo
from hpcbench.measure.recorder import Measurement

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_]+")


def batch_samples(batch: Any) -> int | None:
    """The samples in a batch: the length of its first tensor (a tensor, a tuple or list of
    them, a dict of them); None where there is none."""
    if hasattr(batch, "shape") and len(getattr(batch, "shape", ())) > 0:
        return int(batch.shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return batch_samples(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_samples(next(iter(batch.values())))
    return None


def scalars(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The logged metrics that are one number, named as identifiers; only those starting with
    ``prefix`` when given."""
    found = {}
    for key, value in metrics.items():
        if prefix and not key.startswith(prefix):
            continue
        try:
            number = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError, RuntimeError):
            continue
        name = _NOT_A_NAME.sub("_", key).strip("_") or "value"
        found[(f"m_{name}" if name[0].isdigit() else name)[:64]] = number
    return found


class HpcbenchCallback(Callback):
    """Measure a Lightning ``Trainer``'s run (options as :class:`~.recorder.Measurement`'s;
    ``until``: ``"fit"`` or ``"test"``, where the measurement ends)."""

    def __init__(self, run_dir: Any = None, *, until: str = "fit", **options: Any) -> None:
        if until not in ("fit", "test"):
            raise ValueError(f"until={until!r}: give 'fit' or 'test'")
        self.until = until
        self.measurement = Measurement(run_dir, **options)
        self._paused_train = False

    # ------------------------------------------------------------------ the run
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        m = self.measurement
        if m.launch is None:
            world = int(trainer.world_size)
            place = LaunchInfo(
                int(trainer.global_rank), world, int(trainer.local_rank),
                max(1, world // max(1, int(trainer.num_nodes))), int(trainer.node_rank),
                "lightning", socket.gethostname(),
            )  # fmt: skip
            m.start(place)
            if stage == "fit":
                m.begin("setup")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.measurement.is_open("setup"):
            self.measurement.end("setup")

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == self.until:
            self.measurement.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.measurement.abandon()

    # ------------------------------------------------------------------ training
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.measurement.begin("train")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.measurement.step(samples=batch_samples(batch) or 1)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        m = self.measurement
        if m.is_open("train"):
            m.end("train")
        m.epoch(**scalars(dict(trainer.callback_metrics)))

    # ------------------------------------------------------------------ validation and test
    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        m = self.measurement
        self._paused_train = m.is_open("train")
        if self._paused_train:  # a validation inside the epoch is not training time
            m.end("train")
        m.begin("val")

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        self.measurement.end("val")
        if self._paused_train:
            self.measurement.begin("train")
            self._paused_train = False

    def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.measurement.begin("test")

    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.measurement.end("test")
        self.measurement.final(**scalars(dict(trainer.callback_metrics), "test"))
