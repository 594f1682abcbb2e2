"""The command line: help everywhere, --version, and the submit side never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcbench import __version__
from tests.conftest import hpcbench


@pytest.mark.parametrize("command", [[], ["render"], ["submit"], ["status"], ["cancel"]])
def test_help_on_every_command(workdir, command):
    result = hpcbench(*command, "--help", cwd=workdir)
    assert result.returncode == 0 and result.stdout.startswith("usage: hpcbench")


def test_version(workdir):
    assert hpcbench("--version", cwd=workdir).stdout.strip() == f"hpcbench {__version__}"


def test_render_and_submit_do_not_import_torch(workdir):
    code = (
        "import sys\n"
        "from hpcbench.cli import main\n"
        "main(['render', '--nodes', '2', '--gpus-per-node', '2', '--scheduler', 'slurm'])\n"
        "main(['submit', '--scheduler', 'local', '--dry-run'])\n"
        "heavy = [m for m in ('torch', 'numpy', 'mpi4py', 'h5py', 'submitit') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("#!/bin/bash") == 2


def test_render_prints_the_scheduler_choice_and_program_args(workdir):
    result = hpcbench(
        "render", "--scheduler", "pbs", "--launcher", "mpiexec", "--", "--epochs", "3", cwd=workdir
    )
    assert result.returncode == 0
    assert "hpcbench: scheduler pbs (chosen with --scheduler)" in result.stderr
    assert "python -m hpcbench.train --epochs 3" in result.stdout
    refused = hpcbench("render", "--scheduler", "pbs", "--launcher", "srun", cwd=workdir)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "hpcbench: error: launcher.kind: srun runs only under SLURM, not pbs; use direct or mpiexec or torchrun"
    )


def test_spec_file_from_jobs_directory_renders():
    from tests.conftest import REPO

    # from the repository, as the specs' comments say: their relative paths are read from there
    for spec in sorted((REPO / "jobs").glob("*.toml")):
        result = hpcbench("render", str(spec), "--scheduler", "slurm", cwd=REPO)
        assert result.returncode == 0, f"{spec}: {result.stderr}"


def test_unbalanced_program_quote_is_a_one_line_error(workdir):
    result = hpcbench("render", "--program", "python 'a.py", "--scheduler", "local", cwd=workdir)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "hpcbench: error: --program: No closing quotation"
    )


def test_help_texts_say_what_they_mean(workdir):
    """compare's help says "95 %" (a description is not %-formatted: "%%" showed as such);
    predict's help shows a default only where an option has one."""
    compare = hpcbench("compare", "--help", cwd=workdir)
    assert "95 % intervals" in " ".join(compare.stdout.split()) and "%%" not in compare.stdout
    predict = subprocess.run([sys.executable, "-m", "hpcbench.predict", "--help"],
                             capture_output=True, text=True, cwd=workdir)  # fmt: skip
    assert predict.returncode == 0 and "(default: None)" not in predict.stdout, predict.stdout
    assert "(default: " in predict.stdout  # the options that have one still say it


@pytest.mark.parametrize("program", ["train", "predict"])
def test_the_trainer_and_predict_as_commands_point_at_their_module(workdir, program):
    r = hpcbench(program, "--epochs", "1", cwd=workdir)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert f"run it as python -m hpcbench.{program} ARGS" in line, line
    assert f"hpcbench submit --module hpcbench.{program}" in line


def test_predict_quiet_prints_only_the_summary():
    from pathlib import Path

    from hpcbench.predict.outputs import summary

    document = {
        "measured": {"items": 10, "seconds": 1.0, "items_per_s": 10.0},
        "mode": "pipeline", "world_size": 4,
        "plan": {"predicted_items_per_s": 12.0, "roles": {"readers": 1}, "bottleneck": "predict"},
        "stages": [{"stage": "predict", "ranks": 1, "items_per_s": 10.0, "busy_pct": 90,
                    "wait_input_pct": 5, "wait_credit_pct": 5, "peak_rss_mb": 100}],
    }  # fmt: skip
    paths = (Path("p.csv"), Path("p.json"))
    assert "stage" in summary(document, paths) and "predicted" in summary(document, paths)
    quiet = summary(document, paths, quiet=True)
    assert quiet.startswith("classified 10 image(s)") and "stage" not in quiet
    assert "predicted" not in quiet


def test_status_escapes_what_the_scheduler_says(capsys):
    """A reason (or state) from the scheduler holds text another user chose, a job name among
    it: printed escaped, it cannot clear the screen or fake a line of its own."""
    from hpcbench.cli.jobs import _print_status
    from hpcbench.jobs.schedulers.base import JobStatus

    _print_status("12", JobStatus("PENDING", None, "Dependency\x1b[2J\n13\tCOMPLETED"))
    out = capsys.readouterr().out
    assert out == "12\tPENDING\tDependency\\x1b[2J\\n13\\tCOMPLETED\n", out
