"""Ranks on different kinds of device stay one model, with real MPI and real torch.distributed
on CPUs: the ``other-device`` failure drill makes one rank nudge its parameters after every step,
as a CPU rank beside a GPU rank rounds differently, and count as a device of its own kind. The
run goes to the end with its checkpoints, the drift it re-synchronised away is in metrics.json,
and a rank that departs while every rank is on one kind of device still stops the run at the
exact replica check.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import need_module
from tests.integration.test_checkpoint_resume import final_weights, train

torch = need_module("torch")


@pytest.fixture(scope="module")
def data(shapes_data):
    return shapes_data(900, 9, (16, 12))  # shared with the other trainer modules


@pytest.mark.parametrize("strategy", ["mpi", "ddp"])
def test_a_rank_on_another_kind_of_device_is_resynchronised_and_checkpoints_go_on(
    strategy, data, tmp_path
):
    out = tmp_path / "run"
    r = train(
        strategy,
        2,
        data,
        out,
        "--resync-every",
        "5",
        "--rank-weights",
        "3,1",
        "--device",
        "cpu",  # the drill is the other kind (a machine's GPU would make rank 0 a third)
        fail_at="1:2:other-device",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replicas: ranks on cpu and other" in r.stdout
    replicas = json.loads((out / "metrics.json").read_text())["replicas"]
    assert replicas["mixed"] and replicas["device_kinds"] == ["cpu", "other"]
    # every 5 steps, before the checkpoints every 3 steps, before each validation and the test
    assert replicas["resyncs"] >= 16 // 5 + 16 // 3
    assert 0 < replicas["max_relative_drift"] < 1e-5
    assert [d["step"] for d in replicas["drifts"]][:4] == [3, 5, 6, 8]
    assert final_weights(out)  # the last checkpoint passed the exact replica check


def test_a_departing_replica_on_one_kind_of_device_still_stops_the_run(data, tmp_path):
    r = train("mpi", 2, data, tmp_path / "run", "--device", "cpu", fail_at="1:2:drift")
    assert r.returncode != 0
    assert "the model replicas differ between ranks at step 3" in r.stdout + r.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_rank_staging_its_gradients_adds_channels_last_weights_element_by_element(data, tmp_path):
    """A GPU rank beside CPU ranks copies its gradients through host buckets while the CPU ranks'
    gradients are the buckets: both must lay a channels_last weight out the same way, or the
    all-reduce adds unrelated elements and the model learns something else."""
    runs = {}
    for name, extra in (("plain", ()), ("channels-last", ("--channels-last",))):
        out = tmp_path / name
        r = train("mpi", 2, data, out, "--device", "cpu", *extra, fail_at="1:0:other-device")
        assert r.returncode == 0, r.stdout + r.stderr
        runs[name] = json.loads((out / "metrics.json").read_text())
    assert runs["channels-last"]["config"]["channels_last"] is True
    assert [e["train_loss"] for e in runs["channels-last"]["epochs"]] == pytest.approx(
        [e["train_loss"] for e in runs["plain"]["epochs"]], rel=1e-4
    )


def test_a_mixed_run_stopped_at_a_resynchronisation_resumes_bit_exactly(data, tmp_path):
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    args = ("--resync-every", "4")
    assert train("mpi", 2, data, ref, *args, fail_at="1:0:other-device").returncode == 0
    stopped = train("mpi", 2, data, cut, *args, fail_at="1:0:other-device,0:11:stop")
    assert stopped.returncode != 0
    resumed = train("mpi", 2, data, cut, *args, "--resume", "auto", fail_at="1:0:other-device")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    a, b = final_weights(ref), final_weights(cut)
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after the resume"
