"""hpcbench against a real two-node SLURM (tests/cluster/slurm-up.sh): submit, watch, cancel,
read logs, preflight; the trainer across nodes with torchrun and with MPI (srun + PMI-2)."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest

from hpcbench import api
from tests.cluster.conftest import TEST_SAMPLES, TRAIN_ARGS, submitted_id, train_on
from tests.conftest import have_module, hpcbench, require

pytestmark = pytest.mark.slurm


def recorder(workdir: Path, tool: str) -> Path:
    """A wrapper named ``tool`` first on PATH that logs each call, then runs the real one."""
    bindir = workdir / "recorders"
    bindir.mkdir(exist_ok=True)
    real = f"/usr/bin/{tool}"
    log = workdir / f"{tool}.calls"
    (bindir / tool).write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec {real} "$@"\n')
    (bindir / tool).chmod(0o755)
    return bindir


def test_two_nodes_two_gpus_torchrun_trains_and_writes_metrics(
    slurm_cluster, workdir, cluster_data, monkeypatch
):
    """4 ranks over the two nodes, rank 2 slowed by the drill: hpcbench watch follows the job
    while it runs (the run directory on the filesystem both nodes share), asking squeue once per
    refresh, and names rank 2; so do the job's log and its telemetry."""
    require(have_module("torch"), "torch")
    from hpcbench.measure.stragglers import analyse
    from hpcbench.measure.telemetry_files import all_records
    from hpcbench.watch import Watcher, resolve, watch

    r = hpcbench(
        "submit", "--scheduler", "slurm", "--nodes", "2", "--gpus-per-node", "2", "--",
        "--data", str(cluster_data), *TRAIN_ARGS,
        "--epochs", "3", "--max-steps", "12", "--telemetry", "0.2",
        cwd=workdir, env={"HPCBENCH_FAIL_AT": "2:2:slow", "HPCBENCH_STEP_DELAY": "0.1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "slurm")
    monkeypatch.setenv("PATH", f"{recorder(workdir, 'squeue')}{os.pathsep}{os.environ['PATH']}")
    target = resolve(job)
    watcher, out = Watcher(target), io.StringIO()
    assert watch(target, interval=0.5, out=out, watcher=watcher) == 0, out.getvalue()
    seen = out.getvalue()
    refreshes = seen.count(f"job {job}:")
    squeue = (workdir / "squeue.calls").read_text().splitlines()
    # once per refresh at most, and once for the closing line (how the job ended)
    assert 1 <= watcher.queries <= refreshes and len(squeue) <= refreshes + 1, (squeue, seen)
    assert seen.rstrip().endswith(f"job {job} completed"), seen

    handle = api.job(job)
    metrics = handle.result(timeout=120)
    assert metrics["run"]["world_size"] == 4 and metrics["run"]["strategy"] == "ddp"
    assert metrics["provenance"]["launcher"] == "torchrun"
    assert metrics["provenance"]["job_id"] == job
    assert metrics["provenance"]["nodelist"] == "node[1-2]"
    assert metrics["test"]["samples"] == TEST_SAMPLES  # every test sample once over 4 ranks
    found = analyse(all_records(handle.record.run_dir))
    assert found["slowest"]["rank"] == 2 and set(found["named"]) == {2}
    hosts = [found["ranks"][r]["host"] for r in range(4)]  # torchrun's rendezvous places ranks
    assert sorted(hosts) == ["node1", "node1", "node2", "node2"], hosts
    log = handle.stdout()
    assert re.search(rf"straggler: rank 2 on {hosts[2]} is [\d.]+x slower", log), log
    assert not re.search(r"straggler: rank [013] ", log), log
    flagged = [line.strip() for line in seen.splitlines() if "STRAGGLER" in line]
    assert flagged and all(line.startswith(f"rank 2 {hosts[2]}:") for line in flagged), seen


def test_mpi_strategy_over_srun_on_two_nodes(slurm_cluster, workdir, cluster_data):
    require(have_module("mpi4py"), "mpi4py")
    _, metrics = train_on(
        "slurm",
        workdir,
        cluster_data,
        "--nodes",
        "2",
        "--tasks-per-node",
        "2",
        "--launcher",
        "srun",
        trainer=("--strategy", "mpi"),
    )
    assert metrics["run"]["world_size"] == 4 and metrics["run"]["strategy"] == "mpi"
    assert "MPICH" in metrics["provenance"]["mpi"] or "Open MPI" in metrics["provenance"]["mpi"]


def test_a_failing_rank_fails_the_job_and_logs_show_its_traceback(
    slurm_cluster, workdir, cluster_data
):
    r = hpcbench(
        "submit",
        "--scheduler",
        "slurm",
        "--nodes",
        "2",
        "--tasks-per-node",
        "1",
        "--launcher",
        "srun",
        "--env",
        "HPCBENCH_FAIL_AT=1:2",
        "--wait",
        "--timeout",
        "300",
        "--",
        "--data",
        str(cluster_data),
        "--strategy",
        "mpi",
        "--epochs",
        "3",
        cwd=workdir,
        timeout=400,
    )
    assert r.returncode != 0
    assert "failure drill: rank 1 fails at step 2" in r.stderr
    job = submitted_id(r.stdout, "slurm")
    logs = hpcbench("logs", job, cwd=workdir)
    assert logs.returncode == 0, logs.stderr
    assert f"job {job} (slurm): FAILED" in logs.stdout
    assert "first failing rank 1:" in logs.stdout and "RuntimeError: failure drill" in logs.stdout
    with pytest.raises(api.JobFailed, match=r"(?s)first failing rank 1:.*RuntimeError: failure"):
        api.job(job).result(timeout=120)


def test_cancel_a_running_job(slurm_cluster, workdir):
    r = hpcbench(
        *("submit", "--scheduler", "slurm", "--launcher", "direct", "--program", "sleep 120"),
        cwd=workdir,
    )
    assert r.returncode == 0, r.stderr
    job = submitted_id(r.stdout, "slurm")
    for _ in range(100):
        if "RUNNING" in hpcbench("status", job, "--scheduler", "slurm", cwd=workdir).stdout:
            break
        time.sleep(0.2)
    assert hpcbench("cancel", job, "--scheduler", "slurm", cwd=workdir).returncode == 0
    for _ in range(100):
        state = hpcbench("status", job, "--scheduler", "slurm", cwd=workdir).stdout
        if "CANCELLED" in state:
            break
        time.sleep(0.2)
    assert state.startswith(f"{job}\tCANCELLED"), state
    # a job SLURM never had is not "cancelled": one line naming it, exit 1
    none = hpcbench("cancel", "99999", "--scheduler", "slurm", cwd=workdir)
    assert none.returncode == 1 and "cancelled" not in none.stdout, none.stdout + none.stderr
    (line,) = none.stderr.strip().splitlines()
    assert "slurm has no job 99999 (" in line and "nothing cancelled" in line, line


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--nodes", "3"], "--nodes 3: partition debug allows at most 2 (TotalNodes=2)"),
        (
            ["--gpus-per-node", "3"],
            "--gpus-per-node 3: the nodes of partition debug have at most 2 GPU(s)",
        ),
        (["--time", "2-00:00:00"], "partition debug allows at most 1-00:00:00 (MaxTime)"),
        (
            ["--tasks-per-node", "2", "--cpus-per-task", "2"],
            "= 4 CPUs per node: partition debug's nodes have",
        ),
        (["--partition", "gpu"], "partition 'gpu' does not exist (partitions: debug)"),
    ],
)
def test_preflight_refuses_what_the_partition_cannot_run_before_sbatch(
    slurm_cluster, workdir, flags, message
):
    bindir = recorder(workdir, "sbatch")
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = hpcbench(
        "submit", "--scheduler", "slurm", *flags, "--program", "true", cwd=workdir, env=env
    )
    assert r.returncode == 1
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 2  # scheduler line + error
    assert not (workdir / "sbatch.calls").exists()


