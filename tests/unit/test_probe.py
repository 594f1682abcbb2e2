"""The probe: each rank's record, and rank 0's check of the world (only this job's records)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_probe(run_dir, **env):
    full = {**os.environ, "HPCBENCH_RUN_DIR": str(run_dir), **env}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID"):
        full.pop(name, None)
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "hpcbench.probe", "--timeout", "2"],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_stale_records_of_an_earlier_job_with_the_same_id_are_ignored(tmp_path):
    (tmp_path / "probe").mkdir()
    stale = {"rank": 3, "world_size": 4, "job_id": "7-old", "hostname": "x", "node_rank": 0}
    (tmp_path / "probe" / "rank-3.json").write_text(json.dumps(stale))
    result = run_probe(tmp_path, HPCBENCH_JOB_ID="7")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "probe.json").read_text())
    assert summary["problems"] == [] and [r["rank"] for r in summary["ranks"]] == [0]


def test_missing_ranks_fail_the_check(tmp_path):
    # A torchrun-style environment claiming 2 ranks where only rank 0 ever reports.
    result = run_probe(tmp_path, HPCBENCH_JOB_ID="8", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
    assert result.returncode == 1
    assert "expected ranks 0..1, got [0]" in result.stderr
