"""srun's ``--kill-on-bad-exit`` on emulated nodes: when one node's launcher, or one rank under
mpiexec, exits non-zero, the local job script stops every emulated node (SIGTERM to each node's
process group, SIGKILL to what is left after a short grace) and the job ends failed.

torchrun's agents are the script's own children, one per node: it sees their exit itself. The
ranks of one mpiexec are not (MPICH's mpiexec waits for the others after a rank's plain ``exit
1``): each rank runs under :data:`RANK_GUARD`, a few lines of bash that name the rank on its
failure (a one-line error the log reader takes for that rank's) and tell the script by SIGUSR1.
"""

from __future__ import annotations

from hpcbench.jobs.launchers.base import program_words
from hpcbench.jobs.shell import ShellVar, Word
from hpcbench.jobs.spec import JobSpec

# Run as `bash -c "$rank_guard" hpcbench-rank PROGRAM ARGS...` by each rank's MPI; the script
# exports HPCBENCH_LOCAL_WATCHER (its launch shell) and HPCBENCH_RANKS_PER_NODE.
RANK_GUARD = r""""$@"; rc=$?
if [ "$rc" -ne 0 ]; then
  rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-?}}}
  node=?; case $rank in *[!0-9]*|'') ;; *) node=$(( rank / HPCBENCH_RANKS_PER_NODE )) ;; esac
  echo "hpcbench rank $rank: error: exited with status $rc on emulated node $node" >&2
  kill -USR1 "$HPCBENCH_LOCAL_WATCHER" 2>/dev/null
fi
exit "$rc"
"""

GUARD_WORDS: tuple[Word, ...] = ("bash", "-c", ShellVar('"$rank_guard"'), "hpcbench-rank")


def guarded(words: list[Word], spec: JobSpec) -> list[Word] | None:
    """``words`` (a launch line that starts every rank from one command) with each rank's
    program under the rank guard; None where the job has one node or the program is not the
    line's end (a launcher of another package)."""
    program = program_words(spec)
    if spec.resources.nodes == 1 or not program or words[-len(program) :] != program:
        return None
    return [*words[: -len(program)], *GUARD_WORDS, *program]
