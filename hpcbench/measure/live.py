"""A measured run's telemetry and traces (:class:`RunLive`), fed by
:class:`~hpcbench.measure.recorder.Measurement`: its steps give the records' progress, its
phases the times. A record's compute time per step is the wall time between the steps less the
time in the phases ``data``, ``comm``, ``val`` and ``test`` (the user's own phases inside a step
count as computation)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from hpcbench.measure.telemetry import Telemetry
from hpcbench.this_rank import node_name

Measurement = Any  # hpcbench.measure.recorder's, which imports this module

#: phases whose time is not the steps' computation
NOT_COMPUTE = ("data", "comm", "val", "test")


class RunLive:
    """One rank's telemetry (``interval`` seconds; 0: none) and tracer (``trace_steps``)."""

    def __init__(self, m: Measurement, interval: float, trace_steps: str | None) -> None:
        launch = m.launch
        assert launch is not None and m.run_dir is not None
        self.telemetry: Telemetry | None = None
        self.tracer: Any = None
        if interval:
            self.telemetry = Telemetry(
                m.run_dir,
                rank=launch.rank,
                world_size=launch.world_size,
                host=node_name(),
                interval=interval,
                total_steps=m.total_steps,
            )
        if trace_steps:  # a bad window is a warning: the telemetry goes on
            from hpcbench.measure.traces import StepTracer, parse_steps

            try:
                steps = parse_steps(trace_steps)
            except ValueError as err:
                m._fault(
                    "trace_steps", ValueError(str(err).replace("--trace-steps", "trace_steps"))
                )
            else:
                self.tracer = StepTracer(m.run_dir, launch.rank, launch.world_size, steps,
                                         host=node_name(), cuda=_cuda_device() is not None)  # fmt: skip
                self.tracer.before_step(0)
        self._mark = (m.steps, m.samples, time.perf_counter(), self._aside(m))
        self._gpu_looked = False

    @staticmethod
    def _aside(m: Measurement) -> tuple[float, float, float]:
        """Seconds so far in data, comm, and val + test."""
        totals = m.totals
        return (
            totals.get("data", 0.0),
            totals.get("comm", 0.0),
            totals.get("val", 0.0) + totals.get("test", 0.0),
        )

    def stepped(self, m: Measurement) -> None:
        """After each ``m.step()``: the tracer's step bounds; a record when one is due."""
        if self.tracer is not None:
            self.tracer.after_step(m.steps - 1)
            self.tracer.before_step(m.steps)
        tel = self.telemetry
        if tel is not None and time.monotonic() >= tel.next_at:
            self.record(m)

    def record(self, m: Measurement) -> None:
        """Hand the steps since the last record to the telemetry, which writes one."""
        tel = self.telemetry
        if tel is None:
            return
        if not self._gpu_looked:  # at the first record: the program has set its device by now
            self._gpu_looked = True
            device = _cuda_device()
            if device is not None:
                tel.use_gpu(device)
        steps0, samples0, t0, before = self._mark
        now = time.perf_counter()
        aside = self._aside(m)
        data, comm, other = (a - b for a, b in zip(aside, before, strict=True))
        steps = m.steps - steps0
        self._mark = (m.steps, m.samples, now, aside)
        if not steps:
            tel.next_at = time.monotonic() + tel.interval
            return
        last = m.epochs[-1]["values"] if m.epochs else {}
        epoch = max(0, len(m.epochs) - (1 if m.ended else 0))  # the one under way, or the last
        unmarked = tuple(p for p in ("data", "comm") if p not in m.totals and not m.is_open(p))
        tel.add(steps, m.samples - samples0, (now - t0) - data - comm - other, data, comm,
                loss=last.get("train_loss"), epoch=epoch, not_measured=unmarked)  # fmt: skip
        tel.flush()

    def part(self, name: str) -> Any:
        return self.tracer.part(name) if self.tracer is not None else contextlib.nullcontext()

    def close(self, m: Measurement, completed: bool = True) -> None:
        """The last record and a trace window the run ended inside (neither for a run that
        failed: its records so far stay); the telemetry's thread joined and its file closed."""
        if self.tracer is not None:
            self.tracer.close() if completed else self.tracer.discard()
        tel = self.telemetry
        if tel is not None:
            tel.scan_stragglers = False  # the end starts no scan: it joins the one running
            if completed:
                self.record(m)
            tel.close(final=completed)


def _cuda_device() -> int | None:
    """The CUDA device the program computes on, if it has initialised CUDA (None else)."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:
        pass
    return None
