"""How a batch script binds its ranks to cores, the part every launcher shares.

``launcher.placement`` is ``auto`` (each rank on its own share of the node's cores, near its GPU),
``none`` (the launcher's and the site's defaults), or one CPU list per rank of a node. Each
launcher binds in its own way (srun's ``--cpu-bind``, mpiexec's ``-bind-to``/``--bind-to``,
torchrun's ``--numa-binding``); where it cannot, hpcbench's rank start does
(:mod:`hpcbench.placement.rank_start`, in the ``rank_start`` array every rank's program words
begin with). This module writes the shell lines that set that array and the variables the ranks'
records read (``HPCBENCH_PLACEMENT``, ``HPCBENCH_BOUND_BY``, ``HPCBENCH_CPUS_PER_RANK``).
"""

from __future__ import annotations

from hpcbench.jobs.launchers.base import Launcher, LaunchError, NodeStarter, container_prefix
from hpcbench.jobs.shell import Word, path_word, quote_word, shell_join
from hpcbench.jobs.spec import JobSpec
from hpcbench.placement.choice import KEYWORDS, parse_explicit

RANK_START_MODULE = "hpcbench.placement.rank_start"
LEAST_PINNED_MODULE = "hpcbench.placement.least_pinned"
# Does the job's python have torchrun's --numa-binding (torch 2.9 and later), and does the node have
# a GPU device for it to bind near? Asked of the files, without importing torch: torch raises "No
# accelerator available" on a node whose GPUs the batch system lists but that has no device.
_HAS_NUMA_BINDING = (
    "import glob, importlib.metadata as m, os, sys; "
    "has = m.distribution('torch').locate_file('torch/numa/binding.py').exists(); "
    "gpu = glob.glob('/dev/nvidia[0-9]*') or os.path.exists('/dev/kfd'); "
    "sys.exit(not (has and gpu))"
)


def placement_of(spec: JobSpec) -> str:
    return (spec.launcher.placement or "auto").strip()


def explicit_shares(spec: JobSpec) -> list[frozenset[int]] | None:
    """The CPU lists of an explicit placement (None for auto and none), one per rank of a node."""
    value = placement_of(spec)
    if value in KEYWORDS:
        return None
    shares = parse_explicit(value)
    ranks = spec.resources.ranks_per_node
    if len(shares) != ranks:
        raise LaunchError(
            f"launcher.placement: {len(shares)} CPU list(s) for {ranks} rank(s) per node; "
            "give one list per rank, separated by ';'"
        )
    return shares


def exports(spec: JobSpec, bound_by: str) -> str:
    """The variables the rank start and every rank's record read, and the rank start's array,
    empty until a line below fills it."""
    return (
        f"export HPCBENCH_PLACEMENT={quote_word(placement_of(spec))} "
        f"HPCBENCH_BOUND_BY={bound_by} HPCBENCH_CPUS_PER_RANK={spec.resources.cpus_per_task}\n"
        "rank_start=()"
    )


def _hpcbench_program(spec: JobSpec) -> bool:
    p = spec.program
    return not p.command and not p.script and (p.module or "").startswith("hpcbench.")


def rank_start_lines(spec: JobSpec) -> list[str]:
    """Binding by hpcbench's rank start: the ``rank_start`` array, and where the program is not
    hpcbench's own, a check that the job's python has hpcbench (else the ranks run unbound)."""
    if placement_of(spec) == "none":
        return [exports(spec, "none")]
    python = path_word(spec.program.python)
    start: list[Word] = [python, "-m", RANK_START_MODULE, "--"]
    lines = [exports(spec, "none"), f"rank_start=({shell_join(start)})"]
    if not _hpcbench_program(spec):
        check = shell_join([*container_prefix(spec), python, "-c", f"import {RANK_START_MODULE}"])
        lines += [
            f"if ! {check} >/dev/null 2>&1; then",
            "  rank_start=()",
            "  echo \"hpcbench: launcher.placement: the job's python cannot import hpcbench, so "
            'the ranks are not bound; install hpcbench there or bind them with launcher.args" >&2',
            "fi",
        ]
    return lines


def numa_binding_lines(spec: JobSpec) -> list[str]:
    """torchrun on GPU nodes: its own ``--numa-binding=exclusive`` where the job's torch has it
    (each rank on its own share of its GPU's NUMA node), else the rank start."""
    python = path_word(spec.program.python)
    check = shell_join([*container_prefix(spec), python, "-c", _HAS_NUMA_BINDING])
    return [
        *rank_start_lines(spec),
        "numa_binding=()",
        f"if {check} >/dev/null 2>&1; then",
        "  numa_binding=(--numa-binding=exclusive)",
        "  rank_start=()",
        "  export HPCBENCH_BOUND_BY=torchrun",
        "fi",
    ]


def cpu_masks(shares: list[frozenset[int]]) -> str:
    """srun's ``mask_cpu:`` list of an explicit placement (``0x3,0xc``)."""
    return ",".join(hex(sum(1 << c for c in share)) for share in shares)


def placement_lines(launcher: type[Launcher], spec: JobSpec, scheduler: type[NodeStarter]) -> str:
    """The batch script's placement section: the launcher's own binding, else the rank start's
    (on a machine that plays every node, always the rank start's: the ranks of several emulated
    nodes share its cores)."""
    explicit_shares(spec)  # one line naming the field for a placement of the wrong shape
    if scheduler.plays_every_system:
        return "\n".join([*rank_start_lines(spec), *least_pinned_lines(spec)])
    own = launcher.placement_lines(spec, scheduler)
    return "\n".join(own if own is not None else rank_start_lines(spec))


def least_pinned_lines(spec: JobSpec) -> list[str]:
    """A machine that plays every node, shared with other jobs: the ranks start at the cores the
    fewest pinned processes hold (:mod:`hpcbench.placement.least_pinned`, asked once here)."""
    if placement_of(spec) != "auto":
        return []
    ask = shell_join([*container_prefix(spec), path_word(spec.program.python), "-m",
                      LEAST_PINNED_MODULE])  # fmt: skip
    return [
        "# several jobs may share this machine: this one starts at its least pinned cores",
        f'HPCBENCH_CORE_TURN=$({ask} 2>/dev/null) || HPCBENCH_CORE_TURN=""',
        "export HPCBENCH_CORE_TURN",
    ]
