"""Per-rank PyTorch profiler traces of a window of training steps (``--trace-steps A:B``).

:class:`StepTracer` turns ``torch.profiler`` on before global step A (counted from 0) and off
after step B, or at :meth:`StepTracer.close` when the run ends inside the window; a run resumed
past A starts at its first step in the window. Each rank writes, under ``RUN_DIR/traces/``:

* ``rank-{R}.pt.trace.json``: the Chrome trace (chrome://tracing, Perfetto, and TensorBoard's
  profiler plugin, which reads ``*.pt.trace.json`` files), with a top-level ``"hpcbench"`` key
  (rank, world size, host, steps), ``"distributedInfo"`` and the process named ``rank R``;
* ``rank-{R}.summary.json``: seconds in total, in communication (``hpcbench::comm`` ranges, else
  torch's collective ops), waiting for data (``hpcbench::data``) and the rest (compute), and the
  ten ops with the most self time.

Both are written to a temporary name and renamed into place. Cost: nothing outside the window
(:meth:`StepTracer.part` is a ``nullcontext``); inside it every torch op is recorded, which
slows small steps noticeably (see ``cost_note``), and stopping exports and rewrites the trace
(megabytes for large models). A failure never reaches the training loop: one warning, and
tracing gives up. torch is imported only when tracing starts. A summary is typed
:class:`TraceSummary`; the Chrome trace is torch's own JSON (:data:`~hpcbench.jsonfile.JSONObject`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
import warnings
from pathlib import Path
from typing import Any, TypedDict

from hpcbench.files import open_regular
from hpcbench.jsonfile import JSONObject
from hpcbench.safe_write import RunSubdir


class TraceIdentity(TypedDict):
    """Who traced, and the steps traced (first, last)."""

    rank: int
    world_size: int
    host: str
    steps: list[int]


class TopOp(TypedDict):
    name: str
    self_s: float
    calls: int


class TraceSummary(TraceIdentity):
    """A rank's trace summary (``traces/…summary.json``, format 1): its seconds in the window
    (total, comm, data, compute), the operators that took the most and what tracing costs."""

    format: int
    seconds: dict[str, float]
    top_ops: list[TopOp]
    cost_note: str


COLLECTIVE_WORDS = tuple(
    "allreduce all_reduce broadcast allgather all_gather reduce_scatter c10d:: gloo: nccl:".split()
)
COST_NOTE = (
    "measured with torch.profiler on: every torch op was recorded, so these steps ran slower "
    "than untraced ones; use the seconds for shares of a step, not for its speed"
)
TRACE_NAME = re.compile(r"rank-([0-9]+)\.pt\.trace\.json")
SUMMARY_NAME = re.compile(r"rank-([0-9]+)\.summary\.json")
MAX_TRACE_BYTES = 8 << 30  # torch's export of a window read back to be labelled
MAX_WINDOW = 200  # a trace of every operator: a few steps tell, thousands fill a rank's memory


class TraceWarning(UserWarning):
    """A step trace that could not be taken or written (the training goes on)."""


#: the tracer whose profiler is on in this process, if any (:func:`traced`)
_tracing: list[StepTracer | None] = [None]
_NOTHING = contextlib.nullcontext()


def traced(name: str) -> contextlib.AbstractContextManager[Any]:
    """A ``hpcbench::{name}`` range in the trace this process records now, if any: for code
    that does not hold the tracer (a strategy's wait for its collective, ``comm``)."""
    tracer = _tracing[0]
    return _NOTHING if tracer is None else tracer.part(name)


def parse_steps(text: str) -> tuple[int, int]:
    """``"A:B"`` -> ``(A, B)``: the global steps to trace, inclusive; ValueError otherwise."""
    match = re.fullmatch(r"([0-9]+):([0-9]+)", text.strip()) if isinstance(text, str) else None
    first, last = (int(match[1]), int(match[2])) if match else (1, 0)
    if first > last:
        raise ValueError(
            f"--trace-steps {text!r}: give FIRST:LAST, two step numbers with FIRST <= LAST "
            "(as 10:14)"
        )
    if last - first >= MAX_WINDOW:
        raise ValueError(
            f"--trace-steps {text!r}: at most {MAX_WINDOW} steps; give FIRST:LAST (as 10:14)"
        )
    return first, last


class StepTracer:
    """One rank's tracer: ``before_step``/``after_step`` around each step, ``part`` around its
    data wait and communication, ``close`` at the end of the run."""

    def __init__(
        self,
        run_dir: Path | str,
        rank: int,
        world_size: int,
        steps: tuple[int, int],
        host: str = "",
        cuda: bool = False,
    ) -> None:
        self.directory = Path(run_dir) / "traces"
        self.rank, self.world_size, self.host, self.cuda = rank, world_size, host, cuda
        self.steps = (int(steps[0]), int(steps[1]))
        self.done = False
        self._traced: tuple[int, int] | None = None  # the first and last step traced
        self._prof: Any = None
        self._record: Any = None
        self._started = 0.0

    @property
    def active(self) -> bool:
        return self._prof is not None

    def before_step(self, step: int) -> None:
        if self.done or self.active or not self.steps[0] <= step <= self.steps[1]:
            return
        try:
            import torch.profiler as tp

            activities = [tp.ProfilerActivity.CPU]
            if self.cuda:
                activities.append(tp.ProfilerActivity.CUDA)
            prof = tp.profile(activities=activities, record_shapes=False, with_stack=False)
            prof.__enter__()
            self._prof, self._record = prof, tp.record_function
            self._started = time.perf_counter()
            _tracing[0] = self
        except Exception as err:
            self._give_up("could not start the profiler", err)

    def after_step(self, step: int) -> None:
        if not self.active:
            return
        self._traced = (self._traced[0] if self._traced else step, step)
        if step >= self.steps[1]:
            self._stop()

    def part(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A ``hpcbench::{name}`` range in the trace while the profiler is on."""
        if self._prof is None:
            return contextlib.nullcontext()
        return self._record(f"hpcbench::{name}")

    def close(self) -> None:
        if self.active:
            self._stop()
        self.done = True

    def discard(self) -> None:
        """Stop without writing (the run failed inside the window)."""
        prof, self._prof, self.done = self._prof, None, True
        _tracing[0] = None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.__exit__(None, None, None)

    def _give_up(self, what: str, err: BaseException) -> None:
        prof, self._prof, self.done = self._prof, None, True
        _tracing[0] = None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.__exit__(None, None, None)
        try:  # never an exception in the training loop, even where warnings are errors
            warnings.warn(
                f"hpcbench: rank {self.rank}: {what} ({type(err).__name__}: {err}); "
                "no step trace from this rank",
                TraceWarning,
                stacklevel=3,
            )
        except Exception:
            pass

    def _stop(self) -> None:
        seconds = time.perf_counter() - self._started
        _tracing[0] = None
        try:
            self._prof.__exit__(None, None, None)
        except Exception as err:
            self._give_up("the profiler failed to stop", err)
            return
        prof, self._prof, self.done = self._prof, None, True
        try:
            with RunSubdir(self.directory.parent, self.directory.name) as folder:
                self._write_trace(prof, folder)
                summary = json.dumps(self._summary(prof, seconds), indent=1) + "\n"
                folder.write_atomically(f"rank-{self.rank}.summary.json", summary.encode())
        except Exception as err:
            self._give_up(f"could not write the step trace to {self.directory}", err)

    def _write_trace(self, prof: Any, folder: RunSubdir) -> None:
        """torch's export to a private temporary file of ``folder`` (reached through the
        directory held open), labelled, then written in place through another."""
        name = f"rank-{self.rank}.pt.trace.json"
        export = f".{name}.{secrets.token_hex(8)}.export"
        os.close(folder.open_fd(export, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        held = Path(f"/proc/self/fd/{folder.fd}")
        try:
            prof.export_chrome_trace(str((held if held.is_dir() else folder.path) / export))
            trace = json.loads(folder.read(export, MAX_TRACE_BYTES))
            self._label(trace)
            trace["traceName"] = str(self.directory / name)  # torch wrote the temporary name
            # dumps: C-encoded, json.dump is not
            folder.write_atomically(name, json.dumps(trace, separators=(",", ":")).encode())
        finally:
            folder.unlink(export)

    def _label(self, trace: JSONObject) -> None:
        """Add hpcbench's keys and name every numbered process ``rank R`` (a device's process
        ``rank R GPU n``); torch names them all ``python``, and its own pseudo-processes have
        string pids ("Spans", "Traces", "")."""
        trace["hpcbench"] = self._identity()
        trace.setdefault("distributedInfo", {"rank": self.rank, "world_size": self.world_size})
        events = trace["traceEvents"]
        pids = sorted({e["pid"] for e in events if type(e.get("pid")) is int})
        meta = [e for e in events if e.get("ph") == "M" and e.get("pid") in pids]
        named = [e for e in meta if e.get("name") == "process_name"]
        labels = {e["pid"]: e["args"]["labels"] for e in meta if "labels" in e.get("args", {})}
        ts = {e["pid"]: e["ts"] for e in named if "ts" in e}  # torch's, kept
        drop = {id(e) for e in named}
        events[:] = [e for e in events if id(e) not in drop]
        for pid in pids:
            label = str(labels.get(pid) or "")
            name = f"rank {self.rank}" + (f" {label}" if label and label != "CPU" else "")
            new = {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}
            events.append({**new, "tid": 0, "ts": ts[pid]} if pid in ts else new)

    def _identity(self) -> TraceIdentity:
        """Who traced, and the steps actually traced (a run that ended or resumed inside the
        window traced fewer than asked)."""
        steps = list(self._traced) if self._traced else list(self.steps)
        return {"rank": self.rank, "world_size": self.world_size, "host": self.host,
                "steps": steps}  # fmt: skip

    def _summary(self, prof: Any, total: float) -> TraceSummary:
        cpu = [e for e in prof.events() if str(e.device_type).endswith("CPU")]
        # the waits for a collective hpcbench marks, and torch's own collective operators
        # (DDP's all-reduce on CPUs runs inside backward): their union, counted once
        comm = _covered(e for e in cpu if e.name == "hpcbench::comm" or _collective(e.name))
        data = _covered(e for e in cpu if e.name == "hpcbench::data")
        own = "self_device_time_total" if self.cuda else "self_cpu_time_total"
        ops = [
            a
            for a in prof.key_averages()
            if not a.key.startswith(("hpcbench::", "ProfilerStep")) and getattr(a, own, 0) > 0
        ]
        ops.sort(key=lambda a: getattr(a, own), reverse=True)
        seconds = dict(total=total, comm=comm, data=data, compute=max(0.0, total - comm - data))
        seconds = {key: round(value, 6) for key, value in seconds.items()}
        return {
            "format": 1,
            **self._identity(),
            "seconds": seconds,
            "top_ops": [
                {"name": a.key, "self_s": round(getattr(a, own) / 1e6, 6), "calls": int(a.count)}
                for a in ops[:10]
            ],
            "cost_note": COST_NOTE,
        }


def _collective(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in COLLECTIVE_WORDS)


def _covered(events: Any) -> float:
    """The seconds the events' time ranges cover, a nested or overlapping range counted once."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    total, reach = 0.0, float("-inf")
    for start, end in spans:
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1e6


