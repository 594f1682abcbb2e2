"""Rendered scripts: every template x launcher x node count passes bash -n and shellcheck,
directives say what the spec asks, scheduler variables stay unexpanded, templates are overridable."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hpcbench.jobs.launchers import launcher_classes
from hpcbench.jobs.render import RenderError, directive, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec_load import build_spec
from tests.conftest import require

SCHEDULERS = list(SCHEDULER_CLASSES)  # every scheduler the registry finds, a new one included
LAUNCHERS = list(launcher_classes())  # every launcher the registry finds, a new one included


def runs_under(launcher: str, scheduler: str) -> bool:
    """Whether the launcher's ranks start under the scheduler, as the launcher says of itself:
    anywhere, under its one batch system, or as its stand-in's under the scheduler that plays
    every system (srun: SLURM's, and mpiexec's under the local scheduler)."""
    cls = launcher_classes()[launcher]
    if not cls.only_under or cls.only_under == scheduler:
        return True
    return bool(cls.stand_in) and SCHEDULER_CLASSES[scheduler].plays_every_system


def spec_for(launcher: str, nodes: int, **extra):
    resources = {
        "nodes": nodes,
        "gpus_per_node": 2,
        "cpus_per_task": 4,
        "memory": "32G",
        "time": "02:00:00",
        **extra.pop("resources", {}),
    }
    sched = {"sge_pe": "mpi"} if nodes > 1 else {}
    return build_spec(
        {
            "resources": resources,
            "environment": {
                "modules": ["CUDA/12.1"],
                "venv": "/opt/venvs/torch",
                "variables": {"NCCL_DEBUG": "INFO"},
                "setup": ["ulimit -n 4096"],
                **extra.pop("environment", {}),
            },
            "launcher": {"kind": launcher},
            "program": {"args": ["--epochs", "2"]},
            "scheduler": sched,
            **extra,
        }
    )


def matrix():
    for scheduler in SCHEDULERS:
        for launcher in LAUNCHERS:
            for nodes in (1, 2):
                if not runs_under(launcher, scheduler):
                    continue  # refused: see test_srun_needs_slurm
                if launcher_classes()[launcher].one_process and nodes > 1:
                    continue  # refused: see test_direct_starts_the_program_itself_once
                yield scheduler, launcher, nodes


@pytest.mark.parametrize("scheduler, launcher, nodes", list(matrix()))
def test_every_script_passes_bash_n_and_shellcheck(tmp_path, scheduler, launcher, nodes):
    for with_container in (False, True):
        extra = {"environment": {"container": {"image": "/img/torch.sif", "binds": ["/scratch"]}}}
        one = (
            {"resources": {"tasks_per_node": 1}} if launcher_classes()[launcher].one_process else {}
        )
        spec = spec_for(launcher, nodes, **one, **(extra if with_container else {}))
        script = tmp_path / f"job-{with_container}.sh"
        script.write_text(render_script(spec, scheduler))
        lint_script(script)


def lint_script(script: Path) -> None:
    """bash -n and shellcheck at style level pass on ``script``."""
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    require(shutil.which("shellcheck") is not None, "shellcheck (Debian package)")
    # No exclusions: every warning shellcheck could raise on these scripts is fixed at the source.
    lint = subprocess.run(
        ["shellcheck", "--shell=bash", "--severity=style", str(script)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + script.read_text()


def test_direct_starts_the_program_itself_once():
    """One process, no launcher in front: the batch shell runs the program (for a requeueable
    job, execs it, so the shell's signals reach it); a job of more processes is one line."""
    spec = spec_for("direct", 1, resources={"tasks_per_node": 1})
    for scheduler in SCHEDULERS:
        text = render_script(spec, scheduler)
        assert "torch.distributed.run" not in text and "mpiexec -n" not in text
        assert "srun --ntasks" not in text
        launch = text.split("# --- launch ---", 1)[1]
        assert "python -m hpcbench.train --epochs 2" in launch, (scheduler, launch)
    for nodes, tasks in ((2, 1), (1, 2)):
        spec = spec_for("direct", nodes, resources={"tasks_per_node": tasks})
        with pytest.raises(RenderError) as err:
            render_script(spec, "slurm")
        assert str(err.value) == (
            f"launcher.kind: direct starts one process, and this job has {nodes * tasks} "
            f"({nodes} node(s) x {tasks} task(s)); use torchrun, mpiexec or srun"
        )
    spec = spec_for("direct", 1, resources={"tasks_per_node": 1})
    spec.launcher.args = ["--max-restarts", "2"]  # would be read as the program's name
    with pytest.raises(RenderError) as err:
        render_script(spec, "slurm")
    assert str(err.value) == (
        "launcher.args: direct starts the program with no launcher to hand them to; "
        "remove them, or use torchrun, mpiexec or srun"
    )


def test_slurm_torchrun_two_nodes_asks_one_agent_per_node():
    text = render_script(spec_for("torchrun", 2), "slurm")
    assert "#SBATCH --nodes=2\n" in text
    assert "#SBATCH --ntasks-per-node=1\n" in text  # one torchrun agent per node ...
    assert "#SBATCH --cpus-per-task=8\n" in text  # ... holding the CPUs of its 2 ranks x 4
    assert "#SBATCH --gres=gpu:2\n" in text and "#SBATCH --mem=32G\n" in text
    assert "#SBATCH --time=02:00:00\n" in text
    assert "#SBATCH --output=runs/hpcbench-%j.out\n#SBATCH --error=runs/hpcbench-%j.err\n" in text
    assert "head_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | awk 'NR == 1')" in text
    assert "--nproc-per-node=2" in text and "--nnodes=2" in text
    assert '--rdzv-endpoint="$head_node:$rdzv_port"' in text and "--rdzv-backend=c10d" in text
    assert "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1" in text
    assert "export OMP_NUM_THREADS=4" in text
    assert 'export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-8}"' in text


def test_slurm_srun_and_mpiexec_start_one_task_per_rank():
    for launcher in ("srun", "mpiexec"):
        text = render_script(spec_for(launcher, 2), "slurm")
        assert "#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=4\n" in text
        assert "rdzv" not in text and "head_node" not in text
    assert "srun --ntasks=4 --ntasks-per-node=2 --kill-on-bad-exit=1 --label" in render_script(
        spec_for("srun", 2), "slurm"
    )
    assert 'mpiexec -n 4 "${mpi_opts[@]}"' in render_script(spec_for("mpiexec", 2), "slurm")


def test_scheduler_variables_are_never_expanded_at_render_time():
    for scheduler in SCHEDULERS:
        text = render_script(spec_for("torchrun", 2), scheduler)
        for var in ("$job_id", "$run_dir", "$head_node", "$rdzv_port"):
            assert var in text
    assert '"${SLURM_JOB_ID:?submit this script with sbatch}"' in render_script(
        spec_for("srun", 1), "slurm"
    )
    assert 'cd "$PBS_O_WORKDIR"' in render_script(spec_for("mpiexec", 1), "pbs")


def test_pbs_select_and_torque_styles():
    text = render_script(spec_for("mpiexec", 2), "pbs")
    assert "#PBS -l select=2:ncpus=8:mpiprocs=2:ngpus=2:mem=32gb\n" in text
    assert "#PBS -l walltime=02:00:00\n" in text and "#PBS -o runs/\n" in text
    torque = render_script(spec_for("mpiexec", 2, scheduler={"pbs_resources": "nodes"}), "pbs")
    assert "#PBS -l nodes=2:ppn=8:gpus=2\n#PBS -l mem=32gb\n" in torque


def test_sge_parallel_environment():
    assert "#$ -pe smp 8\n" in render_script(spec_for("mpiexec", 1), "sge")
    assert "#$ -pe mpi 16\n" in render_script(spec_for("mpiexec", 2), "sge")
    with pytest.raises(RenderError, match="scheduler.sge_pe"):
        render_script(spec_for("mpiexec", 2, scheduler={}), "sge")


def test_srun_needs_slurm():
    for scheduler in ("pbs", "sge", "lsf"):
        with pytest.raises(RenderError, match="launcher.kind: srun runs only under SLURM"):
            render_script(spec_for("srun", 1), scheduler)


def test_the_local_scheduler_starts_srun_ranks_with_mpiexec_and_caps_its_ranks():
    """The local scheduler plays every batch system: srun's ranks start as mpiexec's (its
    stand-in) on this machine, where no more than 1,024 ranks are started; a cluster has no
    such cap."""
    text = render_script(spec_for("srun", 1), "local")
    launch = " ".join(text.split("exec mpiexec", 1)[1].split("\n", 2)[:2]).replace("\\", " ")
    assert launch.split()[:7] == [
        "-n", "2", '"${mpi_opts[@]}"',
        '${rank_start[@]+"${rank_start[@]}"}', "python", "-m", "hpcbench.train",
    ]  # fmt: skip
    assert "\nsrun " not in text and "exec srun" not in text
    many = spec_for("mpiexec", 2, resources={"tasks_per_node": 513, "gpus_per_node": 0})
    with pytest.raises(RenderError, match=r"^resources.nodes: the local scheduler starts every "
                       r"rank on this machine; 1026 ranks is more than 1024$"):  # fmt: skip
        render_script(many, "local")
    assert "1026" in render_script(many, "slurm")


def test_fields_a_scheduler_lacks_are_refused_not_dropped():
    spec = spec_for("mpiexec", 1, resources={"qos": "high"})
    assert "#SBATCH --qos=high" in render_script(spec, "slurm")
    for scheduler in ("pbs", "sge", "lsf"):
        with pytest.raises(RenderError, match=f"resources.qos: not supported by the {scheduler}"):
            render_script(spec, scheduler)


def test_header_says_what_runs_and_how_it_was_made():
    from hpcbench import __version__

    text = render_script(spec_for("torchrun", 2), "slurm")
    assert "# python -m hpcbench.train --epochs 2 as 4 rank(s) (2 nodes x 2 ranks" in text
    assert f"# Generated by hpcbench {__version__} from (no spec file" in text


def test_directive_filter_quotes_like_sbatch_reads_and_refuses_newlines():
    assert directive("gpu", "slurm") == "gpu"
    assert directive('a b "c"', "slurm") == '"a b \\"c\\""'
    assert directive("x\\y z", "slurm") == '"x\\\\y z"'
    for scheduler in ("pbs", "sge"):  # their qsub reads no escapes inside quotes
        assert directive("a b c", scheduler) == '"a b c"'
        for value in ('a b "c"', "x\\y z"):
            with pytest.raises(RenderError, match=f"{scheduler} directive value cannot hold"):
                directive(value, scheduler)
    with pytest.raises(RenderError, match="newline"):
        directive("a\n#SBATCH --x", "slurm")


def test_user_template_overrides_one_block_by_inheritance(tmp_path, monkeypatch):
    (tmp_path / "slurm.sbatch.j2").write_text(
        '{% extends "hpcbench/slurm.sbatch.j2" %}\n'
        "{% block environment %}{{ super() }}export SITE_TUNING=1\n{% endblock %}\n"
    )
    spec = spec_for("srun", 1)
    text = render_script(spec, "slurm", [tmp_path])
    assert "export SITE_TUNING=1\n" in text and "#SBATCH --nodes=1" in text
    assert "module load CUDA/12.1" in text  # super() kept the built-in block
    monkeypatch.setenv("HPCBENCH_TEMPLATE_DIR", str(tmp_path))
    assert "export SITE_TUNING=1\n" in render_script(spec, "slurm")


def test_missing_template_variable_is_an_error_not_an_empty_string(tmp_path):
    (tmp_path / "local.sh.j2").write_text(
        '{% extends "hpcbench/local.sh.j2" %}\n'
        "{% block setup %}echo {{ no_such_thing }}{% endblock %}\n"
    )
    with pytest.raises(RenderError, match="no_such_thing"):
        render_script(spec_for("torchrun", 1), "local", [tmp_path])
    with pytest.raises(RenderError, match="does not exist"):
        render_script(spec_for("torchrun", 1), "local", [tmp_path / "missing"])


def test_pbs_and_sge_get_a_name_their_qsub_accepts():
    spec = spec_for("mpiexec", 1, resources={"job_name": '9 lives "x"'})
    assert "#PBS -N j9_lives_x\n" in render_script(spec, "pbs")
    assert "#$ -N 9_lives_x\n" in render_script(spec, "sge")
    assert '#SBATCH --job-name="9 lives \\"x\\""\n' in render_script(spec, "slurm")


def test_slurm_says_why_cpus_per_task_is_the_nodes_ranks_times_theirs():
    """torchrun is one SLURM task a node running every rank of it: -c 8 for 4 ranks a node
    becomes --cpus-per-task=32, and the script says why instead of leaving it to be guessed."""
    text = render_script(spec_for("torchrun", 2, resources={"gpus_per_node": 4, "cpus_per_task": 8}),
                         "slurm")  # fmt: skip
    assert "#SBATCH --cpus-per-task=32\n" in text
    assert "holds 4 ranks x 8 CPUs (cpus_per_task is per rank)" in text
    mpi = render_script(spec_for("mpiexec", 2, resources={"gpus_per_node": 4, "cpus_per_task": 8}),
                        "slurm")  # fmt: skip
    assert "#SBATCH --cpus-per-task=8\n" in mpi and "cpus_per_task is per rank" not in mpi
