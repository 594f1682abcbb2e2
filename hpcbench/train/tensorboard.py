"""The trainer's TensorBoard log (``--tensorboard DIR``): rank 0 writes, through
``torch.utils.tensorboard.SummaryWriter``, one event file into ``DIR/<run name>`` (the run
directory's name), so that runs side by side compare in one ``tensorboard --logdir DIR``.

- per epoch (step = the epoch, 1, 2, …): :data:`EPOCH_TAGS`, from the epoch's row of the results
  (:data:`hpcbench.train.documents.EPOCH_FIELDS`); the val tags only for validated epochs;
- at the end (step = the last epoch): :data:`END_TAGS`, from the results, and the run's
  configuration as hparams (with the test metrics);
- at the start: the configuration, as the TOML of ``--config`` (text tag ``config``).

The package is an optional dependency (``pip install 'hpcbench[tensorboard]'``): rank 0 checks it
and the directory during set-up (:func:`check_board`), before any training; without ``--tensorboard``,
and on the other ranks, :class:`NullBoard` stands in and nothing is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpcbench.run_documents import EpochRow, Metrics
from hpcbench.train.config import ConfigError, TrainConfig
from hpcbench.train.config_file import to_toml
from hpcbench.train.documents import prepare_run_dir

MISSING = "--tensorboard: needs the tensorboard package (pip install 'hpcbench[tensorboard]')"

# (key of the epoch row, tag)
EPOCH_TAGS: tuple[tuple[str, str], ...] = (
    ("train_loss", "train/loss"),
    ("train_accuracy", "train/accuracy"),
    ("train_macro_f1", "train/macro_f1"),
    ("val_loss", "val/loss"),
    ("val_accuracy", "val/accuracy"),
    ("val_macro_f1", "val/macro_f1"),
    ("samples_per_s", "throughput/samples_per_s"),
    ("lr", "optimizer/lr"),
    ("train_time_s", "time/train_s"),
    ("data_time_s", "time/data_s"),
    ("compute_time_s", "time/compute_s"),
    ("comm_time_s", "time/comm_s"),
    ("val_time_s", "time/val_s"),
    ("bytes_read", "io/bytes_read"),
)
# (section of the results, key, tag)
END_TAGS: tuple[tuple[str, str, str], ...] = (
    ("test", "loss", "test/loss"),
    ("test", "accuracy", "test/accuracy"),
    ("test", "macro_f1", "test/macro_f1"),
    ("phases", "test_s", "time/test_s"),
    ("phases", "setup_s", "time/setup_s"),
)


def log_dir(directory: str, run_dir: Path | None) -> Path:
    """``DIR/<run name>`` (``DIR`` relative to the working directory); ``DIR`` itself when the
    run has no directory (a run started from Python without one)."""
    root = Path(directory).resolve()
    return root / run_dir.name if run_dir is not None else root


def _summary_writer() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(MISSING) from None
    return SummaryWriter


def check_board(config: TrainConfig, run_dir: Path | None) -> None:
    """Rank 0, during set-up: the package imports and the log directory takes files (created);
    a one-line :class:`ConfigError` naming the option otherwise."""
    if config.output.tensorboard is None:
        return
    _summary_writer()
    prepare_run_dir(Path(config.output.tensorboard).resolve(), "--tensorboard")
    prepare_run_dir(log_dir(config.output.tensorboard, run_dir), "--tensorboard")


class NullBoard:
    """No ``--tensorboard``, or not rank 0: writes nothing."""

    def epoch(self, row: EpochRow) -> None:
        pass

    def finish(self, results: Metrics) -> None:
        pass

    def close(self) -> None:
        pass


class Board(NullBoard):
    """Rank 0's writer."""

    def __init__(self, config: TrainConfig, run_dir: Path | None) -> None:
        assert config.output.tensorboard is not None
        self.config = config
        self.writer = _summary_writer()(log_dir=str(log_dir(config.output.tensorboard, run_dir)))
        self.writer.add_text("config", _as_code(to_toml(config)), 0)
        self.writer.flush()
        self.step = 0

    def epoch(self, row: EpochRow) -> None:
        self.step = row["epoch"]
        for key, tag in EPOCH_TAGS:
            if row[key] is not None:
                self.writer.add_scalar(tag, row[key], self.step)
        self.writer.flush()  # an epoch is seen while the run goes on

    def finish(self, results: Metrics) -> None:
        metrics: dict[str, float] = {}
        for section, key, tag in END_TAGS:
            value = (results.get(section) or {}).get(key)
            if value is not None:
                self.writer.add_scalar(tag, value, self.step)
                metrics[tag] = value
        self._hparams(metrics)
        self.writer.flush()

    def _hparams(self, metrics: dict[str, float]) -> None:
        """The options as hparams, into this run's own event file (``add_hparams`` would open a
        second one in a subdirectory)."""
        from torch.utils.tensorboard.summary import hparams

        values = {
            name: ",".join(f"{w:g}" for w in value) if isinstance(value, list) else value
            for name, value in self.config.as_dict().items()
            if value is not None
        }
        writer = self.writer._get_file_writer()
        for summary in hparams(values, metrics):
            writer.add_summary(summary, self.step)

    def close(self) -> None:
        self.writer.close()  # flushes


def _as_code(text: str) -> str:
    """Markdown code (TensorBoard renders text as Markdown)."""
    return "\n".join("    " + line for line in text.splitlines())


def open_board(config: TrainConfig, rank: int, run_dir: Path | None) -> NullBoard:
    """Rank 0's :class:`Board` with ``--tensorboard``, else a :class:`NullBoard`."""
    if config.output.tensorboard is None or rank != 0:
        return NullBoard()
    return Board(config, run_dir)