def _ranked(run_dir: Path | str, pattern: re.Pattern[str], max_files: int) -> list[Path]:
    directory = Path(run_dir) / "traces"
    found: list[tuple[int, Path]] = []
    if directory.is_symlink():  # somewhere else: not this run's
        return []
    try:
        with os.scandir(directory) as entries:
            for n, entry in enumerate(entries):
                if n >= max_files:
                    break
                match = pattern.fullmatch(entry.name)
                if match and entry.is_file(follow_symlinks=False):
                    found.append((int(match[1]), Path(entry.path)))
    except OSError:
        return []
    return [path for _, path in sorted(found)]


def trace_files(run_dir: Path | str, max_files: int = 4096) -> list[Path]:
    """The ``rank-*.pt.trace.json`` regular files under ``RUN_DIR/traces/``, by rank."""
    return _ranked(run_dir, TRACE_NAME, max_files)


def read_summaries(
    run_dir: Path | str, max_files: int = 4096, max_bytes: int = 1_000_000
) -> list[TraceSummary]:
    """The ranks' summaries under ``RUN_DIR/traces/``, by rank: regular files only (a symbolic
    link is refused), at most ``max_bytes`` each; one that does not parse or lacks a key is
    skipped."""
    read = (_read_summary(path, max_bytes) for path in _ranked(run_dir, SUMMARY_NAME, max_files))
    return sorted((s for s in read if s is not None), key=lambda s: s["rank"])


def _read_summary(path: Path, max_bytes: int) -> TraceSummary | None:
    try:
        fd = open_regular(path, follow_symlinks=False)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(max_bytes + 1)
        if len(raw) > max_bytes:
            return None
        summary = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None
    return summary if _well_formed(summary) else None


def _well_formed(summary: Any) -> bool:
    if not isinstance(summary, dict) or summary.get("format") != 1:
        return False
    seconds, steps = summary.get("seconds"), summary.get("steps")
    return (
        type(summary.get("rank")) is int
        and type(summary.get("world_size")) is int
        and isinstance(summary.get("host"), str)
        and isinstance(steps, list)
        and [type(s) for s in steps] == [int, int]
        and isinstance(seconds, dict)
        and all(type(seconds.get(k)) in (int, float) for k in ("total", "comm", "data", "compute"))
        and isinstance(summary.get("top_ops"), list)
        and len(summary["top_ops"]) <= 100
        and all(_op_ok(op) for op in summary["top_ops"])
    )


def _op_ok(op: Any) -> bool:
    return (
        isinstance(op, dict)
        and isinstance(op.get("name"), str)
        and len(op["name"]) <= 1000
        and type(op.get("self_s")) in (int, float)
        and type(op.get("calls")) is int
    )
