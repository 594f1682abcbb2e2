"""Grid Engine (Son of Grid Engine, Univa/Altair, Open Cluster Scheduler): the scheduler
(:mod:`.scheduler`: qsub, qstat, qdel) and its accounting (:mod:`.accounting`: qacct)."""

from hpcbench.jobs.schedulers.sge import scheduler

__all__ = ["scheduler"]
