"""SLURM's environment: srun's tasks (SLURM_PROCID alone is set in the batch step too; a task
started by srun also has a step id), the job's id, its CPUs and its node list."""

from __future__ import annotations

import re
from collections.abc import Mapping

from hpcbench.environments.base import Environment, RankVariables


class Slurm(Environment):
    name = "slurm"
    order = 40
    mpi_capable = True
    ranks = RankVariables(
        ("SLURM_PROCID",),
        ("SLURM_NTASKS",),
        ("SLURM_LOCALID",),
        (),
        ("SLURM_NODEID",),
        requires="SLURM_STEP_ID",
    )
    job_id_variable = "SLURM_JOB_ID"
    cpus_per_task_variable = "SLURM_CPUS_PER_TASK"
    cpus_on_node_variable = "SLURM_CPUS_ON_NODE"
    task_local = ("SLURM_LOCALID",)
    task_node = ("SLURM_NODEID",)
    tasks_per_node = ("SLURM_NTASKS_PER_NODE",)
    node_name_variable = "SLURMD_NODENAME"
    gpu_ids_variables = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")

    @classmethod
    def node_list(cls, env: Mapping[str, str]) -> str | None:
        return env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or None

    @classmethod
    def first_node(cls, env: Mapping[str, str]) -> str | None:
        nodelist = cls.node_list(env)
        return first_host(nodelist) if nodelist else None


def first_host(nodelist: str) -> str:
    """First host of a SLURM node list: ``node[03-05,7],gpu1`` -> ``node03``."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        return nodelist
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]
