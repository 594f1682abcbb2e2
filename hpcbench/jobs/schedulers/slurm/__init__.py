"""SLURM: the scheduler (:mod:`.scheduler`: sbatch, squeue, scancel), what the cluster says of
itself and the preflight of a job (:mod:`.cluster`: sinfo, scontrol) and its accounting
(:mod:`.accounting`: sacct)."""

from hpcbench.jobs.schedulers.slurm import scheduler

__all__ = ["scheduler"]
