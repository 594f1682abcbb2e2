"""Following a job while it runs: the new complete lines of its log since the last look.

``hpcbench submit --wait`` prints them as they arrive (the trainer's epoch lines, a failing
rank's traceback), and ``hpcbench bench`` shows the last epoch line of the run under way. A log
that does not exist yet (a pending job) has no lines; a partial last line waits for its newline;
a log that was truncated or replaced is read again from its start.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpcbench.files import open_regular

MAX_READ = 1 << 20  # bytes read per look: a job that floods its log is skipped ahead, not buffered


class LogFollower:
    """The lines appended to ``path`` since the previous :meth:`new_lines`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self._identity: tuple[int, int] | None = None

    def new_lines(self) -> list[str]:
        try:
            with os.fdopen(open_regular(self.path), "rb") as fh:  # never a FIFO or device
                st = os.fstat(fh.fileno())
                identity = (st.st_dev, st.st_ino)
                if identity != self._identity or st.st_size < self._offset:
                    self._identity, self._offset, self._partial = identity, 0, b""
                if st.st_size - self._offset > MAX_READ:
                    self._offset, self._partial = st.st_size - MAX_READ, b""
                fh.seek(self._offset)
                chunk = fh.read(MAX_READ)
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]

    def rest(self) -> list[str]:
        """After the job has ended: the new lines, and a last line that never got its newline."""
        lines = self.new_lines()
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace").rstrip("\r"))
            self._partial = b""
        return lines
