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
        "hpcbench: error: launcher.kind: srun runs only under SLURM, not pbs; use mpiexec or torchrun"
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
