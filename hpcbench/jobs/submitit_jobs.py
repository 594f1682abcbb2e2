"""The same jobs through submitit, for notebooks: a job spec becomes a configured
``submitit.AutoExecutor``, and the trainer is submitted as a function whose ``result()`` is the
run's metrics dict.

    from hpcbench import api
    spec = api.load_spec("jobs/demo.toml", nodes=1, gpus_per_node=2)
    job = api.submit_training(spec, ["--epochs", "3"], folder="runs/submitit")
    metrics = job.result()          # rank 0's results: test accuracy, phases, throughput, …

Multi-task jobs (one task per GPU, ``tasks_per_node`` or ``gpus_per_node`` > 1) run DDP: each
task reads its place from ``submitit.JobEnvironment`` (global rank, local rank, host names) and
torch.distributed rendezvouses on the first host, at a port derived from the job id.

Time limits and preemption: the trainer is submitted as a checkpointable callable
(:class:`TrainingTask`): on submitit's signal every rank stops at a step boundary, rank 0 writes
the checkpoint, and submitit requeues the job, which resumes from it (``--resume auto``).

Without SLURM accounting (no slurmdbd), submitit's ``sacct`` polls fail; ``result()`` still
returns for jobs that finish, but waits forever for a job that dies without a result (cancelled,
killed). On such clusters put a ``sacct`` first on PATH that adds ``--completion``
(``exec /usr/bin/sacct --completion "$@"``), which reads the job completion log (docs/notebooks.md).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.jobs.schedulers import for_submitit_cluster, scheduler_class
from hpcbench.jobs.script_check import directive_of
from hpcbench.jobs.shell import ShellVar, path_word, quote_word
from hpcbench.jobs.spec import JobSpec, SpecError

if TYPE_CHECKING:
    import submitit

    from hpcbench.jobs.job import Job


def _path(value: str) -> str:
    word = path_word(value)
    return word.text if isinstance(word, ShellVar) else quote_word(word)


def setup_lines(spec: JobSpec) -> list[str]:
    """The spec's environment as shell lines for submitit's ``slurm_setup`` (values quoted).

    submitit writes these lines right after its ``#SBATCH`` header, so a setup line that reads
    as a directive of any scheduler is refused: sbatch would obey it.
    """
    env = spec.environment
    lines = [f"module load {quote_word(m)}" for m in env.modules]
    if env.venv:
        lines.append(f"source {_path(env.venv)}/bin/activate")
    if env.conda_env:
        lines.append(f"conda activate {_path(env.conda_env)}")
    lines += [f"export {name}={quote_word(value)}" for name, value in env.variables.items()]
    lines.append(f"export OMP_NUM_THREADS={spec.resources.cpus_per_task}")
    for line in env.setup:
        for part in line.splitlines():
            if (reader := directive_of(part)) is not None:
                raise SpecError(
                    f"environment.setup: {part.strip()[:80]!r} would be read by {reader} as a "
                    "directive; setup lines must not start with a scheduler's directive prefix"
                )
    return lines + list(env.setup)


def executor(
    spec: JobSpec, folder: str | os.PathLike[str] | None = None, cluster: str | None = None
) -> submitit.AutoExecutor:
    """A ``submitit.AutoExecutor`` configured from ``spec`` (SLURM parameters when on SLURM)."""
    import submitit

    r = spec.resources
    folder = folder or Path(r.output_dir) / "submitit" / "%j"
    ex = submitit.AutoExecutor(folder=folder, cluster=cluster)
    params: dict[str, Any] = {
        "name": r.job_name,
        "nodes": r.nodes,
        "tasks_per_node": r.ranks_per_node,
        "cpus_per_task": r.cpus_per_task,
        "timeout_min": max(1, math.ceil(r.time_s / 60)),
    }
    if r.gpus_per_node:
        params["gpus_per_node"] = r.gpus_per_node
    if r.memory_mb:
        params["mem_gb"] = max(1, math.ceil(r.memory_mb / 1024))
    scheduler = for_submitit_cluster(ex.cluster)
    if scheduler is not None:  # the batch system's own parameters, as its class says them
        params.update(scheduler_class(scheduler).submitit_parameters(spec, setup_lines(spec)))
    elif spec.scheduler.after:
        raise SpecError(
            f"scheduler.after: submitit's {ex.cluster} executor cannot wait for another job"
        )
    ex.update_parameters(**params)
    return ex


def train_task(argv: list[str]) -> dict[str, Any]:
    """What each submitit task runs: place this task from submitit's environment, then train."""
    import submitit

    from hpcbench.train.entry import run_training
    from hpcbench.train.runtime import job_port

    env = submitit.JobEnvironment()
    if env.num_tasks > 1:
        per_node = max(1, env.num_tasks // max(1, env.num_nodes))
        os.environ.update(
            RANK=str(env.global_rank),
            WORLD_SIZE=str(env.num_tasks),
            LOCAL_RANK=str(env.local_rank),
            LOCAL_WORLD_SIZE=str(per_node),
            GROUP_RANK=str(env.node),
            MASTER_ADDR=env.hostnames[0],
            MASTER_PORT=str(job_port(str(env.job_id)) or 20000),
        )
    # One results directory per job id, which a requeue keeps: --resume auto finds the
    # checkpoints there.
    os.environ.setdefault("HPCBENCH_RUN_DIR", str(Path(env.paths.folder) / "run"))
    return run_training(list(argv))


class TrainingTask:
    """The trainer as a submitit *checkpointable* callable (submitit's ``checkpoint`` interface).

    submitit signals the job (SIGUSR2) before its time limit and on preemption. While training,
    the trainer's own handler takes the signal: every rank stops at the next step boundary and
    rank 0 writes the checkpoint. Then this task gives the signal back to submitit's handler,
    which calls :meth:`checkpoint` -- the same call with ``--resume auto`` -- and requeues the
    job; the requeued job continues from the checkpoint, bit-exactly.
    """

    def __call__(self, argv: list[str]) -> dict[str, Any] | None:
        import signal

        from hpcbench.train.stopping import Stopped

        try:
            return train_task(argv)
        except Stopped:
            # run_training put submitit's handlers back on its way out: let it requeue
            os.kill(os.getpid(), signal.SIGUSR2)
            import time

            time.sleep(60)  # rank 0's handler requeues and ends the job; the others wait for it
            raise

    def checkpoint(self, argv: list[str]) -> Any:
        import submitit

        resumed = [*argv, "--resume", "auto"] if "--resume" not in argv else list(argv)
        return submitit.helpers.DelayedSubmission(TrainingTask(), resumed)


def submit_training(
    spec: JobSpec,
    trainer_args: list[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    cluster: str | None = None,
) -> Job:
    """Submit the trainer through submitit; ``job.result()`` is rank 0's metrics dict."""
    ex = executor(spec, folder, cluster)
    p = spec.program
    args = (["--config", os.path.expanduser(p.config)] if p.config else []) + list(p.args)
    args += list(trainer_args or [])
    from hpcbench.jobs.job import Job

    return Job.from_submitit(ex.submit(TrainingTask(), args))
