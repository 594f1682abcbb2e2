"""Launch lines for torchrun and mpiexec, and shell quoting, as pure functions of a spec.

A launch line is a list of shell words. A plain ``str`` is a literal that the renderer quotes; a
:class:`ShellVar` is an expression written here (never taken from the user) that the shell expands
on the compute node, such as ``"$head_node:$rdzv_port"``. The batch templates define those shell
variables (``job_id``, ``run_dir``, ``head_node``, ``rdzv_port``, ``mpi_opts``, ``mpi_per_node``)
before the launch; nothing from ``$SLURM_*`` is ever expanded at render time.

A scheduler composes these into its launch line (:meth:`.schedulers.base.Scheduler.launch_words`,
where a batch system's own launcher such as ``srun`` lives in its module); nothing here knows the
schedulers.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from hpcbench.jobs.spec import JobSpec


@dataclass(frozen=True)
class ShellVar:
    """A shell expression that must reach the script unquoted (written by hpcbench, not the user)."""

    text: str


Word = str | ShellVar


class LaunchError(ValueError):
    """A launcher that cannot work with the chosen scheduler; one line naming the field."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TILDE_PREFIX = re.compile(r"^~([A-Za-z_][A-Za-z0-9_.-]*)?(?=/|$)")


def quote_word(value: str) -> str:
    """One inert shell word holding ``value``, written on one line of the script.

    Plain values get :func:`shlex.quote`. A value holding a newline or another control character
    is written as bash's ``$'...'`` with those characters as ``\\xHH`` escapes, so the script text
    never carries a raw newline from a value: no later line of the file can begin with what
    followed it (Grid Engine reads every line starting with ``#$`` as its options).
    """
    if "\x00" in value:
        raise ValueError(f"{value[:40]!r}: a NUL byte cannot be passed through a shell")
    if not _CONTROL.search(value):
        return shlex.quote(value)
    body = value.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", body) + "'"


def path_word(value: str) -> Word:
    """A path that may start with ``~`` or ``~user``: expanded by the shell on the compute node
    (the rest of the path stays quoted), as it would be typed at a prompt."""
    match = _TILDE_PREFIX.match(value)
    if not match:
        return value
    rest = value[match.end() :]
    return ShellVar(match.group(0) + ("/" + quote_word(rest[1:]) if rest[1:] else rest))


def shell_join(words: Iterable[Word], width: int | None = None) -> str:
    """Join words into one shell command line, quoting every literal.

    With ``width``, long lines are continued with `` \\`` so that a script stays readable.
    """
    quoted = [w.text if isinstance(w, ShellVar) else quote_word(w) for w in words]
    if width is None:
        return " ".join(quoted)
    lines = [""]
    for word in quoted:
        if lines[-1].strip() and len(lines[-1]) + 1 + len(word) > width:
            lines.append("    ")
        lines[-1] += (" " if lines[-1].strip() else "") + word
    return " \\\n".join(lines)


def container_prefix(spec: JobSpec) -> list[Word]:
    """``apptainer exec --nv --bind … IMAGE`` when the spec names a container, else nothing."""
    c = spec.environment.container
    if c is None:
        return []
    words: list[Word] = [c.runtime, "exec"]
    if spec.resources.gpus_per_node:
        words.append("--nv")
    for bind in c.binds:
        words += ["--bind", path_word(bind)]
    return [*words, *c.options, path_word(c.image)]


def program_args(spec: JobSpec) -> list[Word]:
    """The program's arguments: ``--config FILE`` first when the spec names one, then ``args``
    (the trainer lets flags override its file wherever they stand)."""
    p = spec.program
    return ["--config", path_word(p.config), *p.args] if p.config else list(p.args)


def program_words(spec: JobSpec) -> list[Word]:
    """What each rank runs, inside the container if there is one."""
    p = spec.program
    args = program_args(spec)
    if p.command:
        argv: list[Word] = [*p.command, *args]
    elif p.script:
        argv = [path_word(p.python), path_word(p.script), *args]
    else:
        argv = [path_word(p.python), "-m", p.module or "", *args]
    return [*container_prefix(spec), *argv]


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


def mpiexec_words(spec: JobSpec) -> list[Word]:
    """``mpiexec -n WORLD`` with the options of the MPI found at run time (labels, env export)."""
    words: list[Word] = [
        "mpiexec",
        "-n",
        str(spec.resources.world_size),
        ShellVar('"${mpi_opts[@]}"'),
    ]
    return [*words, *spec.launcher.args, *program_words(spec)]
