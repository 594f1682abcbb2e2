"""What the benchmark runner says of its runs: each one's outcome in a few words, the reason
of a failure, and the time the runs left should take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpcbench.bench.results_reader import run_metrics


def time_left(todo: list[Any], durations: dict[str, list[float]]) -> str:
    if not todo:
        return ""
    known = [d for ds in durations.values() for d in ds]
    if not known:
        return ""
    fallback = sum(known) / len(known)
    seconds = sum(
        sum(durations[r.config]) / len(durations[r.config]) if r.config in durations else fallback
        for r in todo
    )
    return f"; {len(todo)} run(s) left, about {duration(seconds)}"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def outcome(results: Path, run: Any) -> str:
    if run.status != "completed":
        reason = failure_reason(run.error)
        return f" ({reason})" if reason else ""
    try:
        metrics = run_metrics(results, run.run_dir) or {}
        ph, test = metrics["phases"], metrics.get("test") or {}
        acc = f", test accuracy {test['accuracy']:.3f}" if test.get("accuracy") is not None else ""
        return f" in {run.ended - run.started:.0f} s (train {ph['train_s']:.1f} s{acc})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def failure_reason(error: str) -> str:
    """The line of a failure report that says why: the failing rank's last line (its exception
    or one-line error), else the report's first line."""
    lines = [line for line in error.strip().splitlines() if not line.startswith("logs: ")]
    if any(line.startswith("first failing ") for line in lines):
        return lines[-1].strip()
    return lines[0].strip() if lines else ""
