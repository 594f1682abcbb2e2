"""Rendered scripts on the largest allocation: each one (slurm, pbs, sge, lsf, local) runs under
stub commands that print 100,000 host names and a huge ``scontrol show job``, and reaches its
launch line. Under ``set -euo pipefail`` a pipeline whose reader stops early (``head -n 1``) kills
its writer with SIGPIPE once the output passes one pipe buffer, and the job dies before it
launches: no script may hold such a pipeline. The schedulers' commands are stubs here because a
10,000-node allocation cannot be had; the real clusters run the same scripts in tests/cluster/.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpcbench.jobs.launchers import launcher_classes
from hpcbench.jobs.render import render_script
from hpcbench.jobs.schedulers.slurm.cluster import check_slurm
from hpcbench.jobs.spec_load import build_spec

NODES = 10_000  # the largest allocation a user asks for (Frontier-class machines)
HOSTS = 100_000  # what the stubs print: far more than one pipe buffer

STUBS = {
    # scontrol: host names one per line, a job record per array task, a partition of NODES nodes
    "scontrol": f"""
case "$1 $2" in
  "show hostnames") seq -f 'node%06g' 1 {HOSTS} ;;
  "show job") echo "JobId=$4 JobState=RUNNING Restarts=${{STUB_RESTARTS:-0}} NodeList=node[000001-{HOSTS}]"
              for i in $(seq 1 {HOSTS}); do  # then the other tasks of its array, say
                echo "JobId=$i ArrayJobId=$4 JobState=RUNNING Restarts=7 NodeList=node[000001-{HOSTS}]"
              done ;;
  "show partition") echo "PartitionName=big Default=YES State=UP TotalNodes={NODES} MaxNodes=UNLIMITED MaxTime=UNLIMITED Nodes=node[000001-{NODES}]" ;;
  "show node") seq -f 'NodeName=node%06g CPUTot=64 RealMemory=512000 Gres=gpu:4 State=IDLE' 1 {NODES} ;;
  requeue*) echo "requeued $2" >>"$STUB_LOG" ;;
  *) exit 2 ;;
esac
""",
    # every launcher: note the launch and leave the "stopped" mark, so that the script goes on
    # through its stop-and-requeue section (which reads the scheduler's job record)
    **{
        name: f"""
case "$*" in --version) echo "HYDRA build details: MPICH"; exit 0 ;; esac
echo "launched by {name}" >>"$STUB_LOG"
if [ -n "${{HPCBENCH_CONTROL_DIR:-}}" ]; then echo timelimit >"$HPCBENCH_CONTROL_DIR/stopped"; fi
"""
        for name in ("srun", "mpiexec", "python", "torchrun", "blaunch")
    },
    **{name: 'echo "$0 $*" >>"$STUB_LOG"; echo 4243' for name in ("sbatch", "qsub", "brequeue")},
}


def make_stubs(bindir: Path) -> None:
    bindir.mkdir()
    for name, body in STUBS.items():
        (bindir / name).write_text("#!/bin/bash\n" + body)
        (bindir / name).chmod(0o755)


def host_file(path: Path, line: str) -> Path:
    path.write_text("".join(line.format(i) + "\n" for i in range(1, HOSTS + 1)))
    return path


def scheduler_environment(scheduler: str, tmp_path: Path) -> dict[str, str]:
    if scheduler == "slurm":
        return {
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": f"node[000001-{HOSTS}]",
            "SLURM_RESTART_COUNT": "0",
        }
    if scheduler == "pbs":
        nodefile = host_file(tmp_path / "nodefile", "node{:06d}")
        return {"PBS_JOBID": "4242.server", "PBS_O_WORKDIR": str(tmp_path),
                "PBS_NODEFILE": str(nodefile)}  # fmt: skip
    if scheduler == "sge":
        pe = host_file(tmp_path / "pe_hostfile", "node{0:06d} 8 all.q@node{0:06d} UNDEFINED")
        return {"JOB_ID": "4242", "PE_HOSTFILE": str(pe)}
    if scheduler == "lsf":
        hosts = host_file(tmp_path / "djob_hostfile", "node{:06d}")
        return {"LSB_JOBID": "4242", "LSB_DJOB_HOSTFILE": str(hosts)}
    return {"HPCBENCH_JOB_ID": "local-7"}


CASES = [
    (scheduler, launcher)
    for scheduler in ("slurm", "pbs", "sge", "lsf", "local")
    for launcher, cls in launcher_classes().items()  # every launcher that starts ranks
    if not cls.one_process and cls.only_under in ("", scheduler)
]


@pytest.mark.parametrize(("scheduler", "launcher"), CASES)
def test_the_script_reaches_its_launch_line_on_the_largest_allocation(
    tmp_path, scheduler, launcher
):
    nodes = 2 if scheduler == "local" else NODES  # local: every rank on this machine
    spec = build_spec(
        {
            "resources": {"nodes": nodes, "gpus_per_node": 4, "cpus_per_task": 8},
            "launcher": {"kind": launcher},
            "scheduler": {"sge_pe": "mpi"},
            "requeue": {"enabled": True},
        }
    )
    script = tmp_path / "job.sh"
    script.write_text(render_script(spec, scheduler))
    make_stubs(tmp_path / "bin")
    log = tmp_path / "stub.log"
    env = {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "STUB_LOG": str(log),
        **scheduler_environment(scheduler, tmp_path),
    }
    done = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    ran = log.read_text() if log.exists() else ""
    assert done.returncode in (0, 99), done.stderr[-2000:]  # 99: Grid Engine's "run me again"
    assert "launched by" in ran, done.stderr[-2000:]
    assert "stopped after a checkpoint" in done.stderr, done.stderr[-2000:]
    if scheduler == "slurm":  # it read its own record among 100,000 and requeued itself
        assert "requeued 4242" in ran and "requeued (scontrol requeue)" in done.stderr
        env["STUB_RESTARTS"] = "1"  # SLURM requeued it already: it must not requeue again
        log.unlink()
        again = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=300)  # fmt: skip
        assert again.returncode == 0, again.stderr[-2000:]
        assert "was requeued by SLURM" in again.stderr and "requeued 4242" not in log.read_text()


def test_the_largest_allocation_passes_preflight_s_arithmetic(tmp_path, monkeypatch):
    make_stubs(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    spec = build_spec({"resources": {"nodes": NODES, "gpus_per_node": 4, "cpus_per_task": 8}})
    assert check_slurm(spec) == "big"
    too_many = build_spec({"resources": {"nodes": NODES + 1}})
    with pytest.raises(Exception, match=f"allows at most {NODES}"):
        check_slurm(too_many)
