"""The user's own model (its class and factory in a file of the user's:
tests/integration/user_model.py) trained by hpcbench's trainer under mpi (by module) and ddp
(by file), stopped mid-epoch and resumed bit-exactly, its source recorded in the provenance.
A module of its own, so that it runs beside the other checkpoint tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_checkpoint_resume import assert_same_run, train

USER_MODEL_FILE = Path(__file__).resolve().parent / "user_model.py"


@pytest.fixture(scope="module")
def data(shapes_data):
    return shapes_data(900, 9, (16, 12))  # shared with the other trainer modules


@pytest.mark.parametrize(
    ("strategy", "model"),
    [("ddp", f"{USER_MODEL_FILE}:make"), ("mpi", "tests.integration.user_model:make")],
    ids=["ddp-by-file", "mpi-by-module"],
)
def test_the_users_model_trains_stops_and_resumes_bit_exactly(strategy, model, data, tmp_path):
    reference = tmp_path / "reference"
    done = train(strategy, 2, data, reference, "--model", model)
    assert done.returncode == 0, done.stdout + done.stderr
    stopped = tmp_path / "stopped"
    halted = train(strategy, 2, data, stopped, "--model", model, fail_at="1:10:stop")
    assert halted.returncode != 0 and "stopped by" in halted.stderr, halted.stderr
    resumed = train(strategy, 2, data, stopped, "--model", model, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_same_run(reference, stopped)
    metrics = json.loads((stopped / "metrics.json").read_text())
    source = metrics["provenance"]["model_source"]
    assert source["factory"] == model and source["file"] == str(USER_MODEL_FILE)
    assert len(source["sha256"]) == 64 and metrics["run"]["model"] == model
