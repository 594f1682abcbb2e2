"""``--channels-last`` and ``--compile`` with real processes on CPUs (where channels_last runs too,
and torch.compile runs wherever a C++ compiler is installed): every strategy takes them, the
model learns the same, checkpoints are the model's own, ``dp`` refuses ``--compile`` in one line.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.conftest import need_module
from tests.integration.test_checkpoint_resume import final_weights, reference_run, train

torch = need_module("torch")


@pytest.fixture(scope="module")
def data(shapes_data):
    return shapes_data(900, 9, (16, 12))  # shared with the other trainer modules


@pytest.fixture(scope="module")
def plain(data, shared_run):
    """The same runs without the options, one per strategy (the checkpoint tests' references:
    made once in the session)."""
    return {
        strategy: reference_run(shared_run, data, strategy, ranks)
        for strategy, ranks in (("single", 1), ("mpi", 2), ("ddp", 2))
    }


def metrics(run_dir):
    return json.loads((run_dir / "metrics.json").read_text())


# On a CPU the two memory layouts run the same arithmetic. On a GPU cuDNN runs other kernels for
# NHWC, in TF32 (PyTorch's default for convolutions on Ampere and later): measured on an H200,
# the losses of 16 steps agree within 2e-4 but single weights of the first convolution move by up
# to 0.009. "The same" there is the same within rounding of that size (a layout mistake in the
# gradients' sums moves the loss by per cent: the loss check catches it).
ON_GPU = torch.cuda.is_available()
LOSS_REL, WEIGHT_RTOL, WEIGHT_ATOL = (2e-3, 5e-2, 2e-2) if ON_GPU else (1e-4, 1e-3, 1e-5)


def assert_learns_the_same(a, b):
    ma, mb = metrics(a), metrics(b)
    assert [e["train_loss"] for e in ma["epochs"]] == pytest.approx(
        [e["train_loss"] for e in mb["epochs"]], rel=LOSS_REL
    )
    assert ma["test"]["accuracy"] == pytest.approx(mb["test"]["accuracy"], abs=0.02)
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()  # the model's own names: no wrapper's prefix
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL)


@pytest.mark.parametrize("strategy,ranks", [("single", 1), ("mpi", 2), ("ddp", 2)])
def test_channels_last_learns_the_same_with_every_strategy(strategy, ranks, data, plain, tmp_path):
    out = tmp_path / "run"
    r = train(strategy, ranks, data, out, "--channels-last")
    assert r.returncode == 0, r.stdout + r.stderr
    assert metrics(out)["config"]["channels_last"] is True
    assert_learns_the_same(out, plain[strategy])


def _compiler() -> bool:
    return shutil.which("c++") is not None or shutil.which("g++") is not None


@pytest.mark.parametrize("strategy,ranks", [("single", 1), ("mpi", 2)])
def test_compile_learns_the_same_or_stops_in_one_line(strategy, ranks, data, plain, tmp_path):
    out = tmp_path / "run"
    r = train(strategy, ranks, data, out, "--compile", "default", timeout=600)
    if not _compiler():  # no C++ compiler: torch.compile cannot work on a CPU
        assert r.returncode == 2, r.stdout + r.stderr
        assert "--compile default: torch.compile cannot work on this machine's cpu" in r.stderr
        return
    assert r.returncode == 0, r.stdout + r.stderr
    assert metrics(out)["config"]["compile"] == "default"
    assert_learns_the_same(out, plain[strategy])


def test_compile_is_refused_for_dp_in_one_line(data, tmp_path):
    import subprocess

    from tests.integration.test_trainer import env

    r = subprocess.run(
        [sys.executable, "-m", "hpcbench.train", "--strategy", "dp", "--compile", "default",
         "--data", str(data), "--output-dir", str(tmp_path / "run")],
        env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "hpcbench train: error: --compile default cannot compile torch.nn.DataParallel's "
        "per-step replicas (--strategy dp); use --strategy ddp, one process per GPU"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("strategy", ["mpi", "ddp"])
def test_a_world_of_one_communicates_nothing_and_trains_as_single(strategy, data, plain, tmp_path):
    """One rank under mpiexec or torchrun: no buckets or collectives per step, no communication
    time, the same weights bit for bit as ``single``."""
    out = tmp_path / "run"
    r = train(strategy, 1, data, out)
    assert r.returncode == 0, r.stdout + r.stderr
    m = metrics(out)
    assert [e["comm_time_s"] for e in m["epochs"]] == [0.0, 0.0]
    if strategy == "mpi":
        assert "mpi: one rank: no buckets, nothing communicated" in r.stdout
    a, b = final_weights(out), final_weights(plain["single"])
    for name in a:
        assert torch.equal(a[name], b[name]), name
