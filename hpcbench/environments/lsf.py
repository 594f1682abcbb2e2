"""LSF's environment on the run side: the job's id."""

from __future__ import annotations

from hpcbench.environments.base import Environment


class Lsf(Environment):
    name = "lsf"
    order = 70
    job_id_variable = "LSB_JOBID"
