"""Job arrays (a sweep's tasks as one job): the variable holding a task's index in its script, the
task's own job id in the script and in hpcbench, and where its logs go.

A batch system that runs arrays sets ``array_index_var`` (without it, rendering an array is
refused: "the template runs no arrays") and ``array_job_id_shell``, ``array_log_token`` when its
log directives substitute the task's id, ``task_id`` when a task's id is not ``ARRAY_INDEX``, and
``task_log_paths`` when it names a task's logs itself. Its template adds the array directive.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from hpcbench.jobs.spec import JobSpec


class JobArrays:
    """How a batch system runs the tasks of one array job."""

    #: Job arrays (a sweep's tasks): the variable holding a task's index (1, 2, …) in its
    #: script ('A|B': A, else B), the shell words that make the task's own job id there (what :meth:`task_id`
    #: gives), and the token in the log directives that the scheduler replaces with it.
    array_index_var: ClassVar[str] = ""
    array_job_id_shell: ClassVar[str] = ""
    array_log_token: ClassVar[str | None] = None

    @classmethod
    def task_id(cls, array_id: str, index: int) -> str:
        """The id of task ``index`` of the array job ``array_id`` (SLURM's ``1234_7``)."""
        return f"{array_id}_{index}"

    def task_log_paths(
        self, spec: JobSpec, task_id: str, index: int, cwd: Path
    ) -> tuple[Path, Path]:
        """Where an array task's stdout and stderr go."""
        return self.log_paths(spec, task_id, cwd)
