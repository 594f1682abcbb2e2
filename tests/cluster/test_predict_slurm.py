"""``python -m hpcbench.predict`` as a real SLURM job: four MPI ranks on two nodes started by srun
(PMI-2), a pipeline whose credits come from a calibration across the nodes; and a rank killed
mid-run ends the job within a minute, with the rank named.

The roles are given: with ``--roles auto`` the calibration may find, on a loaded machine, every
split slower than one process (then rank 0 predicts alone, as it should), and the pipeline this
test proves would not run. Choosing the roles from a calibration is proved where the timing is
set by a drill (tests/integration/test_predict.py) and by tests/unit/test_predict_plan.py."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import submitted_id
from tests.conftest import have_module, hpcbench, require

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]


def submit_predict(workdir: Path, args: list[str], *flags: str) -> subprocess.CompletedProcess:
    return hpcbench(
        *("submit", "--scheduler", "slurm", "--nodes", "2", "--tasks-per-node", "2"),
        *("--launcher", "srun", "--module", "hpcbench.predict", *flags),
        *("--wait", "--timeout", "300", "--", *args),
        cwd=workdir,
        timeout=400,
    )


def test_the_pipeline_as_a_slurm_job_over_two_nodes_then_a_killed_rank(
    slurm_cluster, workdir, cluster_data
):
    require(have_module("torch") and have_module("mpi4py"), "torch and mpi4py")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    trained = subprocess.run(
        [sys.executable, "-m", "hpcbench.train", "--data", str(cluster_data), "--epochs", "1",
         "--model", "mlp", "--progress", "none", "--output-dir", str(workdir / "model")],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    args = [
        "--checkpoint",
        str(workdir / "model"),
        "--input",
        str(cluster_data),
        "--batch-size",
        "8",
    ]
    ref = subprocess.run(
        [sys.executable, "-m", "hpcbench.predict", *args, "--output-dir", str(workdir / "ref"), "-q"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr

    r = submit_predict(workdir, [*args, "--roles", "reader=1,predict=2"])
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = Path(re.search(r"run directory: (.+)", r.stdout).group(1).strip())
    doc = json.loads((run_dir / "predict.json").read_text())
    assert doc["mode"] == "pipeline" and doc["world_size"] == 4
    assert {x["host"] for x in doc["ranks"]} == {"node1", "node2"}
    with open(run_dir / "predictions.csv") as a, open(workdir / "ref" / "predictions.csv") as b:
        got, want = list(csv.DictReader(a)), list(csv.DictReader(b))
    assert [x["item"] for x in got] == [x["item"] for x in want]
    assert all(x["class"] == y["class"] for x, y in zip(got, want, strict=True))
    assert all(abs(float(x["probability"]) - float(y["probability"])) <= 1e-6
               for x, y in zip(got, want, strict=True))  # fmt: skip

    killed = submit_predict(
        workdir,
        [*args, "--roles", "reader=1,preprocess=1,predict=1", "--batch-size", "2"],
        *("--env", "HPCBENCH_FAIL_AT=3:3:kill", "--env", "HPCBENCH_PREDICT_SLOW=0.5"),
    )
    assert killed.returncode != 0
    job = submitted_id(killed.stdout, "slurm")
    logs = hpcbench("logs", job, cwd=workdir)
    assert "rank 3 is killed (SIGKILL) at unit 3" in logs.stdout + killed.stdout
    # rank 3 alone, or with rank 2 where srun reported node2's two tasks on one line (rank 2
    # killed by --kill-on-bad-exit before srun heard of rank 3: then which was first is unknown)
    assert re.search(r"first failing rank (3|\(one of 2-3\)):", logs.stdout), logs.stdout
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    h, m, s = re.search(r"RunTime=(\d+):(\d+):(\d+)", shown).groups()
    # ended by the killed rank (srun's --kill-on-bad-exit, then KillWait), not by its time limit
    assert int(h) * 3600 + int(m) * 60 + int(s) < 150, shown
