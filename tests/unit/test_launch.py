"""Launch detection and the run side's other answers (:mod:`hpcbench.this_rank`), from the
environments the launchers really set; the core count and line buffering in real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from hpcbench.this_rank import (
    MPI_LAUNCHERS,
    LaunchInfo,
    cpus_on_node,
    cpus_per_task,
    cpus_per_task_variables,
    detect_launch,
    first_node,
    is_mpi_launch,
    job_id,
    largest_remainder,
    node_list,
    usable_cores,
)

HOST = socket.gethostname()


def fields(info: LaunchInfo) -> tuple:
    return (
        info.launcher,
        info.rank,
        info.world_size,
        info.local_rank,
        info.local_world_size,
        info.node_rank,
    )


@pytest.mark.parametrize(
    "env,want",
    [
        (  # torchrun, 2 nodes x 4
            {
                "RANK": "5",
                "WORLD_SIZE": "8",
                "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "4",
                "GROUP_RANK": "1",
            },
            ("torchrun", 5, 8, 1, 4, 1),
        ),
        (  # Open MPI's mpirun
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "OMPI_COMM_WORLD_NODE_RANK": "1",
            },
            ("openmpi", 3, 4, 1, 2, 1),
        ),
        (  # MPICH / Intel MPI's Hydra
            {"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"},
            ("mpich", 2, 3, 2, 3, 0),
        ),
        (  # PMI-2 under srun: the local rank and node from SLURM
            {
                "PMI_RANK": "3",
                "PMI_SIZE": "4",
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "1",
                "SLURM_NTASKS_PER_NODE": "2",
            },
            ("mpich", 3, 4, 1, 2, 1),
        ),
        (  # srun's tasks
            {
                "SLURM_PROCID": "2",
                "SLURM_NTASKS": "4",
                "SLURM_STEP_ID": "0",
                "SLURM_LOCALID": "0",
                "SLURM_NODEID": "1",
                "SLURM_NTASKS_PER_NODE": "2",
            },
            ("slurm", 2, 4, 0, 2, 1),
        ),
        (  # mpirun inside a SLURM job: the batch step's SLURM place is not the rank's
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "SLURM_LOCALID": "0",
                "SLURM_NODEID": "0",
            },
            ("openmpi", 3, 4, 1, 2, 1),
        ),
        (  # submitit's local executor, three tasks
            {
                "SUBMITIT_LOCAL_GLOBALID": "2",
                "SUBMITIT_LOCAL_NTASKS": "3",
                "SUBMITIT_LOCAL_LOCALID": "2",
                "SUBMITIT_LOCAL_NODEID": "0",
                "SUBMITIT_LOCAL_JOB_ID": "4242",
            },
            ("submitit", 2, 3, 2, 3, 0),
        ),
        (  # submitit's local tasks started inside an srun session: submitit's, not the session's
            {
                "SUBMITIT_LOCAL_GLOBALID": "1",
                "SUBMITIT_LOCAL_NTASKS": "2",
                "SUBMITIT_LOCAL_LOCALID": "1",
                "SUBMITIT_LOCAL_NODEID": "0",
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "1",
                "SLURM_STEP_ID": "0",
            },
            ("submitit", 1, 2, 1, 2, 0),
        ),
        (  # torchrun inside an srun step: torchrun's variables win
            {
                "RANK": "1",
                "WORLD_SIZE": "2",
                "LOCAL_RANK": "1",
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "1",
                "SLURM_STEP_ID": "0",
            },
            ("torchrun", 1, 2, 1, 2, 0),
        ),
        (  # a SLURM batch step without srun: one process
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"},
            ("single", 0, 1, 0, 1, 0),
        ),
        ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, ("single", 0, 1, 0, 1, 0)),
        ({}, ("single", 0, 1, 0, 1, 0)),
    ],
)
def test_each_launcher_is_read_from_its_variables(env, want):
    info = detect_launch(env)
    assert fields(info) == want and info.hostname == HOST


def test_mpi_launches_are_named_once():
    def launch(launcher: str, world: int = 2) -> LaunchInfo:
        return LaunchInfo(0, world, 0, world, 0, launcher, HOST)

    assert MPI_LAUNCHERS == {"openmpi", "mpich", "mpi4py"}
    assert all(is_mpi_launch(launch(name)) for name in MPI_LAUNCHERS)
    assert not is_mpi_launch(launch("mpich", 1))  # one rank: nothing to share
    assert not is_mpi_launch(launch("torchrun")) and not is_mpi_launch(launch("slurm"))
    assert is_mpi_launch(launch("slurm"), srun_counts=True)
    assert not is_mpi_launch(launch("torchrun"), srun_counts=True)


@pytest.mark.parametrize(
    "env,want",
    [
        ({"SLURM_JOB_ID": "123"}, "123"),
        ({"PBS_JOBID": "45.server"}, "45.server"),
        ({"JOB_ID": "678"}, "678"),  # Grid Engine
        ({"LSB_JOBID": "91"}, "91"),  # LSF
        ({"SUBMITIT_LOCAL_JOB_ID": "4242"}, "4242"),  # submitit's local executor
        ({"HPCBENCH_JOB_ID": "local-3"}, "local-3"),
        ({"HPCBENCH_JOB_ID": "local-3", "SLURM_JOB_ID": "123"}, "local-3"),  # hpcbench's first
        ({"HPCBENCH_JOB_ID": " ", "SLURM_JOB_ID": "123"}, "123"),
        ({}, None),
    ],
)
def test_the_job_id_comes_from_whichever_scheduler_runs_the_job(env, want):
    assert job_id(env) == want


def test_the_batch_system_s_cpus_and_nodes_are_read_where_it_says_them():
    env = {
        "SLURM_CPUS_PER_TASK": "8",
        "SLURM_CPUS_ON_NODE": "32",
        "SLURM_JOB_NODELIST": "gpu[07-08],cpu1",
    }
    assert cpus_per_task(env) == 8 and cpus_on_node(env) == 32
    assert first_node(env) == "gpu07" and node_list(env) == "gpu[07-08],cpu1"
    assert first_node({"SLURM_NODELIST": "n3"}) == "n3"  # the older name
    # nothing said, or nothing usable: no answer rather than a guess
    for bad in ({}, {"SLURM_CPUS_PER_TASK": "0", "SLURM_CPUS_ON_NODE": "x"}):
        assert cpus_per_task(bad) is None and cpus_on_node(bad) is None
    assert first_node({}) is None and node_list({}) is None
    assert cpus_per_task_variables() == ["SLURM_CPUS_PER_TASK"]


def test_usable_cores_follow_the_affinity_of_the_process():
    assert usable_cores() == (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    )
    if not hasattr(os, "sched_getaffinity"):
        return
    first = min(os.sched_getaffinity(0))
    code = (
        f"import os; os.sched_setaffinity(0, {{{first}}})\n"
        "from hpcbench.this_rank import usable_cores; print(usable_cores())"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr


@pytest.mark.parametrize(
    "total,weights,want",
    [
        (32, [1, 1], [16, 16]),
        (32, [1, 1, 1], [11, 11, 10]),  # ties go to the earlier share
        (24, [1, 2, 5], [3, 6, 15]),
        (10, [1, 4, 4], [1, 5, 4]),
        (7, [0.85, 0.02, 0.13], [6, 0, 1]),
        (0, [1, 2], [0, 0]),
    ],
)
def test_largest_remainder_shares_sum_to_the_total(total, weights, want):
    got = largest_remainder(total, weights)
    assert got == want and sum(got) == total


def test_output_is_line_buffered_after_the_call():
    code = (
        "import sys\nfrom hpcbench.this_rank import line_buffered_output\n"
        "line_buffered_output()\n"
        "print(sys.stdout.line_buffering, sys.stderr.line_buffering, sys.stdout.write_through)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.stdout.split() == ["True", "True", "False"], r.stderr
