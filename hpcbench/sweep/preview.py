"""The array script a sweep would submit, shown before anything is submitted or written
(``hpcbench sweep FILE --render``), as ``hpcbench render`` shows a job's: the same checks of
every setting first, then the one array job of all the sweep's tasks, rendered for the scheduler
it would go to. Nothing is created: neither the results directory nor the tasks' settings files
the script names (a continued sweep submits only the tasks left, in an array of that size)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpcbench.jobs.render import render_script
from hpcbench.jobs.submission import resolve_scheduler
from hpcbench.sweep.plan import Sweep
from hpcbench.sweep.runner import SweepRunner


def render_sweep(
    sweep: Sweep,
    results: str | Path,
    scheduler: str | None = None,
    template_dirs: Sequence[str | Path] | None = None,
) -> tuple[str, str, str]:
    """(the scheduler's name, why it was chosen, the array script) of the sweep's first
    submission into ``results``."""
    runner = SweepRunner(sweep, results, scheduler, template_dirs=template_dirs)
    spec = runner.base_spec()
    runner.check_settings(spec)
    folder = runner.results / "submissions" / "1"  # where its first submission's files go
    spec = runner.array_spec(len(runner.tasks), folder)
    name, why = resolve_scheduler(spec, scheduler)
    return name, why, render_script(spec, name, template_dirs)
