"""A failed run's cause in one line: the failing rank and its exception's last line
(``rank 1: RuntimeError: …``), as ``hpcbench bench`` says it of the run, ``check`` names it and
the report lists it, from the failure report ``runs.json`` keeps (the job's state, the first
failing rank's traceback as the launcher labelled it, the logs). The results directories are
written in the layout ``hpcbench bench`` writes (tests/unit/test_bench_analysis.py's helpers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcbench import cli
from hpcbench.bench.analysing.analysis import analyse
from hpcbench.bench.reading.results_reader import load_results
from hpcbench.bench.reading.run_lines import failure_cause
from hpcbench.bench.reporting import report
from hpcbench.bench.reporting.document import to_markdown
from tests.unit.test_bench_analysis import _small

TORCHRUN_REPORT = """job 4711 failed with exit code 1
first failing rank 1:
[default1]:Traceback (most recent call last):
[default1]:  File "/home/me/train.py", line 40, in <module>
[default1]:    loss.backward()
[default1]:  File "/usr/lib/python3/torch/_tensor.py", line 522, in backward
[default1]:    torch.autograd.backward(
[default1]:RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB
logs: runs/x/job.out and runs/x/job.err"""

TAIL_REPORT = """job 12 failed with exit code 137 (OutOfMemory)
last lines of runs/x/job.err:
loading the dataset
slurmstepd: error: Detected 1 oom_kill event in StepId=12.0
logs: runs/x/job.out and runs/x/job.err"""


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (TORCHRUN_REPORT, "rank 1: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        (TORCHRUN_REPORT.replace("[default1]:", "[1] ").replace("rank 1:", "rank (one of 2-3):"),
         "rank (one of 2-3): RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        (TORCHRUN_REPORT.replace("[default1]:", "1: ").replace("rank 1:", "a rank:"),
         "a rank: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        (TAIL_REPORT, "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0"),
        ("not submitted: sbatch: error: invalid partition", "not submitted: sbatch: error: "
         "invalid partition"),
        ("rank 1: out of memory", "rank 1: out of memory"),
        ("", ""),
    ],
)  # fmt: skip
def test_the_cause_is_the_failing_ranks_last_line(error, cause):
    assert failure_cause(error) == cause


def test_a_very_long_last_line_is_cut_to_one_short_line():
    cause = failure_cause(TORCHRUN_REPORT.replace("2.00 GiB", "x" * 2000))
    assert cause.startswith("rank 1: RuntimeError: CUDA out of memory") and len(cause) <= 200
    assert cause.endswith("…")


def _failed(root: Path, config: str, error: str) -> Path:
    """The first timing run of ``config`` failed with ``error``, as bench records it."""
    doc = json.loads((root / "runs.json").read_text())
    run = next(r for r in doc["runs"] if r["config"] == config)
    run.update(status="failed", error=error, job_id="4711")
    (root / run["run_dir"] / "metrics.json").unlink()
    (root / "runs.json").write_text(json.dumps(doc))
    return root


CAUSE = "rank 1: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_check_names_the_cause_in_one_line_not_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HPCBENCH_HISTORY", str(tmp_path / "history.sqlite"))
    root = _failed(_small(tmp_path / "r", two_train=52.0), "2dev-ddp", TORCHRUN_REPORT)
    (tmp_path / "refs.toml").write_text('[reference]\n"1dev" = { samples_per_s = [1, -1, inf] }\n')
    assert cli.main(["check", str(root), "--references", str(tmp_path / "refs.toml")]) == 1
    out = capsys.readouterr().out
    assert f"2dev-ddp: 1 of 6 timing run(s) failed ({CAUSE})" in out.splitlines(), out
    assert "\\n" not in out and "Traceback" not in out


def test_the_report_names_the_cause_in_one_line_and_keeps_the_report_below(tmp_path):
    root = _failed(_small(tmp_path / "r", two_train=52.0), "2dev-ddp", TORCHRUN_REPORT)
    results = load_results(root)
    text = to_markdown(report.build_blocks(results, analyse(results), (), (), tmp_path / "out"))
    summary = text.split("## Figures")[0]
    assert f"2dev-ddp timing run 1: {CAUSE}" in summary  # the summary says why
    failed = text.split("## Failed runs")[1].split("## Provenance")[0]
    row = next(line for line in failed.splitlines() if line.startswith("| 2dev-ddp"))
    assert CAUSE in row and "Traceback" not in row and "\\n" not in row
    assert "[default1]:Traceback (most recent call last):" in failed  # verbatim, below
