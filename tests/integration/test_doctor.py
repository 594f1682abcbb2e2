"""The doctor and the placement on the local scheduler, for real: torchrun's and mpiexec's ranks
on one node and on two emulated nodes, each bound to its own core and recorded; the drills named
(a slow node, a slow link, a rank that never arrives) and nothing named without one; submit
--preflight stopping a drilled job before its program, with the doctor's line in status and
logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.placement.topology import parse_cpulist


def hpcbench(
    tmp: Path, *args: str, drill: str = "", timeout: float = 240
) -> subprocess.CompletedProcess:
    env = {**os.environ, "HPCBENCH_STATE_DIR": str(tmp / "state"), "HPCBENCH_DOCTOR_DRILL": drill,
           "HPCBENCH_HISTORY": str(tmp / "history.sqlite")}  # fmt: skip
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "hpcbench", *args], cwd=tmp, env=env, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def _run_dir(tmp: Path) -> Path:
    return max((tmp / "runs").glob("hpcbench-local-*/"), key=lambda p: p.stat().st_mtime)


@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
@pytest.mark.parametrize(("nodes", "ranks"), [(1, 2), (2, 1), (1, 4)])
def test_every_rank_is_bound_and_recorded(tmp_path: Path, launcher: str, nodes: int, ranks: int):
    done = hpcbench(tmp_path, "submit", "--scheduler", "local", "--wait", "--launcher", launcher,
                    "--nodes", str(nodes), "--tasks-per-node", str(ranks),
                    "--module", "hpcbench.probe")  # fmt: skip
    assert done.returncode == 0, done.stderr
    probe = json.loads((_run_dir(tmp_path) / "probe.json").read_text())
    placed = [r["placement"] for r in probe["ranks"]]
    cores = [parse_cpulist(p["cpus"]) for p in placed]
    usable = len(os.sched_getaffinity(0))
    if nodes * ranks <= usable:
        assert all(p["bound_by"] == "hpcbench" and p["threads"] == p["cores"] == 1 for p in placed)
        assert all(not (a & b) for i, a in enumerate(cores) for b in cores[i + 1 :])
        assert probe["placement_warnings"] == []
    else:  # 4 ranks on 2 cores: left unbound (pinned, they would take turns), one warning
        assert all(p["bound_by"] == "none" and p["threads"] == 1 for p in placed)
        (line,) = probe["placement_warnings"]
        logs = "".join(p.read_text() for p in (tmp_path / "runs").glob("hpcbench-local-*.*"))
        assert "ranks 0,1,2,3 share cores" in line and f"hpcbench: {line}" in logs


def test_an_overlapping_placement_asked_for_is_one_warning(tmp_path: Path, shapes_data):
    data = shapes_data(256, 4, (16, 16))
    done = hpcbench(tmp_path, "submit", "--scheduler", "local", "--wait", "--tasks-per-node", "2",
                    "--placement", "0;0", "--", "--data", str(data), "--model", "mlp",
                    "--epochs", "1", "--max-steps", "3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    metrics = json.loads((_run_dir(tmp_path) / "metrics.json").read_text())
    (line,) = metrics["provenance"]["placement_warnings"]
    assert "ranks 0,1 share cores (0 on" in line
    assert f"warning: {line}" in done.stdout
    assert [p["cpus"] for p in metrics["provenance"]["placement"]] == ["0", "0"]


DOCTOR = ("doctor", "--scheduler", "local", "--launcher", "torchrun", "--nodes", "2",
          "--tasks-per-node", "1", "--", "--step-timeout", "8", "--fs-bytes", "8388608",
          "--max-bytes", "2097152",
          "--compute-seconds", "0.5")  # fmt: skip


def test_the_doctor_names_each_drill_and_nothing_without_one(tmp_path: Path):
    healthy = hpcbench(tmp_path, *DOCTOR)  # the first run: nothing to compare with but itself
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    document = json.loads((_run_dir(tmp_path) / "doctor.json").read_text())
    assert document["version"] == 1 and document["healthy"] and document["findings"] == []
    assert list(document["steps"]) == [
        "launch",
        "placement",
        "compute",
        "communication",
        "filesystem",
    ]
    assert document["figures"]["world"] > 0 and "healthy" in healthy.stdout
    healthy_gflops = document["steps"]["compute"]["nodes"]
    refs = tmp_path / "refs.toml"  # a site's references: the healthy run's compute, -30 %
    refs.write_text("[reference]\n" + "".join(
        f'"{node.replace(":", "/")}" = {{ compute_gflops = [{value}, -0.3, inf] }}\n'
        for node, value in healthy_gflops.items()))  # fmt: skip
    # the two slowing drills in one run, each named by its own step and nothing else (the
    # filesystem, measured against the baseline on a busy 2-core machine, is left out)
    done = hpcbench(tmp_path, *DOCTOR, "--steps", "compute,communication",
                    drill="slow-compute:1,slow-link:1")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads((_run_dir(tmp_path) / "doctor.json").read_text())
    compute, link = document["findings"]
    assert compute.startswith("compute: node ") and ":node1 is slow" in compute, compute
    assert link.startswith("communication:") and "the link between" in link, link
    # hpcbench check gates on the site's references too
    checked = hpcbench(tmp_path, "check", str(_run_dir(tmp_path)), "--references", str(refs))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "vm/node1 compute_gflops: " in checked.stdout and "out of tolerance" in checked.stdout
    # every run is in the results history, a record of kind doctor under the cluster's key
    listed = hpcbench(tmp_path, "history", "--json", "--profile", "local-nodes")
    kinds = [e["kind"] for e in json.loads(listed.stdout)]
    assert kinds == ["doctor"] * 2, listed.stdout + listed.stderr
    absent = hpcbench(tmp_path, *DOCTOR, "--steps", "compute", drill="absent:1@compute")
    assert absent.returncode != 0
    document = json.loads((_run_dir(tmp_path) / "doctor.json").read_text())
    assert document["findings"] == ["step compute: rank 1 did not arrive within 8 s"]


def test_preflight_stops_a_drilled_job_before_its_program(tmp_path: Path):
    done = hpcbench(tmp_path, "submit", "--scheduler", "local", "--wait", "--nodes", "2",
                    "--preflight", "--preflight-args", "--step-timeout 8 --compute-seconds 0.2",
                    "--", "--epochs", "1",
                    drill="absent:1@compute")  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    run_dir = _run_dir(tmp_path)
    assert not (run_dir / "metrics.json").exists()  # the trainer never started
    line = "hpcbench: preflight failed: step compute: rank 1 did not arrive within 8 s"
    job = run_dir.name.removeprefix("hpcbench-")
    status = hpcbench(tmp_path, "status", job)
    assert line in status.stdout
    logs = hpcbench(tmp_path, "logs", job)
    assert line in logs.stdout + logs.stderr
    bad = hpcbench(tmp_path, "submit", "--dry-run", "--scheduler", "local", "--placement", "0-")
    assert bad.returncode != 0 and "launcher.placement" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_all_reduce_over_mpi_for_the_mpi_strategy(tmp_path: Path):
    """``--backend mpi``: the same sweeps through mpi4py's Allreduce, ranks started by mpiexec."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    done = subprocess.run(
        [str(mpiexec), "-n", "2", sys.executable, "-m", "hpcbench.doctor", "--backend", "mpi",
         "--steps", "communication", "--max-bytes", "1048576", "--out", str(tmp_path / "out"),
         "--no-history"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "HPCBENCH_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((tmp_path / "out" / "doctor.json").read_text())
    step = document["steps"]["communication"]
    assert step["backend"] == "mpi" and "mpi: " in done.stdout
    (world,) = [s for s in step["sweeps"] if s["group"] == "world"]
    assert world["sizes"][0] == 1024 and world["sizes"][-1] == 1048576
    assert all(b > 0 for b in world["busbw_gbps"])