def dead_controller_conf(path: Path) -> None:
    """The test cluster's slurm.conf with a controller port nothing listens on, and SLURM's
    default MessageTimeout (10 s; the test cluster's 60 s would make every client retry the
    dead port for a minute)."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text()
    conf = re.sub(r"(?m)^(SlurmctldPort|MessageTimeout)=.*$", "", conf)
    path.write_text(conf + "\nSlurmctldPort=6899\nMessageTimeout=10\n")


def test_slurm_installed_without_a_controller_answering_says_how_to_run_here(
    slurm_cluster, workdir
):
    """SLURM's commands present (sbatch found, so SLURM is chosen) but its controller not
    answering, as on a workstation with the client packages: the real scontrol against a
    slurm.conf whose controller port nothing listens on."""
    dead_controller_conf(workdir / "dead.conf")
    bindir = recorder(workdir, "sbatch")
    env = {
        "SLURM_CONF": str(workdir / "dead.conf"),
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
    }
    r = hpcbench("submit", "--program", "true", cwd=workdir, env=env)
    assert r.returncode == 1
    error = r.stderr.strip().splitlines()[-1]
    assert "no controller answers" in error and "--scheduler local" in error, r.stderr
    assert not (workdir / "sbatch.calls").exists() and not (workdir / "runs").exists()
    # a dry run shows the script and says why its preflight was skipped: a controller down
    # says nothing of the request
    dry = hpcbench("submit", "--dry-run", "--program", "true", cwd=workdir, env=env)
    assert dry.returncode == 0 and dry.stdout.startswith("#!/bin/bash\n#SBATCH"), dry.stderr
    last = dry.stderr.strip().splitlines()[-1]
    assert last.startswith("hpcbench: preflight skipped (") and "no controller answers" in last
    assert last.endswith("; nothing was submitted") and not (workdir / "runs").exists()
    # a typo in the trainer's options is said first, before the controller is asked anything
    typo = hpcbench("submit", "--", "--epcohs", "1", cwd=workdir, env=env)
    assert typo.returncode == 2 and "did you mean --epochs?" in typo.stderr, typo.stderr
    assert "controller" not in typo.stderr


def test_a_request_sbatch_rejects_shows_sbatchs_message(slurm_cluster, workdir):
    r = hpcbench(
        "submit",
        "--scheduler",
        "slurm",
        "--constraint",
        "nosuchfeature",
        "--program",
        "true",
        cwd=workdir,
    )
    assert r.returncode == 1
    assert "sbatch" in r.stderr and "Invalid feature specification" in r.stderr


def test_status_of_twenty_jobs_is_one_squeue_call(slurm_cluster, workdir):
    ids = []
    for _ in range(20):
        r = hpcbench(
            *("submit", "--scheduler", "slurm", "--launcher", "srun", "--program", "sleep 30"),
            *("--no-preflight",),
            cwd=workdir,
        )  # srun: sleep imports no torch, and torchrun's agent would
        assert r.returncode == 0, r.stderr
        ids.append(submitted_id(r.stdout, "slurm"))
    bindir = recorder(workdir, "squeue")
    recorder(workdir, "sacct")
    recorder(workdir, "scontrol")
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = hpcbench("status", *ids, "--scheduler", "slurm", cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip().splitlines()) == 20
    assert {line.split("\t")[1] for line in r.stdout.splitlines()} <= {"PENDING", "RUNNING"}
    assert len((workdir / "squeue.calls").read_text().splitlines()) == 1
    assert not (workdir / "sacct.calls").exists() and not (workdir / "scontrol.calls").exists()
    hpcbench("cancel", *ids, "--scheduler", "slurm", cwd=workdir)


def test_a_job_squeue_has_forgotten_falls_back_to_sacct_once(slurm_cluster, workdir):
    """99999 was never submitted: squeue refuses it; one sacct call follows, which does not
    know it either (the test cluster keeps accounting); the job is UNKNOWN, saying why."""
    bindir = recorder(workdir, "squeue")
    recorder(workdir, "sacct")
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = hpcbench("status", "99999", "--scheduler", "slurm", cwd=workdir, env=env)
    assert r.returncode == 1, r.stderr  # its state is not known: a script can tell
    assert r.stdout.startswith("99999\tUNKNOWN\tno longer in squeue, and sacct does not know it")
    assert len((workdir / "squeue.calls").read_text().splitlines()) == 1
    assert len((workdir / "sacct.calls").read_text().splitlines()) == 1


def test_bench_stops_when_no_slurm_controller_answers_and_keeps_its_runs_to_do(
    slurm_cluster, workdir
):
    """``hpcbench bench`` where SLURM's commands are installed but no controller answers: after
    one bounded retry the whole matrix stops with the hint submit gives (--scheduler local),
    instead of retrying every run for ever; no run is marked failed, so the same command
    continues the matrix once the controller is back."""
    dead_controller_conf(workdir / "dead.conf")
    r = hpcbench(
        "bench", "--configs", "single,ddp:2", "--repetitions", "2", "--results", "res",
        "--", "--epochs", "1",
        cwd=workdir, env={"SLURM_CONF": str(workdir / "dead.conf")}, timeout=240,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    error = r.stderr.strip().splitlines()[-1]
    assert "no controller answers" in error and "--scheduler local" in error, r.stderr
    assert "the same command continues it once a controller answers" in error
    assert r.stdout.count("again in") == 1, r.stdout  # one retry, not one a run
    runs = json.loads((workdir / "res" / "runs.json").read_text())["runs"]
    assert {x["status"] for x in runs} == {"pending"}, runs


def test_every_step_task_gets_the_test_clusters_mpi_module_and_scratch(slurm_cluster, workdir):
    """The test cluster's TaskProlog: each srun task has MPICH's OFI network module chosen (the
    cure for garbled PMI-1 start-ups, docs/troubleshooting.md) and a per-job TMPDIR."""
    r = hpcbench(
        *("submit", "--scheduler", "slurm", "--nodes", "2", "--tasks-per-node", "1"),
        *("--launcher", "srun", "--program", "printenv MPIR_CVAR_CH4_NETMOD TMPDIR"),
        *("--wait", "--timeout", "120"),
        cwd=workdir,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "slurm")
    out = (workdir / "runs" / f"hpcbench-{job}.out").read_text()
    assert out.count("ofi\n") == 2, out
    assert out.count(f"/tmp/{job}\n") == 2, out


def test_submit_wait_says_why_a_job_is_pending_and_when_it_starts(slurm_cluster, workdir):
    """A job held behind another: ``submit --wait`` says it is pending and SLURM's reason
    (Dependency), then that it is running, each once, before its log and its end."""
    first = hpcbench("submit", "--scheduler", "slurm", "--launcher", "direct", "--program",
                     "sleep 4", cwd=workdir)  # fmt: skip
    assert first.returncode == 0, first.stderr
    after = submitted_id(first.stdout, "slurm")
    r = hpcbench("submit", "--scheduler", "slurm", "--launcher", "direct", "--program",
                 "sh -c 'sleep 3; echo second'", "--after", after, "--wait", cwd=workdir,
                 timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted_id(r.stdout, "slurm")
    said = [line for line in r.stderr.splitlines() if line.startswith(f"hpcbench: job {job} ")]
    assert said[0] == f"hpcbench: job {job} is pending (Dependency)", r.stderr
    assert f"hpcbench: job {job} is running" in said, said
    assert len(said) == len(set(said)), said  # each change once, not each poll
    assert "second" in r.stdout and f"job {job} completed" in r.stdout


def test_the_status_list_and_status_id_agree_on_a_finished_array(slurm_cluster, workdir):
    """The list of jobs submitted from here says of an array what ``status ARRAY`` says: its
    state from its tasks' (not the array id's own answer, which squeue and sacct give as one
    task's, or not at all)."""
    from hpcbench.jobs.spec import Array
    from hpcbench.jobs.spec_load import build_spec
    from hpcbench.jobs.submission import submit

    spec = build_spec({"program": {"command": ["true"]}, "launcher": {"kind": "direct"}})
    (workdir / "tasks").mkdir()
    for k in (1, 2):  # each task's run directory, by name (a sweep writes these)
        (workdir / "tasks" / f"{k}.run").write_text(f"task-{k}\n")
    spec.array = Array(2, str(workdir / "tasks"), str(workdir / "runs"))
    job = submit(spec, "slurm", cwd=workdir)
    assert job.wait(timeout=120).state == "COMPLETED"
    alone = hpcbench("status", job.job_id, cwd=workdir).stdout.splitlines()
    (line,) = [x for x in alone if x.startswith(f"{job.job_id}\t")]
    assert line == f"{job.job_id}\tCOMPLETED exit=0\t2 tasks completed", alone
    listed = hpcbench("status", cwd=workdir).stdout.splitlines()
    assert line in listed, listed
