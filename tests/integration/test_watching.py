"""Watching a run for real: 4 ranks under torchrun on the local scheduler, each appending its
telemetry; the slow-rank drill's rank named live in the job's log and by ``hpcbench watch``
(plain lines when piped, rich tables under tmux), in the report's straggler section and figure;
no rank named without the drill; profiler traces of every rank that parse in their format."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import have_module, hpcbench, require

pytestmark = pytest.mark.torch

TMUX = ["tmux", "-L", "hpcbench-watch-test"]
FOUR_RANKS = ["--nodes", "2", "--gpus-per-node", "2", "--scheduler", "local"]


def submit(workdir: Path, data: Path, *trainer: str, env: dict | None = None) -> str:
    """4 ranks of 2 epochs; a record every 0.5 s (``--telemetry`` in ``trainer`` wins): each a
    mean over enough steps that 4 ranks sharing 2 loaded cores do not look unequal."""
    r = hpcbench("submit", *FOUR_RANKS, "--", "--data", str(data), "--epochs", "2",
                 "--telemetry", "0.5", *trainer, cwd=workdir, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.split("submitted job ", 1)[1].split()[0]


@pytest.fixture
def data(shapes_data):
    return shapes_data(1024, 4, (32, 32))


def test_a_slowed_rank_is_named_in_the_log_by_watch_and_in_the_report(workdir, data, tmp_path):
    require(have_module("torch"), "torch")
    from hpcbench.watch import Watcher, resolve, watch

    job = submit(workdir, data, "--trace-steps", "4:5", env={"HPCBENCH_FAIL_AT": "2:3:slow"})
    target = resolve(job)
    watcher = Watcher(target)
    out = io.StringIO()  # not a terminal: plain lines, a block per refresh
    assert watch(target, interval=0.5, out=out, watcher=watcher) == 0
    text = out.getvalue()
    refreshes = text.count(f"job {job}:")
    # one scheduler question per refresh while the job runs, none once it has ended
    assert 1 <= watcher.queries <= refreshes, (watcher.queries, refreshes)
    flagged = [line for line in text.splitlines() if "STRAGGLER" in line]
    assert flagged and all(line.lstrip().startswith("rank 2 ") for line in flagged), text
    assert "\x1b[" not in text and text.rstrip().endswith(f"job {job} completed")

    run_dir = target.record.run_dir
    log = target.record.stdout_path.read_text()
    assert "straggler: rank 2 on " in log and "since step" in log, log
    assert "straggler: rank 0" not in log and "straggler: rank 1" not in log

    # the traces: one per rank, Chrome trace JSON naming its rank, and a summary each
    for rank in range(4):
        trace = json.loads((run_dir / "traces" / f"rank-{rank}.pt.trace.json").read_text())
        assert trace["hpcbench"]["rank"] == rank and trace["traceEvents"]
        summary = json.loads((run_dir / "traces" / f"rank-{rank}.summary.json").read_text())
        assert summary["steps"] == [4, 5] and summary["top_ops"]

    # the report of a matrix holding this run: the straggler section, its figure, the traces
    from hpcbench.bench.reporting.report import build_report
    from tests.integration.test_bench_report import write_results

    results = write_results(tmp_path / "results")
    runs = json.loads((results / "runs.json").read_text())["runs"]
    first = next(r for r in runs if r["status"] == "completed")
    for part in ("telemetry", "traces"):
        shutil.copytree(run_dir / part, results / first["run_dir"] / part)
    paths = build_report(results)
    report = paths[0].read_text()
    section = report.split("## Ranks: stragglers and traces", 1)[1]
    assert re.search(r"\| rank 2 \(\S+\) [\d.]+x from step \d+ \|", section), section
    assert (results / "report" / "figures" / "ranks.png").stat().st_size > 1000
    assert section.count("| 4–5 |") == 4  # each rank's traced steps


def test_without_a_slowed_rank_none_is_named_and_tmux_shows_the_tables(workdir, data):
    require(have_module("torch"), "torch")
    require(shutil.which("tmux") is not None, "tmux (apt-get install tmux)")
    job = submit(workdir, data, "--telemetry", "1", env={"HPCBENCH_STEP_DELAY": "0.05"})
    session = f"hpcbench-watch-{job}"  # on a tmux server of its own (-L): this test's env
    watch_cmd = f"cd {workdir} && python -m hpcbench watch {job} --interval 0.5; sleep 30"
    subprocess.run([*TMUX, "new-session", "-d", "-s", session, "-x", "150", "-y", "50",
                    watch_cmd], check=True, env=_tmux_env())  # fmt: skip
    try:
        screens = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            screen = _capture(session)
            screens.append(screen)
            if f"job {job} completed" in screen:
                break
            time.sleep(1)
        running = [s for s in screens if "compute" in s and "ranks" in s]
        assert running, screens[-1]
        assert "┃" in running[-1] or "│" in running[-1]  # rich's table, drawn in place
        assert "STRAGGLER" not in "".join(screens)
        assert f"job {job} completed" in screens[-1], screens[-1]
    finally:
        subprocess.run([*TMUX, "kill-server"], check=False)
    from hpcbench.watch import resolve

    log = resolve(job).record.stdout_path.read_text()
    assert "straggler" not in log, log


def _tmux_env() -> dict:
    import os
    import sys

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env["TERM"] = "xterm-256color"
    return env


def _capture(session: str) -> str:
    r = subprocess.run([*TMUX, "capture-pane", "-p", "-t", session], capture_output=True, text=True)
    return r.stdout


class Watching:
    """``hpcbench watch`` of a matrix's or a sweep's results directory, in a thread, from the
    moment the directory has its files until what it holds has ended (used by the matrix and
    sweep tests while their command runs)."""

    def __init__(self, results: Path, marker: str, interval: float = 0.5) -> None:
        import threading

        self.results, self.marker, self.interval = results, marker, interval
        self.out = io.StringIO()
        self.status: int | None = None
        self.queries = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from hpcbench.watch import Watcher, resolve, watch

        deadline = time.monotonic() + 300
        while not (self.results / self.marker).is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        target = resolve(str(self.results))
        watcher = Watcher(target)
        self.status = watch(target, interval=self.interval, out=self.out, watcher=watcher)
        self.queries = watcher.queries

    def result(self, timeout: float = 120) -> str:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "watch did not end with what it watched"
        return self.out.getvalue()
