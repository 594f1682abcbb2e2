"""The trainer with ``--energy on``, 2 real ranks on one node (mpiexec with mpi, torchrun with ddp).

This machine has no RAPL files and no GPU, so the counted run reads a fake powercap tree
(``$HPCBENCH_POWERCAP_ROOT``, the reader's test hook) whose counters this test advances while the
ranks train: the node must appear once, each device once, with exactly the counters' advance
(not once per rank). A run without the hook reads what the machine really has.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import have_module, mpiexec_available, need_module, require
from tests.integration.test_trainer import env, launch

need_module("torch")

MAX_RANGE = 1_000_000  # µJ; the package counter starts near it and wraps once
TICKS, PACKAGE_STEP, DRAM_STEP = 40, 7_000, 300
ARGS = ["--epochs", "3", "--global-batch-size", "16", "--progress", "none"]


@pytest.fixture(scope="module")
def small_data(shapes_data):
    return shapes_data(900, 9, (16, 12))  # shared with the other trainer modules


def write(path: Path, value: int) -> None:
    """As the kernel shows it: whole, never half-written (temporary file, then rename)."""
    tmp = path.with_name(".energy_uj.tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def fake_powercap(root: Path) -> tuple[Path, Path]:
    pkg = root / "intel-rapl:0"
    dram = pkg / "intel-rapl:0:0"
    dram.mkdir(parents=True)
    for d, name, start, top in ((pkg, "package-0", 990_000, MAX_RANGE), (dram, "dram", 0, 5_000)):
        (d / "name").write_text(name + "\n")
        (d / "max_energy_range_uj").write_text(f"{top}\n")
        write(d / "energy_uj", start)
    return pkg / "energy_uj", dram / "energy_uj"


def check_windows(metrics: dict, epochs: int, began: float, ended: float) -> None:
    windows = metrics["phase_windows"]
    assert [w["phase"] for w in windows] == ["setup"] + ["train", "val"] * epochs + ["test"]
    bounds = [t for w in windows for t in (w["start"], w["end"])]
    assert bounds == sorted(bounds), windows
    assert began <= bounds[0] and bounds[-1] <= ended


RANKS = 2  # several ranks on this node; each rank costs seconds of start-up on 2 cores


def start_run(strategy: str, data: Path, out: Path, cwd: Path, extra: dict) -> subprocess.Popen:
    args = ["-m", "hpcbench.train", "--data", str(data), *ARGS, "--output-dir", str(out)]
    args += ["--strategy", strategy, "--energy", "on", "--energy-interval", "0.02"]
    return subprocess.Popen(
        launch(strategy, RANKS, args),
        cwd=cwd,
        env={**env(), **extra},
        stdout=subprocess.PIPE,
        stderr=open(cwd / "stderr.txt", "w"),  # noqa: SIM115 - closed with the process
        text=True,
        stdin=subprocess.DEVNULL,
    )


def need(strategy: str) -> None:
    if strategy == "mpi":
        require(mpiexec_available() and have_module("mpi4py"), "mpiexec and mpi4py")


@pytest.mark.mpi
@pytest.mark.parametrize("strategy", ["mpi", "ddp"])
def test_ranks_sharing_a_node_count_it_once(strategy, small_data, tmp_path):
    need(strategy)
    package, dram = fake_powercap(tmp_path / "powercap")
    out = tmp_path / "run"
    began = time.time()
    # The counters advance while the ranks are in their second epoch, far from the run's first
    # and last sample (energy within a sampling interval is spread over it, so an advance in
    # the interval where the run starts would be counted partly before it): the slow-step drill
    # keeps each epoch longer than the advances, however fast the start-up and the steps.
    extra = {"HPCBENCH_POWERCAP_ROOT": str(tmp_path / "powercap"), "HPCBENCH_STEP_DELAY": "0.01"}
    proc = start_run(strategy, small_data, out, tmp_path, extra)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("epoch 1/"):
            break
    unwrapped = 990_000
    for tick in range(TICKS):  # the node's energy while the ranks train
        unwrapped += PACKAGE_STEP
        write(package, unwrapped % MAX_RANGE)
        write(dram, (tick + 1) * DRAM_STEP % 5_000)
        time.sleep(0.002)
    rest, _ = proc.communicate(timeout=600)
    ended = time.time()
    stdout = "".join(lines) + rest
    assert proc.returncode == 0, stdout[-3000:] + (tmp_path / "stderr.txt").read_text()[-3000:]
    assert unwrapped > MAX_RANGE  # the package counter did wrap

    energy = json.loads((out / "energy.json").read_text())
    assert energy["format"] == "hpcbench-energy/1" and energy["interval_s"] == 0.02
    (node,) = energy["nodes"]  # one node, one entry: one sampler, not one per rank
    assert node["host"] == socket.gethostname()
    names = [d["name"] for d in node["devices"]]
    assert len(names) == len(set(names)) and {"package-0", "dram-0"} <= set(names)
    by_name = {d["name"]: d for d in node["devices"]}
    pkg, mem = by_name["package-0"], by_name["dram-0"]
    assert pkg["method"] == mem["method"] == "rapl" and pkg["used"]
    # Exactly the counters' advance, once (a sampler per rank would sum it RANKS times).
    assert pkg["total_j"] == TICKS * PACKAGE_STEP / 1e6
    assert mem["total_j"] == TICKS * DRAM_STEP / 1e6
    # Each phase measured (interpolated between readings), none beyond the whole.
    assert all(j is not None and j >= 0 for j in pkg["phases"].values()), pkg["phases"]
    assert sum(pkg["phases"].values()) <= pkg["total_j"] + 1e-12
    joules = [j for _, j in pkg["samples"]]
    assert joules == sorted(joules) and joules[0] == 0.0
    assert joules[-1] == pkg["total_j"]
    gpu = by_name.get("gpu")
    assert gpu is None or (gpu["method"] == "unavailable" and gpu["total_j"] is None)

    metrics = json.loads((out / "metrics.json").read_text())
    check_windows(metrics, 3, began, ended)
    assert "energy:" in stdout and str(out / "energy.json") in stdout


def rapl_readable() -> bool:
    try:
        next(Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj")).read_text()
        return True
    except (OSError, StopIteration):
        return False


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.mpi
def test_without_readable_counters_every_device_is_unavailable_never_zero(small_data, tmp_path):
    need("mpi")
    out = tmp_path / "run"
    began = time.time()
    proc = start_run("mpi", small_data, out, tmp_path, {})
    stdout, _ = proc.communicate(timeout=600)
    ended = time.time()
    assert proc.returncode == 0, stdout[-3000:] + (tmp_path / "stderr.txt").read_text()[-3000:]
    (node,) = json.loads((out / "energy.json").read_text())["nodes"]
    devices = node["devices"]
    assert devices
    for d in devices:
        unavailable = d["method"] == "unavailable"
        if unavailable:
            assert d["reason"] and d["samples"] == [] and d["total_j"] is None
            assert set(d["phases"].values()) == {None}
        else:  # a machine with real counters (not this VM): real figures
            assert d["total_j"] is not None and d["samples"]
    if not rapl_readable() and not nvml_works():
        assert all(d["method"] == "unavailable" for d in devices)
        # the CPU packages always (unavailable here); no "gpu" entry when the node has no NVIDIA
        # driver and the run computes on the CPU (there is no GPU to count)
        assert "cpu" in {d["kind"] for d in devices} <= {"gpu", "cpu"}
    check_windows(json.loads((out / "metrics.json").read_text()), 3, began, ended)
