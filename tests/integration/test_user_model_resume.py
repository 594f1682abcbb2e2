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
def test_the_users_model_trains_checkpoints_and_resumes_bit_exactly(
    strategy, model, data, tmp_path
):
    """A whole run keeps its checkpoints; a second run resumes from the one of step 6 (mid
    epoch 1: weights, optimiser, RNG and data position) and ends bitwise where the first did.
    (A stop signal mid-epoch and its resume are proved for every strategy by
    test_checkpoint_resume.py; the model is what is new here.)"""
    reference = tmp_path / "reference"
    done = train(strategy, 2, data, reference, "--model", model, "--checkpoint-keep", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    stopped = tmp_path / "stopped"
    middle = reference / "checkpoints" / "ckpt-6.pt"
    resumed = train(strategy, 2, data, stopped, "--model", model, "--resume", str(middle))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming from {middle}" in resumed.stdout, resumed.stdout
    assert_same_run(reference, stopped)
    metrics = json.loads((stopped / "metrics.json").read_text())
    source = metrics["provenance"]["model_source"]
    assert source["factory"] == model and source["file"] == str(USER_MODEL_FILE)
    assert len(source["sha256"]) == 64 and metrics["run"]["model"] == model
