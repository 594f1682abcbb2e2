"""What the trainer shows while it runs: rank 0's progress bar, every rank's telemetry records
(``--telemetry``: :mod:`hpcbench.measure.telemetry`, which ``hpcbench watch`` reads and which
names stragglers in rank 0's log) and its profiler traces (``--trace-steps``:
:mod:`hpcbench.measure.traces`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.this_rank import node_name

if TYPE_CHECKING:
    from hpcbench.progress import Progress
    from hpcbench.train.config import TrainConfig
    from hpcbench.train.runtime import Runtime
    from hpcbench.train.strategies.base import Strategy


class Live:
    """One rank's telemetry and tracer (either may be None: off). ``strategy``: on a GPU, the
    one whose :meth:`~hpcbench.train.strategies.base.Strategy.compute_done_event` ends a
    step's device-timed computation (from :meth:`started`)."""

    def __init__(self, telemetry: Any = None, tracer: Any = None, strategy: Any = None) -> None:
        self.telemetry, self.tracer = telemetry, tracer
        self.strategy = strategy
        self._start: Any = None
        self._event: Any = None  # torch.cuda.Event where steps are timed on the device
        if strategy is not None and telemetry is not None:
            import torch

            self._event = torch.cuda.Event

    def started(self) -> None:
        """The step's computation starts (its batch is on the device): on a GPU with telemetry,
        an event marks it on the device's stream (no synchronisation)."""
        if self._event is not None:
            self._start = self._event(enable_timing=True)
            self._start.record()

    def before(self, steps_done: int) -> None:
        if self.tracer is not None:
            self.tracer.before_step(steps_done)

    def part(self, name: str) -> Any:
        """A traced range of the step (``data``, ``comm``) while the profiler is on."""
        return self.tracer.part(name) if self.tracer is not None else contextlib.nullcontext()

    def after(self, steps_done: int, samples: int, times: tuple[float, float, float],
              loss: Any, epoch: int) -> None:  # fmt: skip
        """A step done: ``times`` its (compute, data wait, communication) seconds."""
        if self.tracer is not None:
            self.tracer.after_step(steps_done - 1)
        if self.telemetry is not None:
            compute: Any = times[0]
            comm: float | None = times[2]
            end = self.strategy.compute_done_event() if self._start is not None else None
            if end is not None:
                compute = (self._start, end)  # device time, read when both have passed
                comm = None  # on the device too, read when the epoch ends: not known now
            self.telemetry.add(1, samples, compute, times[1], comm, loss=loss, epoch=epoch)

    def close(self, completed: bool = True) -> None:
        """The last record and the trace of a window the run ended inside; a run that did not
        complete (an error, a stop) writes neither: its records so far stay."""
        if self.tracer is not None:
            self.tracer.close() if completed else self.tracer.discard()
        if self.telemetry is not None:  # its straggler scan joined, its file closed
            self.telemetry.close(final=completed)


def open_live(
    config: TrainConfig,
    runtime: Runtime,
    strategy: Strategy,
    *,
    steps_per_epoch: int,
    steps_done: int,
    log: Callable[[str], None],
    run_path: Path | None,
) -> Live:
    """This rank's telemetry and tracer, in the run directory every rank was told
    (``run_path``: None where rank 0 has none: then neither); a resumed run's telemetry counts
    on from ``steps_done``."""
    if run_path is None:
        return Live()
    device = runtime.device
    cuda_index = device.index if device.type == "cuda" else None
    telemetry = tracer = None
    if config.output.telemetry:
        from hpcbench.measure.telemetry import Telemetry

        telemetry = Telemetry(
            run_path,
            rank=runtime.rank,
            world_size=runtime.world_size,
            host=node_name(),
            interval=config.output.telemetry,
            total_steps=steps_per_epoch * config.batch.epochs,
            total_epochs=config.batch.epochs,
            cuda_index=cuda_index,
            log=log,
        )
        telemetry.step = steps_done
    if config.output.trace_steps:
        from hpcbench.measure.traces import StepTracer, parse_steps

        tracer = StepTracer(
            run_path,
            rank=runtime.rank,
            world_size=runtime.world_size,
            steps=parse_steps(config.output.trace_steps),
            host=node_name(),
            cuda=device.type == "cuda",
        )
    return Live(telemetry, tracer, strategy if device.type == "cuda" else None)


def progress_bar(config: TrainConfig, rank: int, steps: int, epoch: int) -> Progress | None:
    """Rank 0's bar for the epoch's ``steps`` (``--progress bar``, or auto on a terminal)."""
    mode = config.output.progress
    if rank != 0 or not (mode == "bar" or (mode == "auto" and sys.stderr.isatty())):
        return None
    from hpcbench.progress import Progress

    return Progress(steps, f"epoch {epoch + 1}/{config.batch.epochs}", unit="step")
