"""Whether other work shares this machine, before a run of a local matrix starts.

On a laptop or a login node the local scheduler's runs share the CPUs with whatever else runs
there: a build, a browser, another user's job, a second matrix. Their times then carry that work,
and a comparison of configurations measured at different moments compares the machine's load.
A cluster's scheduler gives a job its nodes; here nobody does, so each run looks first.

It reads ``/proc/loadavg``'s fourth field, the scheduling entities runnable *now* (the reader
itself included), a few times over a fraction of a second: the one-minute load average would
still count the previous run for a minute after it ended.
"""

from __future__ import annotations

import glob
import os
import statistics
import time

SAMPLES = 7
INTERVAL_S = 0.05


def runnable_now(path: str = "/proc/loadavg") -> int | None:
    """Processes runnable at this instant besides the reader; None where Linux's file is not."""
    try:
        with open(path) as fh:
            fields = fh.read().split()
        running = int(fields[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(0, running - 1)


def running_commands(limit: int = 3) -> list[str]:
    """The commands of the threads running now (state R), this process left out, most threads
    first: ``python3 (2)``, ``cc1``."""
    counts: dict[str, int] = {}
    me = str(os.getpid())
    for path in glob.glob("/proc/[0-9]*/task/[0-9]*/stat"):
        if path.split("/")[2] == me:
            continue
        try:
            with open(path) as fh:
                line = fh.read()
        except OSError:  # ended between the listing and the read
            continue
        name, _, rest = line.partition("(")[2].rpartition(")")
        if rest.split()[:1] == ["R"]:
            counts[name] = counts.get(name, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return [f"{name} ({n})" if n > 1 else name for name, n in top]


def other_work(samples: int = SAMPLES, interval_s: float = INTERVAL_S) -> str:
    """A sentence saying how busy this machine is with other work ("" when it is idle, or when
    it cannot be told): the median of ``samples`` readings of the runnable processes."""
    seen = []
    for i in range(samples):
        if (n := runnable_now()) is None:
            return ""
        seen.append(n)
        if i + 1 < samples:
            time.sleep(interval_s)
    busy = statistics.median(seen)
    if busy < 1:
        return ""
    cpus = os.cpu_count() or 1
    seen_now = running_commands()
    named = f" ({', '.join(seen_now)})" if seen_now else ""
    return (
        f"other work shares this machine: {busy:g} process(es) running besides hpcbench on "
        f"{cpus} CPU(s) as the run starts{named}; its times carry that work"
    )
