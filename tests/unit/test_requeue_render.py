"""The time-limit and preemption section of rendered scripts: each scheduler's way of warning a
job before it ends it, the requeue, the cap, and when the section is left out. The scripts run on
the real clusters in tests/cluster/test_requeue_slurm.py and test_stop_signals.py; PBS and LSF
cannot run here, so their lines are checked as text."""

from __future__ import annotations

import json

import pytest

from hpcbench import api
from hpcbench.jobs.render import RenderError, render_script
from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import load_spec
from tests.conftest import hpcbench


def spec(**fields):
    overrides = {f"requeue.{k}": (f"--{k}", v) for k, v in fields.pop("requeue", {}).items()}
    overrides.update({k: (k, v) for k, v in fields.items()})
    return load_spec(None, overrides)


def test_slurm_asks_for_the_signal_ahead_of_the_limit_and_keeps_the_log_across_requeues():
    text = render_script(spec(**{"resources.time": "01:00:00"}, requeue={"lead": "10:00"}), "slurm")
    assert "#SBATCH --signal=B:USR2@600\n" in text
    assert "#SBATCH --requeue\n#SBATCH --open-mode=append\n" in text
    assert (
        "trap 'on_stop timelimit USR2' USR2" in text
        and "trap 'on_stop preemption TERM' TERM" in text
    )
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert '--dependency="afterany:$SLURM_JOB_ID"' in text  # the fallback without scontrol
    assert 'export HPCBENCH_CONTROL_DIR="$control_dir" HPCBENCH_RESUME=auto' in text
    assert "PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2" in text


@pytest.mark.parametrize(
    ("scheduler", "lines"),
    [
        (
            "slurm",
            ["# SLURM sends the signal to this shell 300 s (requeue.lead) before the time limit "
             "(--signal=B:), and SIGTERM on preemption.\n"],
        ),
        (
            "sge",
            ["#$ -notify\n", "#$ -r y\n", "exit 99\n",
             "# Grid Engine sends SIGUSR2 before SIGKILL (-notify; the queue's notify time).\n"],
        ),
        (
            "pbs",
            ["#PBS -r y\n", 'qsub -W "depend=afterany:$PBS_JOBID"',
             "# PBS sends SIGTERM at the walltime and on qdel, SIGKILL after its kill_delay.\n"],
        ),
        (
            "lsf",
            ["#BSUB -wa USR2\n", "#BSUB -wt 5\n", 'brequeue "$LSB_JOBID"',
             "# LSF sends the signal 300 s (requeue.lead) before the run limit (-wa/-wt).\n"],
        ),
        (
            "local",
            ["the local scheduler does not requeue", "-- --resume $run_dir", "on_stop cancel TERM",
             "# hpcbench cancel sends SIGTERM, SIGKILL a few seconds later.\n"],
        ),
    ],
)  # fmt: skip
def test_each_scheduler_warns_and_requeues_its_own_way(scheduler, lines):
    text = render_script(spec(), scheduler)
    for line in lines:
        assert line in text


def test_the_cap_and_the_method_reach_the_script():
    text = render_script(spec(requeue={"max": 0, "method": "resubmit"}), "slurm")
    assert "requeue_max=0\n" in text
    assert 'scontrol requeue "$SLURM_JOB_ID"' not in text and "sbatch --parsable" in text


def test_another_program_gets_no_signal_unless_asked():
    other = spec(**{"program.command": ["sleep", "60"]})
    assert "--signal=" not in render_script(other, "slurm")
    assert "trap 'on_stop" not in render_script(other, "slurm")
    asked = spec(**{"program.command": ["sleep", "60"]}, requeue={"enabled": True})
    assert "#SBATCH --signal=B:USR2@300" in render_script(asked, "slurm")
    off = spec(requeue={"enabled": False})
    assert "--signal=" not in render_script(off, "slurm")


def test_a_lead_longer_than_the_job_and_usr1_are_refused():
    with pytest.raises(RenderError, match=r"requeue.lead: 3600 s before the time limit"):
        render_script(spec(**{"resources.time": "01:00:00"}, requeue={"lead": "01:00:00"}), "slurm")
    with pytest.raises(SpecError, match=r"requeue.signal.*expected one of USR2, TERM"):
        spec(requeue={"signal": "USR1"})


def test_submit_warns_when_the_lead_is_shorter_than_a_measured_checkpoint(tmp_path):
    run = tmp_path / "runs" / "hpcbench-7"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"checkpoints": {"max_s": 400.0}}))
    warning = api.lead_warning(spec(), cwd=tmp_path)
    assert warning is not None and "a checkpoint took 400 s" in warning and "300 s" in warning
    assert api.lead_warning(spec(requeue={"lead": "10:00"}), cwd=tmp_path) is None
    assert api.lead_warning(spec(), cwd=tmp_path / "elsewhere") is None


@pytest.mark.parametrize(
    ("scheduler", "line"),
    [
        ("slurm", "#SBATCH --dependency=afterok:101:102.x\n"),
        ("pbs", "#PBS -W depend=afterok:101:102.x\n"),
        ("sge", "#$ -hold_jid 101,102.x\n"),
        ("lsf", '#BSUB -w "done(101) && done(102.x)"\n'),
    ],
)
def test_after_renders_each_scheduler_s_dependency(scheduler, line):
    """A job that runs after others (an evaluation after its training job): each scheduler's
    own dependency directive; ids that are not job ids, or local ids on a cluster, are refused."""
    text = render_script(spec(**{"scheduler.after": ["101", "102.x"]}), scheduler)
    assert line in text
    assert text.count("101") == 1  # the directive only
    with pytest.raises(RenderError, match=r"scheduler.after: .*local job id \(local-3\)"):
        render_script(spec(**{"scheduler.after": ["local-3"]}), scheduler)


@pytest.mark.parametrize("bad", ["12; rm -rf ~", "$(id)", "12\n#SBATCH --uid=0", "", "-1", "x12"])
def test_after_takes_job_ids_only(bad):
    with pytest.raises(SpecError, match=r"scheduler.after"):
        spec(**{"scheduler.after": [bad]})


def test_pbs_resources_from_the_command_line_give_torque_s_nodes_ppn(tmp_path):
    """The VUB-style Torque line ``nodes=1:ppn=8`` from a flag, not only a spec file."""
    r = hpcbench(
        "render", "--scheduler", "pbs", "--pbs-resources", "nodes", "--nodes", "1",
        "--tasks-per-node", "8", "--after", "4242.server", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "#PBS -l nodes=1:ppn=8\n" in r.stdout
    assert "#PBS -W depend=afterok:4242.server\n" in r.stdout


@pytest.mark.parametrize("output_dir", ["runs/%J", "runs-%I/x"])
def test_lsf_refuses_an_output_dir_it_would_expand(tmp_path, output_dir):
    """bsub replaces %J and %I in -o/-e and has no escape: the logs would land where hpcbench's
    logs and wait do not look. SLURM's % is doubled instead (sbatch reads %% as %)."""
    result = hpcbench("render", "--scheduler", "lsf", "-o", output_dir, cwd=tmp_path)
    assert result.returncode == 2 and "resources.output_dir" in result.stderr, result.stderr
    assert "%J or %I" in result.stderr and "Traceback" not in result.stderr
    slurm = render_script(spec(**{"resources.output_dir": output_dir}), "slurm")
    assert f"#SBATCH --output={output_dir.replace('%', '%%')}/" in slurm
