"""hpcbench's PBS scheduler against Debian's slurm-wlm-torque wrappers on the test SLURM cluster
(tests/cluster/slurm-up.sh): ``qsub``, ``qstat -f``, ``qdel`` are Perl scripts that speak PBS
over SLURM. What this proves: hpcbench's qsub/qstat/qdel argv, its reading of Torque-format
``qstat -f`` text, and its PBS job script running under ``#PBS`` directives as sbatch reads them.

Where the wrappers fall short of a PBS server (their limits, not hpcbench's; see
docs/schedulers.md):

- ``qstat`` knows neither ``--version`` nor ``-x``: hpcbench asks ``qstat -x -f``, sees the
  option refused and asks ``qstat -f`` from then on, as for Torque.
- ``qstat -f`` prints no ``exit_status`` and ``C`` for every finished job, whether it
  completed, failed or was cancelled: hpcbench reports it COMPLETED with the reason "qstat gives
  no exit status"; the tests check the true outcome through SLURM's own ``squeue``.
- ``qsub`` always hands sbatch ``-o <script name>.o%A -e <script name>.e%A`` in the submission
  directory, which overrides the script's ``#PBS -o``/``-e``: the logs are not in
  ``<output_dir>/<job name>.o<id>``, where ``hpcbench logs`` reads them on a PBS server.
- SLURM sets no ``PBS_JOBID``/``PBS_O_WORKDIR``/``PBS_NODEFILE``: the cluster's TaskProlog
  (slurm-up.sh) exports them, as a PBS server would.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import submitted_id
from tests.conftest import hpcbench

pytestmark = [pytest.mark.slurm]


def submit(
    workdir: Path, env: dict[str, str], program: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    return hpcbench(
        "submit",
        "--scheduler",
        "pbs",
        "--launcher",
        "mpiexec",
        "--program",
        program,
        *flags,
        cwd=workdir,
        env=env,
        timeout=240,
    )


def status(workdir: Path, env: dict[str, str], job: str, scheduler: str) -> str:
    r = hpcbench("status", job, "--scheduler", scheduler, cwd=workdir, env=env)
    # exit 1 exactly when the state is not known (a script can tell "no such job")
    assert r.returncode == (1 if "\tUNKNOWN" in r.stdout else 0), r.stdout + r.stderr
    return r.stdout.strip()


def wrapper_log(workdir: Path, stdout: str, job: str) -> Path:
    """Where the wrapper's qsub sent the job's stdout: <script file name>.o<id> in workdir."""
    script = re.search(r"submitted job \S+ to pbs: (\S+)", stdout)
    assert script, stdout
    return workdir / f"{Path(script.group(1)).name}.o{job}"


def test_a_job_completes_and_hpcbench_reads_it_through_qstat(torque_wrappers, workdir):
    r = submit(workdir, torque_wrappers, "hostname", "--wait", "--timeout", "120")
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "pbs")
    assert job.isdigit()  # the wrapper's qsub prints sbatch's id, without a server name
    assert f"job {job} completed" in r.stdout
    # the script ran under PBS's variables: its run directory is named from PBS_JOBID
    assert (workdir / "runs" / f"hpcbench-{job}").is_dir()
    log = wrapper_log(workdir, r.stdout, job).read_text()
    assert f"hpcbench: job {job} runs hostname" in log and re.search(r"node[12]", log)
    assert status(workdir, torque_wrappers, job, "pbs") == (
        f"{job}\tCOMPLETED\tfinished; qstat gives no exit status"
    )
    # hpcbench logs reads the paths a PBS server would use; the wrapper's qsub wrote elsewhere
    logs = hpcbench("logs", job, cwd=workdir, env=torque_wrappers)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.startswith(f"job {job} (pbs): COMPLETED")
    assert f"run directory: {workdir / 'runs' / f'hpcbench-{job}'}" in logs.stdout
    assert f"logs: {workdir / 'runs' / f'hpcbench.o{job}'}" in r.stdout
    assert not (workdir / "runs" / f"hpcbench.o{job}").exists()


def test_a_failing_job_has_no_exit_code_in_the_wrappers_qstat(torque_wrappers, workdir):
    r = submit(workdir, torque_wrappers, "false", "--wait", "--timeout", "120")
    job = submitted_id(r.stdout, "pbs")
    pbs_view = status(workdir, torque_wrappers, job, "pbs")
    assert pbs_view == f"{job}\tCOMPLETED\tfinished; qstat gives no exit status"
    assert status(workdir, torque_wrappers, job, "slurm").startswith(f"{job}\tFAILED exit=1")


def test_cancel_with_qdel(torque_wrappers, workdir):
    r = submit(workdir, torque_wrappers, "sleep 120")
    assert r.returncode == 0, r.stderr
    job = submitted_id(r.stdout, "pbs")
    state = ""
    for _ in range(100):
        state = status(workdir, torque_wrappers, job, "pbs")
        if "RUNNING" in state:
            break
        time.sleep(0.2)
    assert state == f"{job}\tRUNNING", state
    c = hpcbench("cancel", job, "--scheduler", "pbs", cwd=workdir, env=torque_wrappers)
    assert c.returncode == 0, c.stdout + c.stderr
    for _ in range(100):
        state = status(workdir, torque_wrappers, job, "pbs")
        if "RUNNING" not in state:
            break
        time.sleep(0.2)
    assert state == f"{job}\tCOMPLETED\tfinished; qstat gives no exit status", state
    assert status(workdir, torque_wrappers, job, "slurm").startswith(f"{job}\tCANCELLED")


def test_a_job_qstat_no_longer_lists_is_unknown(torque_wrappers, workdir):
    assert status(workdir, torque_wrappers, "99999", "pbs") == (
        "99999\tUNKNOWN\tno longer known to qstat"
    )


def test_hpcbench_cancel_of_a_requeueable_trainer_job_is_not_resubmitted(
    torque_wrappers, workdir, cluster_data
):
    """qdel's SIGTERM is the stop signal a PBS job's script traps to checkpoint and resubmit
    itself; ``hpcbench cancel`` leaves its mark in the run directory first, so the ranks
    checkpoint and the job ends, with no continuation submitted."""
    from tests.cluster.conftest import TRAIN_ARGS

    r = hpcbench("submit", "--scheduler", "pbs", "--launcher", "mpiexec", "--env",
                 "HPCBENCH_STEP_DELAY=0.3", "--", "--data", str(cluster_data), *TRAIN_ARGS,
                 "--max-steps", "60", "--checkpoint-every", "5", cwd=workdir,
                 env=torque_wrappers, timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "pbs")
    run = Path(re.search(r"run directory: (\S+)", r.stdout).group(1))
    run = run if run.is_absolute() else workdir / run
    for _ in range(600):
        if (run / "control" / "ready").exists():
            break
        time.sleep(0.2)
    assert (run / "control" / "ready").exists(), list(run.rglob("*"))
    c = hpcbench("cancel", job, "--scheduler", "pbs", cwd=workdir, env=torque_wrappers)
    assert c.returncode == 0, c.stdout + c.stderr
    for _ in range(300):
        if not status(workdir, torque_wrappers, job, "slurm").endswith("RUNNING"):
            break
        time.sleep(0.2)
    time.sleep(2)  # a resubmission would be written as the script ends
    assert not (run / "control" / "continued-as").exists(), list((run / "control").iterdir())
    err = "".join(p.read_text() for p in workdir.glob(f"*.e{job}"))
    assert "cancelled: the ranks checkpoint and stop; not requeued" in err, err
    assert "continues as job" not in err, err
