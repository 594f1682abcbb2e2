"""LSF: the scheduler (:mod:`.scheduler`: bsub, bjobs, bkill, blaunch) and its accounting
(:mod:`.accounting`: ``bacct -l``)."""

from hpcbench.jobs.schedulers.lsf import scheduler

__all__ = ["scheduler"]
