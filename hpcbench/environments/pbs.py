"""PBS's (PBS Pro, OpenPBS, Torque) environment on the run side: the job's id."""

from __future__ import annotations

from hpcbench.environments.base import Environment


class Pbs(Environment):
    name = "pbs"
    order = 50
    job_id_variable = "PBS_JOBID"
