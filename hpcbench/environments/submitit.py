"""submitit's local executor: the variables it gives each task it starts (on SLURM, submitit's
tasks are srun's, read from SLURM's environment)."""

from __future__ import annotations

from hpcbench.environments.base import Environment, RankVariables


class SubmititLocal(Environment):
    name = "submitit"
    order = 35  # before SLURM's: its tasks inherit the variables of an srun session they run in
    ranks = RankVariables(
        ("SUBMITIT_LOCAL_GLOBALID",),
        ("SUBMITIT_LOCAL_NTASKS",),
        ("SUBMITIT_LOCAL_LOCALID",),
        (),
        ("SUBMITIT_LOCAL_NODEID",),
    )
    job_id_variable = "SUBMITIT_LOCAL_JOB_ID"
