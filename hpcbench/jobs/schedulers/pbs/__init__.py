"""PBS (OpenPBS, PBS Pro and Torque): the scheduler (:mod:`.scheduler`: qsub, qstat, qdel) and
its accounting (:mod:`.accounting`: the job history of ``qstat -x -f``)."""

from hpcbench.jobs.schedulers.pbs import scheduler

__all__ = ["scheduler"]
