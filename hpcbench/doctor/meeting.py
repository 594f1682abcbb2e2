"""How the doctor's ranks meet at each step: files in the run directory, bounded by a timeout.

Every rank writes its result of a step (``doctor/<run>/<step>/rank-N.json``); rank 0 waits for
all of them until the step's deadline and then writes the step's verdict (``verdict.json``: go
on, or stop, with the ranks that did not arrive); the other ranks wait for that verdict as long.
No collective is entered before every rank is known to be there, so a rank that never arrives
is one line naming it, and the others stop instead of hanging. ``<run>`` is this launch of the
doctor (``HPCBENCH_LAUNCH_ID``, set by every batch script before its launch), so that a run
directory reused by a requeued job never counts an earlier launch's files.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_json_atomically
from hpcbench.jsonfile import JsonFileError, read_json


class StepTimeout(RuntimeError):
    """Ranks that did not arrive at a step in time: one line naming the step and the ranks."""


@dataclass
class Meeting:
    folder: Path  # doctor/<run>
    rank: int
    world_size: int

    @classmethod
    def open(cls, run_dir: Path, rank: int, world_size: int, job: str | None) -> Meeting:
        launch = os.environ.get("HPCBENCH_LAUNCH_ID", "") or job or "run"
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in launch)[:80]
        return cls(run_dir / "doctor" / safe, rank, world_size)

    def _read(self, path: Path) -> Any:
        try:
            return read_json(path, max_bytes=4 << 20)
        except JsonFileError:
            return None

    def gather(self, step: str, mine: Any, timeout: float) -> list[Any] | None:
        """Every rank's ``mine`` on rank 0 (None on the others), once all arrived; raises
        :class:`StepTimeout` on every rank when some did not arrive within ``timeout``."""
        folder = self.folder / step
        write_json_atomically(folder / f"rank-{self.rank}.json", {"value": mine})
        deadline = time.monotonic() + timeout
        if self.rank == 0:
            return self._collect(step, folder, deadline, timeout)
        while time.monotonic() < deadline + 5.0:
            verdict = self._read(folder / "verdict.json")
            if verdict is not None:
                if verdict["missing"]:
                    raise StepTimeout(verdict["line"])
                return None
            time.sleep(0.02)
        raise StepTimeout(f"step {step}: rank 0 gave no verdict within {timeout:.0f} s")

    def _collect(self, step: str, folder: Path, deadline: float, timeout: float) -> list[Any]:
        values: dict[int, Any] = {}
        while True:
            for rank in range(self.world_size):
                if rank not in values:
                    found = self._read(folder / f"rank-{rank}.json")
                    if found is not None:
                        values[rank] = found["value"]
            if len(values) == self.world_size or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        missing = [r for r in range(self.world_size) if r not in values]
        line = ""
        if missing:
            listed = ",".join(map(str, missing[:32])) + (",…" if len(missing) > 32 else "")
            line = (
                f"step {step}: rank{'s' if len(missing) > 1 else ''} {listed} did not arrive "
                f"within {timeout:.0f} s"
            )
        write_json_atomically(folder / "verdict.json", {"missing": missing, "line": line})
        if missing:
            raise StepTimeout(line)
        return [values[r] for r in range(self.world_size)]

    def share(self, step: str, value: Any, timeout: float) -> Any:
        """Rank 0's ``value`` on every rank (after every rank arrived)."""
        self.gather(step, None, timeout)
        folder = self.folder / step
        if self.rank == 0:
            write_json_atomically(folder / "shared.json", {"value": value})
            return value
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self._read(folder / "shared.json")
            if found is not None:
                return found["value"]
            time.sleep(0.02)
        raise StepTimeout(f"step {step}: rank 0 shared nothing within {timeout:.0f} s")
