"""torchrun: one agent per node (``python -m torch.distributed.run``) that starts the node's
ranks; the agents of a multi-node job meet at a c10d rendezvous on the first node."""

from __future__ import annotations

from hpcbench.jobs.launchers.base import Launcher, NodeStarter, container_prefix, program_args
from hpcbench.jobs.shell import ShellVar, Word, path_word
from hpcbench.jobs.spec import JobSpec


class Torchrun(Launcher):
    name = "torchrun"
    order = 10
    agent_per_node = True

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        standalone = spec.resources.nodes == 1
        return [*scheduler.node_agents(spec), *torchrun_words(spec, standalone=standalone)]

    @classmethod
    def needs_rendezvous(cls, spec: JobSpec) -> bool:
        return spec.resources.nodes > 1

    @classmethod
    def node_agent(cls, spec: JobSpec) -> list[Word]:
        return torchrun_words(spec, standalone=spec.resources.nodes == 1)


def torchrun_words(spec: JobSpec, *, standalone: bool) -> list[Word]:
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
    words += spec.launcher.args
    args = program_args(spec)
    if p.command:
        words += ["--no-python", *p.command, *args]
    elif p.script:
        words += [path_word(p.script), *args]
    else:
        words += ["-m", p.module or "", *args]
    return words
