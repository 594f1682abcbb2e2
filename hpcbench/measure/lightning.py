"""hpcbench's measurement of a PyTorch Lightning run, as a callback: the same documents as
:mod:`hpcbench.measure`'s (and as hpcbench's trainer's), with no line of the loop to change.

    from hpcbench.measure.lightning import HpcbenchCallback

    trainer = L.Trainer(callbacks=[HpcbenchCallback(model="my_net")], ...)
    trainer.fit(module, train_loader, val_loader)

Set-up is the time from the fit's set-up to its first training epoch; each epoch's training and
validation are the ``train`` and ``val`` phases (a validation inside an epoch is taken out of its
training time); each training batch is a step of its samples (the first tensor's length; a batch
that cannot be counted is one sample, with one warning); the
epoch's logged scalars (``self.log``) are its values, named as logged (``val/acc`` as
``val_acc``). With ``until="test"`` the measurement goes on through ``trainer.test`` (the
``test`` phase, its logged ``test*`` scalars as final values) and ends after it; else at the end
of the fit. The rank, world size and node are Lightning's. Needs the ``lightning`` package
(``pip install 'hpcbench[lightning]'``), or ``pytorch_lightning``. No hook raises into the fit: a
fault is the measurement's warning.
"""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Callable
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    from pytorch_lightning import Callback  # type: ignore[no-redef]

from hpcbench.measure.recorder import Measurement
from hpcbench.this_rank import LaunchInfo

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_]+")


def batch_samples(batch: Any) -> int | None:
    """The samples in a batch: the length of its first tensor (a tensor, a nested tensor, a
    tuple or list of them, a dict of them); None where there is none; ValueError, naming it,
    for a first tensor whose length is no whole number."""
    if isinstance(batch, (list, tuple)):
        return batch_samples(batch[0]) if batch else None
    if isinstance(batch, dict):
        return batch_samples(next(iter(batch.values()))) if batch else None
    try:
        if getattr(batch, "is_nested", False) is True:  # a nested tensor has no sizes
            return _whole(batch.size(0), batch)
        shape = batch.shape
    except AttributeError:
        return None
    except Exception as err:
        raise ValueError(
            f"a {type(batch).__name__} batch whose size cannot be read ({err})"
        ) from None
    try:
        dims = tuple(shape)
    except TypeError:
        raise ValueError(
            f"a {type(batch).__name__} batch whose shape {shape!r} is no tuple"
        ) from None
    return _whole(dims[0], batch) if dims else None


def _whole(first: Any, batch: Any) -> int:
    if isinstance(first, bool) or not hasattr(first, "__index__"):
        raise ValueError(
            f"a {type(batch).__name__} batch whose length {first!r} is no whole number"
        )
    return int(first.__index__())


def _guarded(hook: Callable[..., None]) -> Callable[..., None]:
    """A hook whose faults are the measurement's warnings, never an exception in the fit."""

    @functools.wraps(hook)
    def run(self: HpcbenchCallback, *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except Exception as err:
            self.measurement._fault(hook.__name__, err)

    return run


def scalars(metrics: dict[str, object], prefix: str = "") -> dict[str, float]:
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
    @_guarded
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

    @_guarded
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.measurement.is_open("setup"):
            self.measurement.end("setup")

    @_guarded
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == self.until:
            self.measurement.finish()

    @_guarded
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.measurement.abandon()

    # ------------------------------------------------------------------ training
    @_guarded
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.measurement.begin("train")

    @_guarded
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        try:
            samples = batch_samples(batch)
            if samples is None:
                raise ValueError(f"a {type(batch).__name__} batch holds no tensor to count")
        except Exception as err:
            self.measurement._fault("batch", ValueError(f"{err}: counted as 1 sample"))
            samples = 1
        self.measurement.step(samples=samples)

    @_guarded
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        m = self.measurement
        if m.is_open("train"):
            m.end("train")
        m.epoch(**scalars(dict(trainer.callback_metrics)))

    # ------------------------------------------------------------------ validation and test
    @_guarded
    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        m = self.measurement
        self._paused_train = m.is_open("train")
        if self._paused_train:  # a validation inside the epoch is not training time
            m.end("train")
        m.begin("val")

    @_guarded
    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        self.measurement.end("val")
        if self._paused_train:
            self.measurement.begin("train")
            self._paused_train = False

    @_guarded
    def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.measurement.begin("test")

    @_guarded
    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.measurement.end("test")
        self.measurement.final(**scalars(dict(trainer.callback_metrics), "test"))
