"""srun: SLURM's own launcher, one task per rank, started and tracked by the cluster (a failing
rank ends the step). Only SLURM has it; the local scheduler starts the same ranks with mpiexec."""

from __future__ import annotations

from hpcbench.jobs.containers import srun_options
from hpcbench.jobs.launchers.base import Launcher, NodeStarter, program_words
from hpcbench.jobs.launchers.placement import (
    cpu_masks,
    explicit_shares,
    placement_of,
    rank_start_lines,
)
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec, OwnOption


class Srun(Launcher):
    name = "srun"
    order = 30
    only_under = "slurm"
    stand_in = "mpiexec"
    # srun's --mpi: the PMI plugin that MPI ranks started without mpiexec connect through
    options = (OwnOption("launcher", "srun_mpi", "line", profile_key="srun_mpi"),)

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        return srun_words(spec)

    @classmethod
    def placement_lines(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[str] | None:
        """srun binds where the cluster's TaskPlugin can (task/affinity or task/cgroup); under
        task/none its --cpu-bind is ignored, and hpcbench's rank start binds instead."""
        if placement_of(spec) == "none":
            return rank_start_lines(spec)
        return [
            *rank_start_lines(spec),
            "if scontrol show config 2>/dev/null \\",
            "    | grep -Eq '^TaskPlugin +=.*task/(affinity|cgroup)'; then",
            "  rank_start=()",
            "  export HPCBENCH_BOUND_BY=srun",
            "fi",
        ]


def srun_binding(spec: JobSpec) -> list[Word]:
    """srun's own binding: each task on its cpus_per_task cores (task/affinity), on the cores
    nearest its GPU (``--gpu-bind=closest``); an explicit placement as one CPU mask per task."""
    shares = explicit_shares(spec)
    if shares is not None:
        return [f"--cpu-bind=mask_cpu:{cpu_masks(shares)}"]
    if placement_of(spec) == "none":
        return []
    return ["--cpu-bind=cores", *(["--gpu-bind=closest"] if spec.resources.gpus_per_node else [])]


def srun_words(spec: JobSpec) -> list[Word]:
    """``srun`` with one task per rank; a failing rank ends the step (``--kill-on-bad-exit``)."""
    r = spec.resources
    words: list[Word] = [
        "srun",
        f"--ntasks={r.world_size}",
        f"--ntasks-per-node={r.ranks_per_node}",
        "--kill-on-bad-exit=1",
        "--label",
    ]
    if plugin := Srun.option(spec, "srun_mpi"):
        words.append(f"--mpi={plugin}")
    words += srun_binding(spec)
    # a container started by srun itself (pyxis) is a set of srun options
    return [*words, *srun_options(spec), *spec.launcher.args, *program_words(spec)]
