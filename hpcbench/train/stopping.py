"""Stopping on request: the scheduler's warning signal, agreed on by every rank at a step
boundary, and a watchdog for ranks that stop making progress.

**Stop signals** (:class:`StopRequest`): SIGUSR2 (what rendered job scripts ask the scheduler
to send ahead of the time limit; never SIGUSR1, which NCCL takes) and SIGTERM (preemption, and
what PBS and ``scancel`` send first). The handler only records the signal. After every training
step the ranks all-reduce ``[stop?, weighted loss]`` (one 16-byte collective that also yields the
global loss of the step): when any rank was signalled, every rank stops at the same step, the run
writes a checkpoint and exits with :data:`STOPPED_EXIT`. A signal that reaches the job before the
ranks are ready, or that the launcher does not forward, is left by the job script as a file in
``$HPCBENCH_CONTROL_DIR`` (``stop-request``), which rank 0 looks for after set-up and every step; rank 0 writes ``ready`` there first, and ``stopped`` (what
stopped the run, and the checkpoint) on the way out, which is how the job script knows to requeue
whatever exit status the launcher reports.

**Watchdog** (:class:`Watchdog`, ``--hang-timeout``): a thread per rank. A rank that has not
finished a step for that long while it is not inside the step (reading its batch: waiting for no
other rank) names itself and exits 1; one inside the step (which includes waiting for the other
ranks' gradients) waits twice as long. The launcher then stops the others.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hpcbench.jsonfile import JSONObject

STOPPED_EXIT = 75  # EX_TEMPFAIL: stopped on request after a checkpoint; run again to continue
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
CONTROL_VARIABLE = "HPCBENCH_CONTROL_DIR"


def control_dir() -> Path | None:
    value = os.environ.get(CONTROL_VARIABLE)
    return Path(value) if value else None


class StopRequest:
    """The first stop signal this process received (installed before the heavy imports)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is None:
            self.signal = signum

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        return self.signal is not None or self.reason is not None

    def describe(self) -> str:
        if self.signal is not None:
            return signal.Signals(self.signal).name
        return self.reason or "a stop request"

    def read_request_file(self) -> None:
        """A stop the job script recorded: one that came before the ranks were ready, or that
        the launcher did not forward (MPICH's mpiexec keeps its ranks in sessions of their own
        and does not pass SIGUSR2 on). Rank 0 looks after set-up and after every step."""
        where = control_dir()
        if where is None:
            return
        try:
            text = (where / "stop-request").read_text(errors="replace").strip()
        except OSError:
            return
        self.reason = self.reason or f"the job's {text or 'stop'} signal (control/stop-request)"


def mark(name: str, content: JSONObject | None = None) -> None:
    """Write ``$HPCBENCH_CONTROL_DIR/<name>`` (rank 0; nothing without a control directory)."""
    where = control_dir()
    if where is None:
        return
    from hpcbench.atomic import write_atomically

    try:
        write_atomically(where / name, json.dumps(content or {}) + "\n")
    except OSError as err:
        print(f"hpcbench train: warning: cannot write {where / name}: {err}", file=sys.stderr)


class Stopped(Exception):
    """Every rank stops at the same step on request, after the checkpoint (exit 75)."""


class Watchdog:
    """A thread that ends this rank when a training step makes no progress for too long."""

    def __init__(self, timeout_s: float, rank: int) -> None:
        self.timeout_s, self.rank = timeout_s, rank
        self.where: str | None = None  # None: not watching; "batch" or "step"
        self.step = 0
        self.since = time.monotonic()
        if timeout_s > 0:
            threading.Thread(target=self._watch, name="hpcbench-watchdog", daemon=True).start()

    def at(self, where: str | None, step: int) -> None:
        self.where, self.step, self.since = where, step, time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            where = self.where
            if where is None:
                continue
            waited = time.monotonic() - self.since
            limit = self.timeout_s if where == "batch" else 2 * self.timeout_s
            if waited < limit:
                continue
            doing = (
                "reading its batch, waiting for no other rank: this rank hangs"
                if where == "batch"
                else "inside the step (computing, or waiting for another rank)"
            )
            print(
                f"hpcbench train: error: rank {self.rank} made no progress for {waited:.0f} s at "
                f"training step {self.step} ({doing}; --hang-timeout {self.timeout_s:g})",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
