"""Where hpcbench keeps its own state on this machine: job records, local job ids, marks.

``$HPCBENCH_STATE_DIR``, else ``$XDG_STATE_HOME/hpcbench``, else ``~/.local/state/hpcbench``
(the XDG base directory rule for state that should survive a restart but is not worth a backup).
One directory for every project of the user on this machine: ids and records are unique there.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_VAR = "HPCBENCH_STATE_DIR"
# The largest state file read (a job record is a few hundred bytes, an array's a few more a task):
# the state directory may sit on a shared filesystem, so what is read there is bounded.
MAX_RECORD_BYTES = 16 << 20


def state_dir() -> Path:
    if explicit := os.environ.get(STATE_DIR_VAR):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hpcbench"
