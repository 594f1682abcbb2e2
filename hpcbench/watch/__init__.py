"""``hpcbench watch``: a live view of a job, a run directory, a benchmark matrix or a sweep while
it runs, refreshed every few seconds until what it watches has ended, then the line
``hpcbench submit --wait`` ends with.

- :mod:`.targets`: what is watched, as a list of runs (read again at every refresh);
- :mod:`.snapshot`: one look (the scheduler asked once per refresh for all the jobs shown);
- :mod:`.view`: plain lines for a log or a pipe, rich tables redrawn on a terminal.

From a notebook: ``watch(resolve("results/scaling"), out=sys.stdout)``.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from hpcbench.files import printable
from hpcbench.watch.snapshot import Snapshot, Watcher
from hpcbench.watch.targets import JOB, Target, WatchError, resolve
from hpcbench.watch.view import counted, lines, tables

__all__ = ["WatchError", "Watcher", "resolve", "summary", "watch"]


def watch(
    target: Target,
    *,
    interval: float = 5.0,
    out: TextIO | None = None,
    refreshes: int | None = None,
    watcher: Watcher | None = None,
) -> int:
    """Show ``target`` every ``interval`` seconds until it has ended (or ``refreshes`` looks
    were shown: then 124); the exit status of what was watched (0: every run completed)."""
    out = out or sys.stdout
    watcher = watcher or Watcher(target)
    tty = out.isatty()
    live = None
    if tty:
        from rich.console import Console
        from rich.live import Live

        live = Live(console=Console(file=out), auto_refresh=False, transient=False)
        live.start()
    shown = 0
    try:
        while True:
            snap = watcher.look()
            shown += 1
            if live is not None:
                live.update(tables(snap), refresh=True)
            else:
                out.write("\n".join(lines(snap)) + "\n")
                out.flush()
            if snap.done:
                break
            if refreshes is not None and shown >= refreshes:
                return 124
            time.sleep(interval)
    finally:
        if live is not None:
            live.stop()
    return summary(snap, out)


def summary(snap: Snapshot, out: TextIO) -> int:
    """The last line(s): a job's as ``submit --wait`` prints them (its failure report on
    standard error), else the runs counted; 0 when every run completed."""
    target = snap.target
    if target.kind == JOB:
        from hpcbench import api

        record = target.record
        handle = api.job(record.job_id, record.scheduler)
        status = handle.wait()  # at once: it has ended (an array: every task has)
        if status.state == "COMPLETED":
            out.write(f"job {record.job_id} completed\n")
            return 0
        print(handle.failure_report(status), file=sys.stderr)
        return status.exit_code if status.exit_code not in (None, 0) else 1
    out.write(f"{target.kind} {printable(target.name)}: {counted(snap)}\n")
    return 0 if set(snap.counts()) <= {"completed"} else 1
