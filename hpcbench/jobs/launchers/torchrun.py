"""torchrun: one agent per node (``python -m torch.distributed.run``) that starts the node's
ranks; the agents of a multi-node job meet at a c10d rendezvous on the first node."""

from __future__ import annotations

from hpcbench.jobs.launchers.base import (
    RANK_START,
    Launcher,
    NodeStarter,
    container_prefix,
    program_args,
)
from hpcbench.jobs.launchers.placement import numa_binding_lines, placement_of
from hpcbench.jobs.shell import ShellVar, Word, path_word
from hpcbench.jobs.spec import JobSpec


class Torchrun(Launcher):
    name = "torchrun"
    order = 10
    agent_per_node = True

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        standalone = spec.resources.nodes == 1
        numa = cls.placement_lines(spec, scheduler) is not None
        words = torchrun_words(spec, standalone=standalone, numa_binding=numa)
        return [*scheduler.node_agents(spec), *words]

    @classmethod
    def needs_rendezvous(cls, spec: JobSpec) -> bool:
        return spec.resources.nodes > 1

    @classmethod
    def node_agent(cls, spec: JobSpec) -> list[Word]:
        return torchrun_words(spec, standalone=spec.resources.nodes == 1)

    @classmethod
    def placement_lines(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[str] | None:
        """On GPU nodes, its own ``--numa-binding`` where the job's torch has it; otherwise (and
        for CPU nodes, which torch's binding does not serve) the rank start."""
        own = (
            placement_of(spec) == "auto"
            and spec.resources.gpus_per_node
            and not scheduler.plays_every_system
        )
        return numa_binding_lines(spec) if own else None


def torchrun_words(spec: JobSpec, *, standalone: bool, numa_binding: bool = False) -> list[Word]:
    """One torchrun agent (``python -m torch.distributed.run``, i.e. torchrun with the job's python).

    Multi-node jobs meet through a c10d rendezvous on ``$head_node:$rdzv_port`` with the job id
    as the rendezvous id; single-node jobs use ``--standalone`` (a free local port).
    """
    r, p = spec.resources, spec.program
    words: list[Word] = [*container_prefix(spec)]
    words += [path_word(p.python), "-m", "torch.distributed.run"]
    words += [f"--nnodes={r.nodes}", f"--nproc-per-node={r.ranks_per_node}"]
    if standalone:
        words.append("--standalone")
    else:
        words += [
            "--rdzv-backend=c10d",
            ShellVar('--rdzv-endpoint="$head_node:$rdzv_port"'),
            ShellVar('--rdzv-id="$job_id"'),
        ]
    # Per-rank stdout/stderr files under the run directory, teed to the job log with a rank prefix.
    words += [ShellVar('--log-dir="$run_dir/torchrun"'), "--tee=3"]
    if numa_binding:  # --numa-binding=exclusive, where the job's torch has it
        words.append(ShellVar('${numa_binding[@]+"${numa_binding[@]}"}'))
    words += spec.launcher.args
    args = program_args(spec)
    # each worker is a command: hpcbench's rank start (where it binds the rank), then the program
    words += ["--no-python", RANK_START]
    if p.command:
        words += [*p.command, *args]
    elif p.script:
        words += [path_word(p.python), path_word(p.script), *args]
    else:
        words += [path_word(p.python), "-m", p.module or "", *args]
    return words
