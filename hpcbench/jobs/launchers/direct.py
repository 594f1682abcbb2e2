"""direct: the program itself as the job's one process, started by the batch script with no
launcher in front (``python -m hpcbench.train …``). For a job of one process (one node, one
task): a ``single`` or ``dp`` training, an evaluation, a data conversion. It costs nothing to
start (a torchrun agent is a second Python process that imports torch, seconds of a core, for a
rank it would start alone) and sets none of the launchers' variables (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``): a program that calls ``init_process_group`` wants torchrun. A job of more
processes, or ``launcher.args`` (there is no launcher to take them), is refused in one line."""

from __future__ import annotations

from hpcbench.jobs.launchers.base import Launcher, LaunchError, NodeStarter, program_words
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec


class Direct(Launcher):
    name = "direct"
    order = 40
    one_process = True

    @classmethod
    def words(cls, spec: JobSpec, scheduler: type[NodeStarter]) -> list[Word]:
        r = spec.resources
        if r.world_size != 1:
            raise LaunchError(
                f"launcher.kind: direct starts one process, and this job has {r.world_size} "
                f"({r.nodes} node(s) x {r.ranks_per_node} task(s)); use torchrun, mpiexec or srun"
            )
        if spec.launcher.args:
            raise LaunchError(
                "launcher.args: direct starts the program with no launcher to hand them to; "
                "remove them, or use torchrun, mpiexec or srun"
            )
        return program_words(spec)
