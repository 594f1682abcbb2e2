"""A progress line for long loops: a redrawn bar on a terminal, plain periodic lines in a log.

On a TTY the bar is redrawn at most ten times a second; in a batch job's log (no TTY) a line is
printed every ``log_every`` seconds and at the end, so cluster logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        total: int,
        label: str,
        unit: str = "img",
        stream: TextIO | None = None,
        enabled: bool = True,
        log_every: float = 30.0,
    ) -> None:
        self.total, self.label, self.unit = total, label, unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.log_every = log_every
        self.start = self._last = time.monotonic()
        self.done = 0

    def _line(self, now: float) -> str:
        rate = self.done / max(now - self.start, 1e-9)
        frac = self.done / self.total if self.total else 1.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        bar = "#" * int(frac * 24)
        eta_text = f"{eta:4.0f}s left" if eta != float("inf") else "   ?s left"
        return (
            f"{self.label} [{bar:<24s}] {frac:4.0%} {self.done:,}/{self.total:,} "
            f"{rate:,.0f} {self.unit}/s {eta_text}"
        )

    def update(self, done: int) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty and now - self._last >= 0.1:
            self.stream.write("\r" + self._line(now))
            self.stream.flush()
            self._last = now
        elif not self.tty and now - self._last >= self.log_every:
            self.stream.write(self._line(now) + "\n")
            self.stream.flush()
            self._last = now

    def close(self) -> float:
        """Final line; returns the elapsed seconds."""
        now = time.monotonic()
        if self.enabled:
            self.stream.write(
                ("\r" if self.tty else "") + self._line(now) + f" in {now - self.start:.1f}s\n"
            )
            self.stream.flush()
        return now - self.start
