"""Grid Engine's environment on the run side: the job's id."""

from __future__ import annotations

from hpcbench.environments.base import Environment


class GridEngine(Environment):
    name = "sge"
    order = 60
    job_id_variable = "JOB_ID"
