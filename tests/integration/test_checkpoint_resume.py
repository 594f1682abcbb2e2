"""Checkpoints and resume with real processes: one process, real MPI (mpiexec) and real
torch.distributed (torchrun, gloo), on a real HDF5 dataset.

A run interrupted mid-epoch (a stop signal, a rank killed with SIGKILL, a hung rank, a disk that
fills during a checkpoint) and continued with ``--resume auto`` must end with weights bitwise equal
to an uninterrupted run of the same configuration, and with the same per-step losses.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import have_module, mpiexec_available, need_module, require
from tests.integration.test_trainer import env, launch

torch = need_module("torch")

ARGS = [
    "--epochs",
    "2",
    "--max-steps",
    "8",
    "--global-batch-size",
    "16",
    "--model",
    "small_cnn",
    "--checkpoint-every",
    "3",
    "--progress",
    "lines",
    "--eval-batch-size",
    "128",
    # Bit-exact on a GPU needs --deterministic (cuDNN's and cuBLAS's kernels); a CPU is
    # deterministic without it, which these tests then prove, and the trainer then leaves
    # PyTorch's compiler unloaded (the flag's PyTorch call loads it: a second of CPU a rank).
    *(["--deterministic"] if torch.cuda.is_available() else []),
]
STEPS = 16  # 2 epochs x 8 steps


@pytest.fixture(scope="module")
def data(shapes_data):
    return shapes_data(900, 9, (16, 12))  # shared with the other trainer modules


def command(strategy: str, ranks: int) -> list[str]:
    if strategy == "mpi":
        require(have_module("mpi4py") and mpiexec_available(), "mpi4py and mpiexec")
    return launch(strategy, ranks, ["-m", "hpcbench.train"])


def train(
    strategy: str,
    ranks: int,
    data: Path,
    out: Path,
    *extra: str,
    fail_at: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    e = env()
    if fail_at:
        e["HPCBENCH_FAIL_AT"] = fail_at
    return subprocess.run(
        [
            *command(strategy, ranks),
            "--strategy",
            strategy,
            "--data",
            str(data),
            "--output-dir",
            str(out),
            *ARGS,
            *extra,
        ],
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def final_weights(out: Path) -> dict:
    from hpcbench.train.checkpoint_file import checkpoint_files, decode

    (steps, path), *_ = checkpoint_files(out / "checkpoints")
    assert steps == STEPS
    return decode(path)["model"]


def assert_same_run(reference: Path, resumed: Path) -> None:
    a, b = final_weights(reference), final_weights(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after the resume"
    assert (reference / "steps.csv").read_text() == (resumed / "steps.csv").read_text()
    ref, res = (json.loads((d / "metrics.json").read_text()) for d in (reference, resumed))
    for key in ("train_loss", "train_accuracy", "val_accuracy"):
        assert [e[key] for e in ref["epochs"]] == pytest.approx([e[key] for e in res["epochs"]])
    assert res["test"] == pytest.approx(ref["test"])


def reference_run(shared_run, data: Path, strategy: str, ranks: int, *extra: str) -> Path:
    """The uninterrupted run of ``train`` with these options on ``data`` (a ``shapes_data``
    set, named by its shape), made once in the session for every module that compares with it."""

    def make(out: Path) -> None:
        r = train(strategy, ranks, data, out, *extra)
        assert r.returncode == 0, r.stdout + r.stderr

    key = " ".join([data.parent.name.rsplit("-", 1)[0], strategy, str(ranks), *ARGS, *extra])
    return shared_run(key, make)


@pytest.fixture(scope="module")
def references(data, shared_run):
    """One uninterrupted run per (strategy, ranks, options), made when first asked for."""

    def get(strategy: str, ranks: int, *extra: str) -> Path:
        return reference_run(shared_run, data, strategy, ranks, *extra)

    return get


# The last case carries every piece of state beyond the weights: the fp16 loss scale, each
# rank's error-feedback residuals, and batches read ahead when the stop came.
CASES = [
    ("single", 1, ()),
    ("ddp", 2, ()),
    ("mpi", 2, ()),
    (
        "mpi",
        2,
        (
            "--precision",
            "fp16",
            "--grad-compression",
            "bf16",
            "--error-feedback",
            "--prefetch",
            "2",
        ),
    ),
]


@pytest.mark.parametrize(
    ("strategy", "ranks", "extra"),
    CASES,
    ids=["single", "ddp", "mpi", "mpi-fp16-compressed"],
)
def test_a_stop_signal_mid_epoch_then_resume_auto_is_bit_exact(
    strategy, ranks, extra, data, references, tmp_path
):
    reference = references(strategy, ranks, *extra)
    rank = ranks - 1  # the last rank is signalled: every rank must stop with it
    r = train(strategy, ranks, data, tmp_path, *extra, fail_at=f"{rank}:10:stop")
    assert r.returncode != 0
    if strategy != "ddp":  # torchrun reports its own status for failed workers
        assert r.returncode == 75, r.stdout + r.stderr
    assert "stopped by" in r.stderr and "epoch 2, step 3" in r.stderr, r.stderr
    assert not (tmp_path / "metrics.json").exists()  # no results for a run that did not finish
    r = train(strategy, ranks, data, tmp_path, *extra, "--resume", "auto")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resuming from" in r.stdout and "ckpt-11.pt" in r.stdout, r.stdout
    assert_same_run(reference, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["checkpoints"]["resumed_from"].endswith("ckpt-11.pt")
    assert metrics["checkpoints"]["max_s"] > 0


def test_a_killed_rank_then_a_hung_rank_and_resume_finishes_the_run(data, references, tmp_path):
    """A rank SIGKILLed at a random step ends the run; the resumed run meets a rank that hangs
    (the watchdog names it and ends the run); the second resume finishes bit-exactly."""
    reference = references("mpi", 2)
    step = random.Random().randrange(4, 9)
    r = train("mpi", 2, data, tmp_path, fail_at=f"1:{step}:kill", timeout=120)
    assert r.returncode != 0
    assert "rank 1 is killed (SIGKILL)" in r.stdout + r.stderr
    from hpcbench.train.checkpoint_file import checkpoint_files, decode

    written = checkpoint_files(tmp_path / "checkpoints")
    # the last one before the kill: every 3 steps, and at the end of epoch 1 (8 steps)
    assert written and written[0][0] == max(k for k in (3, 6, 8) if k <= step)
    for _, path in written:
        decode(path)  # intact
    r = train(
        "mpi", 2, data, tmp_path, "--resume", "auto", "--hang-timeout", "5",
        fail_at="1:12:hang", timeout=120,
    )  # fmt: skip
    assert r.returncode != 0
    assert "rank 1 made no progress for" in r.stderr and "this rank hangs" in r.stderr, r.stderr
    r = train("mpi", 2, data, tmp_path, "--resume", "auto")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ckpt-12.pt" in r.stdout
    assert_same_run(reference, tmp_path)


def test_a_full_disk_a_foreign_configuration_and_a_corrupt_checkpoint(data, references, tmp_path):
    """The disk fills during a checkpoint (the previous ones stay, no temporary file is left);
    a resume with another --lr is refused naming the option, a file that is no checkpoint is
    refused; the newest checkpoint, corrupted, is skipped with a warning and the run continues
    from the one before, bit-exactly."""
    reference = references("single", 1)
    r = train("single", 1, data, tmp_path, fail_at="0:9:disk-full")
    assert r.returncode == 1
    assert "cannot write the checkpoint of step 9" in r.stderr, r.stderr
    checkpoints = tmp_path / "checkpoints"
    # the last two written (every 3 steps and at the epoch's end), no temporary file left
    assert sorted(p.name for p in checkpoints.iterdir()) == ["ckpt-6.pt", "ckpt-8.pt"]

    r = train("single", 1, data, tmp_path, "--resume", "auto", "--lr", "0.2")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--lr" in lines[0] and "ckpt-8.pt" in lines[0], r.stderr
    bad = tmp_path / "not-a-checkpoint.pt"
    bad.write_bytes(b"junk")
    r = train("single", 1, data, tmp_path, "--resume", str(bad))
    assert r.returncode == 2
    assert (
        r.stderr.strip() == f"hpcbench train: error: {bad}: not an hpcbench checkpoint (no header)"
    )

    newest = checkpoints / "ckpt-8.pt"
    blob = bytearray(newest.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    newest.write_bytes(bytes(blob))
    r = train("single", 1, data, tmp_path, "--resume", "auto")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"skipping {newest}: corrupt" in r.stderr, r.stderr
    assert "resuming from" in r.stdout and "ckpt-6.pt" in r.stdout
    assert_same_run(reference, tmp_path)


def test_resume_at_another_world_size_with_the_same_global_batch(data, tmp_path):
    """Global data order: the checkpoint of 2 MPI ranks continues on one process. A model
    without batch norm (whose statistics depend on the per-rank batch), so the runs are equal up
    to float32 summation order, not bitwise."""
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    r = train("mpi", 2, data, reference, "--model", "mlp")
    assert r.returncode == 0, r.stdout + r.stderr
    r = train("mpi", 2, data, resumed, "--model", "mlp", fail_at="0:5:stop")
    assert r.returncode == 75, r.stdout + r.stderr
    r = train("single", 1, data, resumed, "--model", "mlp", "--resume", "auto")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "written by 2 rank(s)" in r.stdout
    a, b = final_weights(reference), final_weights(resumed)
    for name in a:
        torch.testing.assert_close(a[name], b[name])


def test_sigterm_to_a_plain_run_checkpoints_and_exits_75(data, tmp_path):
    """No scheduler: a TERM from the user (or a container runtime) stops at the next step."""
    e = env()
    proc = subprocess.Popen(
        [
            *command("single", 1),
            "--data",
            str(data),
            "--output-dir",
            str(tmp_path),
            *ARGS,
            "--epochs",
            "200",
        ],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "checkpoints").glob("ckpt-*.pt")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 75, err
    assert "stopped by SIGTERM" in err
