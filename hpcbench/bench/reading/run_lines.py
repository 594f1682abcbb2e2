"""What the benchmark runner says of its runs: each one's outcome in a few words, the cause
of a failure in one line (as ``check`` and the report name it too), and the time the runs left
should take."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hpcbench.bench.reading.results_reader import run_metrics


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
        reason = failure_cause(run.error)
        return f" ({reason})" if reason else ""
    try:
        metrics = run_metrics(results, run.run_dir) or {}
        ph, test = metrics["phases"], metrics.get("test") or {}
        acc = f", test accuracy {test['accuracy']:.3f}" if test.get("accuracy") is not None else ""
        return f" in {run.ended - run.started:.0f} s (train {ph['train_s']:.1f} s{acc})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


#: a launcher's label before a rank's line (torchrun --tee, MPICH's -prepend-rank, Open MPI's
#: --tag-output, srun --label) and PyTorch's own ``[rank1]:``
_LABEL = re.compile(
    r"^(?:\[default\d+\]:|\[rank\d+\]:\s?|\[\d+\] |\[\d+,\d+\]<std(?:err|out)>:\s?|\s*\d+: )"
)
#: the longest cause said: one short line, never a log's worth
CAUSE_LIMIT = 200


def failure_cause(error: str) -> str:
    """A failed run's cause in one short line, from the failure report bench keeps
    (``Job.failure_report``): the first failing rank and its traceback's last line
    (``rank 1: RuntimeError: …``); else the last line of the log's tail it quotes; else the
    report's first line (a run never submitted, a program that wrote no metrics.json)."""
    lines = [line.rstrip() for line in error.strip().splitlines() if not line.startswith("logs: ")]
    lines = [line for line in lines if line.strip()]
    head = next((i for i, line in enumerate(lines) if line.startswith("first failing ")), None)
    tail = next((i for i, line in enumerate(lines) if line.startswith("last lines of ")), None)
    if head is not None and head + 1 < len(lines):
        who = lines[head].removeprefix("first failing ").removesuffix(":")
        cause = f"{who}: {_LABEL.sub('', lines[-1]).strip()}"
    elif tail is not None and tail + 1 < len(lines):
        cause = _LABEL.sub("", lines[-1]).strip()
    else:
        cause = lines[0].strip() if lines else ""
    return cause if len(cause) <= CAUSE_LIMIT else cause[: CAUSE_LIMIT - 1].rstrip() + "…"


#: an epoch's line as a training prints it, the trainer's (``epoch 2/3: loss …``) or a user's
#: script's (``epoch 1: loss …``, ``Epoch 2/10 - loss: …``, ``Epoch [4/5] loss=…``): the word,
#: its number (of how many), then what the epoch gave; never a progress bar (``epoch 1/3 [###``)
_EPOCH = re.compile(
    r"(?i)epoch\s*(?:\[\s*\d+(?:\s*/\s*\d+)?\s*\]|\d+(?:\s*/\s*\d+)?)(?!\s*\[)(?!\s*/)"
    r"(?:\s*[:,|\-–]\s*|\s+)\S.*"
)


def epoch_line(line: str) -> str | None:
    """The epoch line in ``line`` without the launcher's label before it, as bench shows it of
    a run while it goes; None for any other line."""
    text = _LABEL.sub("", line.rstrip(), count=1).strip()
    m = _EPOCH.fullmatch(text)
    return m.group(0) if m else None
