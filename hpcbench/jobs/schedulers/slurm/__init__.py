"""SLURM: the scheduler (:mod:`.scheduler`: sbatch, squeue, scancel, srun, the cluster checks)
and its accounting (:mod:`.accounting`: sacct)."""

from hpcbench.jobs.schedulers.slurm import accounting, scheduler

__all__ = ["accounting", "scheduler"]
