"""Mistyped options: no entry point takes an abbreviation (argparse's default would read
``--node 2`` as ``--nodes 2``), each says which option was probably meant, and the arguments of
hpcbench's own programs are checked with their parsers when the job is rendered, before anything
is queued (a typo used to wait in the queue and fail on the compute node)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcbench.jobs.program_args import check_program_args
from hpcbench.jobs.render import render_script
from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import build_spec
from tests.conftest import hpcbench


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["render", "--node", "2"], "--nodes"),
        (["submit", "--scheduler", "local", "--dry-run", "--gpus-per-nod", "3"], "--gpus-per-node"),
        (["bench", "--repetition", "2"], "--repetitions"),
        (["prep", "synthetic", "out", "--sampels", "3"], "--samples"),
        (["status", "--lats", "2"], "--last"),
        (["predict-scaling", "cal.json", "--rank", "2"], "--ranks"),
    ],
)
def test_no_abbreviation_is_taken_and_the_meant_option_is_named(workdir, args, meant):
    result = hpcbench(*args, cwd=workdir)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "unrecognized arguments" in last and f"did you mean {meant}?" in last, last
    assert not (workdir / "runs").exists() and not (workdir / "out").exists()


@pytest.mark.parametrize(
    ("module", "args", "meant"),
    [
        ("hpcbench.train", ["--epoch", "3"], "--epochs"),
        ("hpcbench.train", ["--epcohs", "3"], "--epochs"),
        ("hpcbench.scaling", ["--ou", "x.json"], "--out"),
    ],
)
def test_the_programs_refuse_abbreviations_and_name_the_meant_option(workdir, module, args, meant):
    result = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=workdir, capture_output=True, text=True
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"did you mean {meant}?" in result.stderr.strip().splitlines()[-1], result.stderr


def trainer_spec(*args: str, module: str = "hpcbench.train"):
    return build_spec({"program": {"module": module, "args": list(args)}})


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--epcohs", "3"],
            "unrecognized arguments: --epcohs 3 (--epcohs: did you mean --epochs?)",
        ),
        (["--epochs", "three"], "argument --epochs: invalid int value: 'three'"),
        (["--strategy", "horovod"], "argument --strategy: invalid choice: 'horovod'"),
        (["--help"], "--help prints the usage and stops the job"),
    ],
)
def test_a_trainer_typo_is_refused_at_render_time(args, says):
    with pytest.raises(SpecError, match="program.args") as err:
        render_script(trainer_spec(*args), "slurm")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_render_and_submit_refuse_a_typo_before_anything_is_queued(workdir):
    for command in (["render"], ["submit", "--scheduler", "local", "--dry-run"],
                    ["submit", "--scheduler", "local"]):  # fmt: skip
        result = hpcbench(*command, "--", "--epcohs", "3", cwd=workdir)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "did you mean --epochs?" in result.stderr and "Traceback" not in result.stderr
    assert not (workdir / "runs").exists()


def test_what_the_programs_take_passes_and_required_options_may_come_later():
    check_program_args(trainer_spec("--epochs", "2", "--strategy", "ddp", "--lr", "0.1"))
    # --checkpoint is required by predict, but a spec may leave it to each submission
    check_program_args(trainer_spec("--input", "data", "--top-k", "5", module="hpcbench.predict"))
    with pytest.raises(SpecError, match="did you mean --checkpoint"):
        check_program_args(trainer_spec("--checkpiont", "x", module="hpcbench.predict"))
    # another program's arguments are its own business
    check_program_args(build_spec({"program": {"command": ["sleep"], "args": ["--epcohs"]}}))


def test_an_unknown_model_is_refused_at_render_time_with_the_one_meant():
    for given, meant in (
        ("resnet19", "resnet18"),
        ("small_cn", "small_cnn"),
        ("vit_b16", "vit_b_16"),
    ):
        with pytest.raises(SpecError, match=f"--model {given}: no such model") as err:
            render_script(trainer_spec("--model", given), "slurm")
        assert f"did you mean {meant}?" in str(err.value) and "\n" not in str(err.value)
    for known in ("resnet18", "small_cnn", "mlp:64", "efficientnet_b0", "pkg.mod:factory"):
        render_script(trainer_spec("--model", known), "slurm")


def test_missing_program_files_fail_at_submission_here_and_warn_for_a_cluster(workdir):
    """A ``--script`` that is not there, or a ``--data`` without a dataset: refused before
    anything is queued where the job runs on this machine (``--dry-run`` too, which also says
    what its preflight did); for a cluster's nodes, which may see other files, a warning."""
    cases = (
        (["--script", "nope.py"], "program.script: nope.py: no such file"),
        (["--", "--data", "missing/set"], "program.args --data: missing/set: no such directory"),
    )
    for flags, says in cases:
        for dry in (["--dry-run"], []):
            r = hpcbench("submit", "--scheduler", "local", *dry, *flags, cwd=workdir)
            assert r.returncode == 2 and says in r.stderr, r.stdout + r.stderr
            assert "Traceback" not in r.stderr
        assert not (workdir / "runs").exists()
        # no preflight: this machine's SLURM controller, up or not, is not what is tested here
        # (tests/cluster/test_slurm.py: a dry run where none answers)
        r = hpcbench(
            "submit", "--scheduler", "slurm", "--dry-run", "--no-preflight", *flags, cwd=workdir
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"warning: {says}, not from here" in r.stderr, r.stderr
        assert "preflight skipped (--no-preflight); nothing was submitted" in r.stderr, r.stderr
    (workdir / "mine.py").write_text("print('hi')\n")
    r = hpcbench("submit", "--scheduler", "local", "--dry-run", "--script", "mine.py", cwd=workdir)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert "hpcbench: preflight passed; nothing was submitted" in r.stderr
    # the default dataset is generated by the trainer where it is missing
    r = hpcbench("submit", "--scheduler", "local", "--dry-run", "--", "--data", "data/shapes",
                 cwd=workdir)  # fmt: skip
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_a_model_name_is_held_to_this_torchvision_only_where_the_job_runs_with_it():
    """A container, a module, another environment or a login node over SSH may have another
    torchvision, with models this one lacks: the name is not refused there."""
    for environment in ({"container": {"image": "/img.sif"}}, {"modules": ["pytorch/2.9"]},
                        {"venv": "/elsewhere/venv"}):  # fmt: skip
        spec = trainer_spec("--model", "resnet19")
        spec = build_spec({"environment": environment, "program": {"args": spec.program.args}})
        render_script(spec, "slurm")
    spec = build_spec({"scheduler": {"host": "login"}, "program": {"args": ["--model", "x19"]}})
    check_program_args(spec)
