"""One rank's measurement (:class:`Measurement`): its phases, steps, epochs and final values,
recorded without touching the device, then gathered to rank 0 (:mod:`.exchange`), which writes
the run's documents (:mod:`.documents`).

Every public method catches what goes wrong inside it: a fault becomes one
:class:`MeasureWarning` (once per kind) and a line in the documents' ``warnings``, never an
exception in the user's loop. An exception of the user's own code passes through ``run``'s block
untouched: the run then writes no ``metrics.json`` (a failed run is not a measured one).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from hpcbench.jsonfile import JSONObject
from hpcbench.measure.ending import RUNNING as _RUNNING
from hpcbench.measure.finishing import MeasureWarning, finish_run, rank_record
from hpcbench.measure.naming import (
    PHASE_ALIASES,
    RESERVED_VALUES,
    default_run_dir,
    numbers,
    phase_name,
    seconds_from,
)
from hpcbench.measure.rank_records import EpochRecord, RankRecord, RunMeta
from hpcbench.measure.telemetry import interval_from
from hpcbench.measure.values import plain
from hpcbench.run_documents import PhaseWindow
from hpcbench.this_rank import LaunchInfo, detect_launch

#: bounds for a run of days: the warnings kept, and the phase windows (a phase opened at the top
#: on every step would otherwise grow without end)
MAX_WARNINGS = 100
MAX_WINDOWS = 20_000
#: the most samples one step may count (more is a wrong count, not a batch)
MAX_STEP_SAMPLES = 10**12


if TYPE_CHECKING:
    from hpcbench.run_documents import EnergyNode


class _Mark(TypedDict):
    """Where the last epoch ended: the phase totals, steps, samples and unknown samples."""

    totals: dict[str, float]
    steps: int
    samples: int
    unknown: int


class Measurement:
    """One rank's measurement of a run (:func:`run`, :func:`start`). ``run_dir``: where rank 0
    writes (default ``$HPCBENCH_RUN_DIR``, else ``runs/measure-<job or time>``); ``model``,
    ``dataset``, ``strategy``, ``device``: how the documents name the run (the strategy by
    default from the launcher); ``config``: the run's settings, kept as the trainer keeps its
    options; ``energy``: sample the node's devices (local rank 0 of each node);
    ``timeout``: how long rank 0 waits for the other ranks' records at the end;
    ``telemetry``: seconds between this rank's telemetry records (0: none; default
    ``$HPCBENCH_TELEMETRY``, else 5), ``total_steps``: the run's steps, for progress and ETA;
    ``trace_steps``: ``"FIRST:LAST"``, the steps PyTorch's profiler traces (default
    ``$HPCBENCH_TRACE_STEPS``, else none)."""

    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        model: str | None = None,
        dataset: str | None = None,
        strategy: str | None = None,
        device: str | None = None,
        config: JSONObject | None = None,
        energy: bool = False,
        energy_interval: float = 0.5,
        timeout: float = 300.0,
        telemetry: float | None = None,
        total_steps: int | None = None,
        trace_steps: str | None = None,
    ) -> None:
        told = os.environ  # what a benchmark matrix's run says (hpcbench.bench.matrix_program)
        self.meta: RunMeta = {
            "model": model,
            "dataset": dataset,
            "strategy": strategy or told.get("HPCBENCH_STRATEGY"),
            "device": device or told.get("HPCBENCH_DEVICE"),
            "config": dict(config or {}),
        }
        self._run_dir_arg = run_dir
        self.energy = energy or told.get("HPCBENCH_ENERGY") == "on"
        self.energy_interval = seconds_from(told.get("HPCBENCH_ENERGY_INTERVAL"), energy_interval)
        self.timeout = timeout
        self.telemetry = (
            interval_from(told.get("HPCBENCH_TELEMETRY")) if telemetry is None else telemetry
        )
        self.total_steps = total_steps
        self.trace_steps = trace_steps or told.get("HPCBENCH_TRACE_STEPS")
        self._live: Any = None
        self.launch: LaunchInfo | None = None
        self.run_dir: Path | None = None
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self._open: list[tuple[str, float, float]] = []  # (name, perf start, unix start)
        self.totals: dict[str, float] = {}
        self.windows: list[PhaseWindow] = []
        self.steps = self.samples = self.unknown_samples = 0
        self.first_batch: int | None = None
        self.epochs: list[EpochRecord] = []
        self._mark: _Mark = {"totals": {}, "steps": 0, "samples": 0, "unknown": 0}
        self.finals: dict[str, float] = {}
        self.started = self.ended = 0.0
        self._sampler: Any = None
        self.token: str | None = None  # rank 0's, of a run of several ranks (:mod:`.exchange`)
        self._done = False

    # ------------------------------------------------------------------ start and finish
    def start(self, place: LaunchInfo | None = None) -> Measurement:
        """Learn this rank's place (``place``: as a framework that started the ranks says it)
        and the run directory; start the node's energy sampler."""
        _RUNNING.add(self)  # stopped at exit if the program never ends it
        try:
            self.launch = place or detect_launch()
            self.run_dir = Path(self._run_dir_arg or default_run_dir(self.launch)).resolve()
            self.started = time.perf_counter()
            self.wall_started = time.time()
            if self.meta["config"]:  # kept as JSON: a Path or an enum as its text
                self.meta["config"] = plain(self.meta["config"], self._config_fault)
            if self.energy and self.launch.local_rank == 0:
                from hpcbench.measure.node_energy import start_sampler

                self._sampler = start_sampler(self.launch, self.energy_interval)
            told = os.environ.get("HPCBENCH_TELEMETRY")
            if told and interval_from(told, -1.0) == -1.0:
                self._fault("telemetry", ValueError(f"$HPCBENCH_TELEMETRY={told!r}: not 0 nor "
                            "seconds from 0.1 to 3600; a record every 5 s"))  # fmt: skip
            if self.launch.world_size > 1 and self.launch.rank == 0:
                self._make_token()
            if self.telemetry or self.trace_steps:
                from hpcbench.measure.live import RunLive

                self._live = RunLive(self, self.telemetry, self.trace_steps)
        except Exception as err:
            self._fault("start", err)
        return self

    def _config_fault(self, line: str) -> None:
        self._fault("config", ValueError(line), depth=7)

    def _make_token(self) -> None:
        """Rank 0: this run's token, which the other ranks' records must carry."""
        from hpcbench.measure.exchange import make_token

        assert self.run_dir is not None
        try:
            self.token = make_token(self.run_dir)
        except OSError as err:
            self._fault("exchange", err, depth=5)

    def finish(self) -> Path | None:
        """End the measurement: close open phases, gather every rank's record to rank 0, which
        writes the documents and says where on standard error (one line). The path of ``metrics.json`` on rank 0 (None on the others, and
        when nothing could be written: a warning says why). Every rank calls it once."""
        if self._done:
            return None
        self._done = True
        try:
            written = finish_run(self)
        except Exception as err:
            self._fault("finish", err)
            written = None
        finally:
            self._stop_threads()
        if written is not None:  # where to look, for a run started by hand
            with contextlib.suppress(Exception):
                print(f"hpcbench.measure: wrote {written}", file=sys.stderr, flush=True)
        return written

    def abandon(self) -> None:
        """Stop without writing anything (the user's run failed)."""
        self._done = True
        if self.token is not None and self.run_dir is not None:
            from hpcbench.measure.exchange import drop_token

            drop_token(self.run_dir)
        self._stop_threads(completed=False)

    def _stop_threads(self, completed: bool = True) -> None:
        """Every thread this measurement started stopped and joined (the telemetry's straggler
        scan, the energy sampler), its files closed; no longer stopped at exit."""
        _RUNNING.discard(self)
        self._close_live(completed)
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            with contextlib.suppress(Exception):
                sampler.stop()

    def _close_live(self, completed: bool = True) -> None:
        live, self._live = self._live, None
        if live is not None:
            try:
                live.close(self, completed)
            except Exception as err:
                self._fault("telemetry", err)

    def __enter__(self) -> Measurement:
        return self.start() if self.launch is None else self

    def __exit__(self, kind: Any, value: Any, trace: Any) -> None:
        if kind is None:
            self.finish()
        else:
            self.abandon()

    # ------------------------------------------------------------------ what users record
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (setup, train, val, test, data, comm, or the user's
        own, lower case); phases may nest (data within train)."""
        self.begin(name)
        try:
            if self._live is not None and name in ("data", "comm"):
                with self._live.part(name):
                    yield
            else:
                yield
        finally:
            self.end(name)

    def begin(self, name: str) -> None:
        """Open phase ``name`` (the plain form of :meth:`phase`)."""
        try:
            self._open.append((self._phase_name(name), time.perf_counter(), time.time()))
        except Exception as err:
            self._fault("phase", err)

    def end(self, name: str | None = None) -> None:
        """Close phase ``name`` (the last one opened when not given)."""
        try:
            key = self._phase_name(name) if name is not None else self._open[-1][0]
            at = max(i for i, (n, _, _) in enumerate(self._open) if n == key)
            _, began, wall = self._open.pop(at)
            self.totals[key] = self.totals.get(key, 0.0) + time.perf_counter() - began
            if not any(n == key for n, _, _ in self._open) and not self._open[:at]:
                if len(self.windows) < MAX_WINDOWS:
                    self.windows.append({"phase": key, "start": wall, "end": time.time()})
                else:
                    self._fault("phase", RuntimeError(f"over {MAX_WINDOWS} phase windows: the "
                                "later ones are left out of the energy split"))  # fmt: skip
        except Exception as err:
            self._fault("phase", ValueError(f"no open phase {name!r} to close ({err})"))

    def is_open(self, name: str) -> bool:
        """Whether phase ``name`` is open now."""
        return any(n == PHASE_ALIASES.get(name, name) for n, _, _ in self._open)

    def step(self, samples: int = 1) -> None:
        """One training step of ``samples`` samples on this rank (nothing is synchronised). A
        count that is not a whole number from 0 to :data:`MAX_STEP_SAMPLES` is refused with a
        warning: a negative or huge one still counts the step, its samples unknown (null)."""
        try:
            count = samples.__index__()
        except Exception:
            self._fault("step", TypeError(f"samples must be a whole number, got {samples!r}"))
            return
        self.steps += 1
        if 0 <= count <= MAX_STEP_SAMPLES:
            self.samples += count
            if self.first_batch is None:
                self.first_batch = count
        else:
            shown = count if count.bit_length() <= 64 else f"a number of {count.bit_length()} bits"
            self.unknown_samples += 1
            self._fault("step", ValueError(f"samples must be a whole number from 0 to "
                        f"{MAX_STEP_SAMPLES:,}, got {shown}: this step's samples unknown (null)"))  # fmt: skip
        if self._live is not None:
            try:
                self._live.stepped(self)
            except Exception as err:
                self._live = None
                self._fault("telemetry", err)

    def epoch(self, **values: float) -> None:
        """End an epoch: its values (``train_loss``, ``val_accuracy``, ``lr`` or the user's own
        names, numbers), and the times, steps and samples since the last one."""
        try:
            totals, mark = self.totals, self._mark
            row: EpochRecord = {
                "seconds": {k: v - mark["totals"].get(k, 0.0) for k, v in totals.items()},
                "steps": self.steps - mark["steps"],
                "samples": self.samples - mark["samples"],
                "unknown_samples": self.unknown_samples - mark["unknown"],
                "values": self._numbers("epoch", values, RESERVED_VALUES),
            }
            self.epochs.append(row)
            self._mark = {"totals": dict(totals), "steps": self.steps, "samples": self.samples,
                          "unknown": self.unknown_samples}  # fmt: skip
        except Exception as err:
            self._fault("epoch", err)

    def final(self, **values: float) -> None:
        """The run's final values (``test_accuracy``, ``test_loss`` or the user's own)."""
        try:
            self.finals.update(self._numbers("final", values))
        except Exception as err:
            self._fault("final", err)

    # ------------------------------------------------------------------ helpers
    def record(self, node: EnergyNode | None = None) -> RankRecord:
        """This rank's record, as gathered to rank 0 (JSON-able)."""
        return rank_record(self, node)

    def _phase_name(self, name: str) -> str:
        return phase_name(name)

    def _numbers(
        self, call: str, values: dict[str, object], reserved: frozenset[str] = frozenset()
    ) -> dict[str, float | None]:
        """The values that are named numbers (one that is not finite: None); each other one is
        left out with a warning (the rest are kept)."""
        return numbers(call, values, reserved, lambda err: self._fault(call, err, depth=6))

    def _fault(self, where: str, err: BaseException, depth: int = 3) -> None:
        """Record a fault (bounded) and warn once per kind, pointing at the user's call
        (``depth``: frames from here to it)."""
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(f"{where}: {err}"[:300])
        elif len(self.warnings) == MAX_WARNINGS:
            self.warnings.append(f"more warnings left out (at most {MAX_WARNINGS} are kept)")
        if where not in self._warned:
            self._warned.add(where)
            try:  # never an exception in the loop, even where warnings are made errors
                warnings.warn(f"hpcbench.measure: {where}: {err}", MeasureWarning, stacklevel=depth)
            except Exception:
                pass


def start(run_dir: str | Path | None = None, **options: Any) -> Measurement:
    """Start measuring (the plain form of :func:`run`); call ``finish()`` at the end."""
    return Measurement(run_dir, **options).start()


def run(run_dir: str | Path | None = None, **options: Any) -> Measurement:
    """A measurement as a context manager: ``with measure.run(...) as m:``; the documents are
    written when the block ends without an exception (options as :class:`Measurement`)."""
    return Measurement(run_dir, **options)
