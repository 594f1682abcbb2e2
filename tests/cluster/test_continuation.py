"""A job that stops after a checkpoint and is continued by resubmission (SLURM's ``sbatch
--dependency=afterany``, PBS's ``qsub -W depend=afterany`` through slurm-wlm-torque's wrappers)
keeps its run directory, even one whose name holds a comma (``qsub -v`` splits its list there).

The program stands in for the trainer's side of the protocol: on its first run it leaves the
"stopped" mark in ``$HPCBENCH_CONTROL_DIR``, as ranks that checkpointed on a stop signal do; in the
continuation it writes which job and run directory it ran in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.conftest import submitted_id
from tests.conftest import hpcbench

pytestmark = [pytest.mark.slurm]

STEP = """#!/bin/bash
if [ -e "$HPCBENCH_RUN_DIR/first-run" ]; then
  printf '%s %s\\n' "$HPCBENCH_JOB_ID" "$HPCBENCH_RUN_DIR" >"$HPCBENCH_RUN_DIR/continued"
  exit 0
fi
touch "$HPCBENCH_RUN_DIR/first-run"
echo signal >"$HPCBENCH_CONTROL_DIR/stopped"
"""


def continued(workdir: Path, scheduler: str, launcher: str, env: dict[str, str]) -> None:
    step = workdir / "step.sh"
    step.write_text(STEP)
    step.chmod(0o755)
    spec = workdir / "job.toml"
    spec.write_text(
        f'[resources]\noutput_dir = "runs,a"\ntime = "00:05:00"\n'
        f'[launcher]\nkind = "{launcher}"\n'
        f'[program]\ncommand = ["{step}"]\n'
        '[requeue]\nenabled = true\nmethod = "resubmit"\nlead = "00:30"\n'
    )
    r = hpcbench("submit", str(spec), "--scheduler", scheduler, cwd=workdir, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    first = submitted_id(r.stdout, scheduler)
    run = workdir / "runs,a" / f"hpcbench-{first}"
    marker = run / "continued"
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert time.monotonic() < deadline, sorted(str(p) for p in (workdir / "runs,a").rglob("*"))
        time.sleep(1)
    second = (run / "control" / "continued-as").read_text().strip()
    assert second != first
    job, where = marker.read_text().split()
    assert job == second.split(".")[0] and (workdir / where).resolve() == run.resolve()
    assert not list((workdir / "runs,a").glob(f"hpcbench-{job}")), "a second run directory"


def test_slurm_resubmission_continues_in_the_same_run_directory(slurm_cluster, workdir):
    continued(workdir, "slurm", "srun", {})


def test_pbs_resubmission_keeps_a_run_directory_with_a_comma(torque_wrappers, workdir):
    continued(workdir, "pbs", "mpiexec", torque_wrappers)
