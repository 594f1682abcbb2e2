"""The sweep report's header names what ran: any program's command and its arguments (each
``{axis}`` as the sweep gives it), or hpcbench's trainer and its common options, and the job
spec (or that there is none). The results directories are written here as ``hpcbench sweep``
writes them (sweep.json, each task's metrics.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcbench.bench.reporting.document import to_markdown
from hpcbench.sweep.analysis import analyse_sweep
from hpcbench.sweep.plan import build_sweep
from hpcbench.sweep.report import build_blocks
from hpcbench.sweep.runner import SWEEP_FORMAT


def _results(root: Path, **table) -> Path:
    sweep = build_sweep({"axes": {"lr": [0.1, 0.2]}, **table}, "s.toml", "s")
    tasks = []
    for i, task in enumerate(sweep.tasks()):
        tasks.append({"index": i + 1, "setting": task.setting, "rep": task.rep, "run": task.run})
        (root / "runs" / task.run).mkdir(parents=True)
        (root / "runs" / task.run / "metrics.json").write_text('{"validation": 0.5}')
    doc = {"format": SWEEP_FORMAT, "sweep": sweep.to_dict(), "tasks": tasks}
    (root / "sweep.json").write_text(json.dumps(doc))
    return root


def _header(root: Path) -> list[str]:
    text = to_markdown(build_blocks(analyse_sweep(root), [], [], root / "report"))
    return text.split("## Ranking")[0].splitlines()


@pytest.mark.parametrize(
    ("program", "shown"),
    [
        ({"script": "train.py"}, "python train.py"),
        ({"module": "mylab.train"}, "python -m mylab.train"),
        ({"command": ["./run.sh", "--fast"]}, "./run.sh --fast"),
    ],
)
def test_a_sweep_of_any_program_names_the_program_and_its_arguments(tmp_path, program, shown):
    root = _results(tmp_path / "s", program=program, program_args=["--lr", "{lr}", "--epochs=2"])
    header = _header(root)
    assert f"- program: {shown} --lr {{lr}} --epochs=2" in header, header
    assert not any("trainer options" in line for line in header), header
    assert not any("(the defaults)" in line for line in header), header
    assert "- job spec: none (hpcbench's default job)" in header, header


def test_a_sweep_of_the_trainer_names_it_and_its_common_options(tmp_path):
    root = _results(tmp_path / "s", trainer_args=["--epochs", "3"], job="jobs/demo.toml")
    header = _header(root)
    assert "- program: hpcbench's trainer (python -m hpcbench.train)" in header, header
    assert "- common trainer options: --epochs 3" in header, header
    assert "- job spec: jobs/demo.toml" in header, header
