"""The local scheduler: runs the rendered script with bash on this machine, detached.

Job ids (``local-1``, ``local-2`` …) count up in a state directory (``$HPCBENCH_STATE_DIR``, else
``$XDG_STATE_HOME/hpcbench``, else ``~/.local/state/hpcbench``), shared by every project on the
machine. An id is handed out once: its record is created exclusively, and an id whose record,
exit file or logs already exist is skipped. Each job runs in its own session (so that cancel
reaches every rank) under a small bash supervisor that, when the script ends, ends what it left
running in that session and then records its exit status next to the job's record. A process
that leaves the session (``setsid``) escapes both this and cancel once its parent is gone: only
a cgroup, which a cluster's scheduler has and this one does not, could follow it. Logs go where a cluster would put them:
``<output_dir>/<job name>-<id>.out`` and ``.err``.

A record names the host, the boot and the start time of the job's supervisor: a process is
taken for the job's (read for liveness, signalled) only when all three match, so neither a PID
reused after a reboot nor a state directory shared by several machines lets hpcbench signal a
stranger. Every file here is created with mode 0o666 less the umask.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.jobs.schedulers.base import Scheduler
from hpcbench.jobs.schedulers.local.files import CANCEL_GRACE, ID_PREFIX
from hpcbench.jobs.schedulers.local.nodes import RANK_GUARD, guarded
from hpcbench.jobs.schedulers.local.starting import Starting
from hpcbench.jobs.schedulers.local.states import States
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec
from hpcbench.jobs.state import state_dir


class LocalScheduler(Starting, States, Scheduler):
    """This machine as a batch system: its files (:mod:`.files`), starting jobs
    (:mod:`.starting`), their states and cancel (:mod:`.states`); of the Scheduler base's parts
    its ids, waiting, launching, detection, script values, arrays, requeueing and limits."""

    name = "local"
    label = "the local scheduler"
    template = "local.sh.j2"
    script_suffix = ".sh"
    # ids
    id_pattern = re.compile(r"local-[0-9]{1,18}(?:_[0-9]{1,10})?")
    id_form = "local-<number>, e.g. local-1, or local-1_3 for an array task"
    # waiting: this machine may be asked often
    poll_start = 0.05
    poll_ceiling = 1.0
    # launching and detection
    plays_every_system = True  # a launcher only a cluster has runs as its stand-in here
    detect_order = 1000  # the last resort: no batch system on this machine
    # arrays
    array_index_var = "HPCBENCH_ARRAY_INDEX"
    array_job_id_shell = '"$HPCBENCH_JOB_ID"'
    # requeueing and limits
    stop_warning = "hpcbench cancel sends SIGTERM, SIGKILL a few seconds later"
    max_ranks = 1024
    max_ranks_reason = "starts every rank on this machine"

    @classmethod
    def detect(cls) -> str | None:
        *first, last = cls.other_submit_commands()
        return f"no batch system ({', '.join(first)} or {last}) on PATH"

    @classmethod
    def job_environment(cls, job_id: str, hosts: Sequence[str], folder: Path) -> dict[str, str]:
        return {"HPCBENCH_JOB_ID": f"{ID_PREFIX}{job_id}"}

    @classmethod
    def node_agents(cls, spec: JobSpec) -> list[Word]:
        return []  # the template loops over the emulated nodes itself

    @classmethod
    def launch_words(cls, spec: JobSpec) -> list[Word]:
        """The launcher's line; on several emulated nodes, each rank under the rank guard
        (:mod:`.nodes`) when one command starts every rank."""
        words = super().launch_words(spec)
        if cls.launcher(spec).node_agent(spec):
            return words
        return guarded(words, spec) or words

    @classmethod
    def template_context(cls, spec: JobSpec) -> dict[str, Any]:
        """The rank guard where the launch line uses it, and the seconds a failing node's
        peers get between SIGTERM and SIGKILL (the cancel's grace)."""
        uses_guard = (
            not cls.launcher(spec).node_agent(spec)
            and guarded(super().launch_words(spec), spec) is not None
        )
        return {"rank_guard": RANK_GUARD if uses_guard else "", "node_grace": int(CANCEL_GRACE)}

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or state_dir()) / "local"
        self._children: list[subprocess.Popen] = []  # reaped on each status call
