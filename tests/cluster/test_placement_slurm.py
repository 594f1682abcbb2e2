"""Placement and the doctor on the real two-node SLURM (tests/cluster/slurm-up.sh): every rank's
binding recorded for srun, torchrun and mpiexec, threads equal to cores; the doctor healthy, then
a drilled node named; submit --preflight stopping a drilled job before its program.

The test cluster runs TaskPlugin=task/none (no cgroups here), under which srun's --cpu-bind is
ignored: the script finds that out and hpcbench's rank start binds srun's tasks instead, which is
what these records show. Its two nodes share this machine's two cores (each is told it has both),
so the records are compared within a node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcbench.placement.topology import parse_cpulist
from tests.cluster.conftest import submitted_id
from tests.conftest import hpcbench

pytestmark = pytest.mark.slurm


def _probe(workdir: Path, *flags: str) -> dict:
    r = hpcbench("submit", "--scheduler", "slurm", "--module", "hpcbench.probe", *flags,
                 "--wait", "--timeout", "240", cwd=workdir, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "slurm")
    return json.loads((workdir / "runs" / f"hpcbench-{job}" / "probe.json").read_text())


@pytest.mark.parametrize(
    ("launcher", "nodes", "ranks", "bound_by"),
    [("srun", 1, 2, "hpcbench"), ("srun", 2, 1, "hpcbench"), ("torchrun", 2, 1, "hpcbench"),
     ("mpiexec", 1, 2, "mpiexec")],
)  # fmt: skip
def test_each_launcher_binds_every_rank_on_slurm(
    slurm_cluster, workdir, launcher, nodes, ranks, bound_by
):
    probe = _probe(workdir, "--launcher", launcher, "--nodes", str(nodes),
                   "--tasks-per-node", str(ranks))  # fmt: skip
    placed = [r["placement"] for r in probe["ranks"]]
    assert len(placed) == nodes * ranks
    assert all(p["bound_by"] == bound_by for p in placed), placed
    assert all(p["threads"] == p["cores"] == 1 for p in placed), placed
    by_node: dict[str, list[frozenset[int]]] = {}
    for p in placed:
        by_node.setdefault(p["node"], []).append(parse_cpulist(p["cpus"]))
    assert len(by_node) == nodes
    for cores in by_node.values():
        assert all(not (a & b) for i, a in enumerate(cores) for b in cores[i + 1 :]), placed
    assert probe["placement_warnings"] == []


DOCTOR = ("doctor", "--scheduler", "slurm", "--launcher", "srun", "--nodes", "2",
          "--tasks-per-node", "1", "--timeout", "240", "--", "--step-timeout", "30",
          "--fs-bytes", "8388608", "--compute-seconds", "0.5")  # fmt: skip


def test_the_doctor_on_slurm_names_a_slow_node(slurm_cluster, workdir):
    healthy = hpcbench(*DOCTOR, cwd=workdir, timeout=300)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "healthy" in healthy.stdout
    drill = {"HPCBENCH_DOCTOR_DRILL": "slow-compute:1"}
    slow = hpcbench(*DOCTOR, "--steps", "compute", cwd=workdir, timeout=300, env=drill)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    job = submitted_id(slow.stdout, "slurm")
    document = json.loads((workdir / "runs" / f"hpcbench-{job}" / "doctor.json").read_text())
    (finding,) = document["findings"]
    assert finding.startswith("compute: node node2 is slow"), finding


def test_preflight_on_slurm_stops_the_job_before_its_program(slurm_cluster, workdir):
    r = hpcbench("submit", "--scheduler", "slurm", "--launcher", "srun", "--nodes", "2",
                 "--preflight", "--preflight-args", "--step-timeout 8 --compute-seconds 0.2",
                 "--program", "touch program-ran", "--wait", "--timeout", "240",
                 cwd=workdir, timeout=300, env={"HPCBENCH_DOCTOR_DRILL": "absent:1@compute"})  # fmt: skip
    assert r.returncode != 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "slurm")
    assert not (workdir / "program-ran").exists()
    status = hpcbench("status", job, cwd=workdir)
    assert "hpcbench: preflight failed: step compute: rank 1 did not arrive within 8 s" in (
        status.stdout
    )
