"""Render a :class:`~hpcbench.jobs.spec.JobSpec` into a batch script with the Jinja job templates.

The environment is strict (a missing variable is an error) and every user value reaches the
script through a quoting filter:

* ``shq`` -- one shell word, quoted with :func:`shlex.quote` (inert whatever it holds);
* ``shjoin`` -- a launch line (see :mod:`hpcbench.jobs.shell`);
* ``directive`` -- a value inside a ``#SBATCH``/``#PBS``/``#$`` line: bare when harmless, else
  quoted as the scheduler's directives read quotes (its ``quote_directive``: escaped for sbatch,
  refused where a qsub reads no escapes); a value holding a newline is refused, since it would end
  the comment line and become code;
* ``comment`` -- text inside a ``#`` comment, with control characters shown as escapes.

Templates are looked up first in the user's directories (``--template-dir`` or the
``HPCBENCH_TEMPLATE_DIR`` variable, ``os.pathsep``-separated), then in the built-in ones. The
built-ins are also reachable as ``hpcbench/<name>``, so a user's ``slurm.sbatch.j2`` can say
``{% extends "hpcbench/slurm.sbatch.j2" %}`` and override one block.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from hpcbench import __version__
from hpcbench.jobs.containers import ContainerError, check_container
from hpcbench.jobs.launchers import LaunchError
from hpcbench.jobs.launchers.placement import placement_lines
from hpcbench.jobs.program_args import check_program_args
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES, SchedulerError, scheduler_class
from hpcbench.jobs.script_check import ScriptCheckError, check_directives
from hpcbench.jobs.shell import ShellVar, path_word, quote_word, shell_join
from hpcbench.jobs.spec import JobSpec

TEMPLATE_DIR_VAR = "HPCBENCH_TEMPLATE_DIR"
LINE_WIDTH = 96  # launch lines are wrapped with backslash continuations past this
_SAFE_DIRECTIVE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
log = logging.getLogger("hpcbench")


class RenderError(ValueError):
    """A spec that cannot be rendered for the chosen scheduler; one line naming the field."""


def builtin_template_dir() -> Path:
    """The directory of the built-in templates: the package ``hpcbench.templates`` (its ``*.j2``
    files ship in the wheel as package data)."""
    return Path(str(files("hpcbench.templates")))


def user_template_dirs(template_dirs: Sequence[str | Path] | None = None) -> list[Path]:
    """The user's template directories: the explicit ones, then ``$HPCBENCH_TEMPLATE_DIR``."""
    dirs = [Path(d) for d in template_dirs or []]
    dirs += [Path(d) for d in os.environ.get(TEMPLATE_DIR_VAR, "").split(os.pathsep) if d]
    for d in dirs:
        if not d.is_dir():
            raise RenderError(f"template directory {str(d)!r} does not exist")
    return dirs


# ------------------------------------------------------------------------------------- filters


def shq(value: Any) -> str:
    """Quote one value as a single inert shell word."""
    if value is None or isinstance(value, jinja2.Undefined):
        raise RenderError("a template tried to quote an empty value (None)")
    try:
        return quote_word(str(value))
    except ValueError as err:
        raise RenderError(str(err)) from None


def shpath(value: Any) -> str:
    """Quote a path as one shell word; a leading ``~``/``~user`` expands on the compute node."""
    word = path_word(str(value))
    return word.text if isinstance(word, ShellVar) else shq(word)


def shjoin(words: Sequence[str | ShellVar]) -> str:
    return shell_join(words)


def directive(value: Any, scheduler: str) -> str:
    """Quote a value for one of ``scheduler``'s directive lines (``#SBATCH --job-name=VALUE``):
    bare when harmless, else as the scheduler's :meth:`~.schedulers.base.Scheduler.quote_directive`
    says (each batch system reads quotes and escapes its own way); a newline is refused."""
    text = str(value)
    if _CONTROL.search(text):
        raise RenderError(f"{text!r}: a directive value cannot hold a newline or control character")
    if _SAFE_DIRECTIVE.match(text):
        return text
    try:
        return scheduler_class(scheduler).quote_directive(text)
    except SchedulerError as err:
        raise RenderError(str(err)) from None


@jinja2.pass_context
def _directive_filter(context: Any, value: Any) -> str:
    return directive(value, context["scheduler"])


def comment(value: Any) -> str:
    """Text that stays inside one ``#`` comment line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def _unsupported(field: str, scheduler: str, hint: str = "") -> None:
    raise RenderError(f"{field}: not supported by the {scheduler} template{hint}")


# ------------------------------------------------------------------------------------- rendering


def make_environment(template_dirs: Sequence[str | Path] | None = None) -> jinja2.Environment:
    """The Jinja environment: the user's directories first, then the built-ins.

    It is sandboxed: a template can shape the script's text, but it cannot call into Python (no
    ``os.popen`` through ``__class__`` tricks, no attribute of ours that starts with ``_``) while
    it is rendered on a login node. What a template writes into the script still runs on the
    compute node, like any job script the user writes: templates are trusted as code there.
    """
    builtin = jinja2.FileSystemLoader(str(builtin_template_dir()))
    loaders: list[jinja2.BaseLoader] = [
        # first: ``hpcbench/…`` (the base every template extends) always names a built-in; a
        # user directory cannot replace it, and so cannot bypass the quoting it holds
        jinja2.PrefixLoader({"hpcbench": builtin}),
        jinja2.FileSystemLoader([str(d) for d in user_template_dirs(template_dirs)]),
        builtin,
        # then the template directories of schedulers that plug-ins add
        jinja2.FileSystemLoader(
            [str(c.template_dir) for c in SCHEDULER_CLASSES.values() if c.template_dir]
        ),
    ]
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        shq=shq, shpath=shpath, shjoin=shjoin, directive=_directive_filter, comment=comment
    )
    env.globals.update(unsupported=_unsupported)
    return env


def user_template(scheduler: str, template_dirs: Sequence[str | Path] | None = None) -> Path | None:
    """The user's template that replaces the built-in one for ``scheduler``, if there is one."""
    name = scheduler_class(scheduler).template
    for d in user_template_dirs(template_dirs):
        candidate = d / name
        if candidate.is_file():
            return candidate
    return None


def summary(spec: JobSpec) -> str:
    """One line saying what the script runs, for its header and for the CLI."""
    r = spec.resources
    per_node = f"{r.nodes} node{'s' if r.nodes > 1 else ''} x {r.ranks_per_node} rank"
    per_node += "s" if r.ranks_per_node > 1 else ""
    gpus = f", {r.gpus_per_node} GPU(s) per node" if r.gpus_per_node else ", CPU only"
    return (
        f"{shell_join(spec.program.argv())} as {r.world_size} rank(s) ({per_node}{gpus}), "
        f"started by {spec.launcher.kind}"
    )


def requeue_context(spec: JobSpec, scheduler: str) -> dict[str, Any] | None:
    """What the templates need to signal, checkpoint and requeue; None when it is off."""
    q = spec.requeue
    if not q.active(spec.program):
        return None
    if q.lead_s >= spec.resources.time_s:
        raise RenderError(
            f"requeue.lead: {q.lead_s} s before the time limit is not inside the job's "
            f"{spec.resources.time_s} s; give a shorter lead or a longer resources.time"
        )
    return {
        "signal": q.signal,
        "lead_s": q.lead_s,
        "max": q.max,
        "method": q.method,
        "why": scheduler_class(scheduler).stop_warning.replace(
            "`lead`", f"{q.lead_s} s (requeue.lead)"
        ),
    }


def array_context(spec: JobSpec, scheduler: str) -> dict[str, Any] | None:
    """What the templates need to run a task of a job array; None for a plain job."""
    array = spec.array
    if array is None:
        return None
    cls = scheduler_class(scheduler)
    if not cls.array_index_var:
        raise RenderError(f"job arrays: the {scheduler} template runs no arrays")
    index = "".join("${" + var + ":-" for var in cls.array_index_var.split("|"))
    index += "}" * len(cls.array_index_var.split("|"))
    return {
        "size": array.size,
        "max_parallel": array.max_parallel,
        "index_var": cls.array_index_var.replace("|", " or "),
        "index_shell": f'"{index}"',
        "job_id_shell": cls.array_job_id_shell,
        "tasks_dir": array.tasks_dir,
        "runs_dir": array.runs_dir,
        "task_args": array.task_args,
    }


def preflight_context(spec: JobSpec, cls: Any, launcher: Any) -> dict[str, str]:
    """``submit --preflight``: the doctor's launch through the same launcher, before the program
    (and, for a scheduler that starts each emulated node's agent itself, one node's agent)."""
    doctor = dataclasses.replace(
        spec,
        program=dataclasses.replace(
            spec.program, module="hpcbench.doctor", script=None, command=None, config=None,
            args=["--preflight", *spec.launcher.doctor_args],
        ),
        array=None,
    )  # fmt: skip
    return {
        "launch": shell_join(cls.launch_words(doctor), width=LINE_WIDTH),
        "agent": shell_join(launcher.node_agent(doctor), width=LINE_WIDTH),
    }


def template_context(spec: JobSpec, scheduler: str) -> dict[str, Any]:
    r = spec.resources
    cls = scheduler_class(scheduler)
    if cls.max_ranks is not None and r.world_size > cls.max_ranks:
        raise RenderError(
            f"resources.nodes: the {scheduler} scheduler {cls.max_ranks_reason}; "
            f"{r.world_size} ranks is more than {cls.max_ranks}"
        )
    try:
        launcher = cls.launcher(spec)
        check_container(spec, scheduler, launcher.name)
        launch = cls.launch_words(spec)
        placement = placement_lines(launcher, spec, cls)
        preflight = preflight_context(spec, cls, launcher) if spec.launcher.doctor else None
    except (LaunchError, ContainerError) as err:
        raise RenderError(str(err)) from None
    per_node_agent = launcher.agent_per_node
    launch_text = shell_join(launch, width=LINE_WIDTH)
    per_task_cpus = r.cpus_per_task * (r.ranks_per_node if per_node_agent else 1)
    return {
        "spec": spec,
        "r": r,
        "env": spec.environment,
        "launcher": spec.launcher,
        "program": spec.program,
        "scheduler": scheduler,
        "version": __version__,
        "source": spec.source or "(no spec file: defaults and command-line flags)",
        "summary": summary(spec),
        "file_name": r.file_name,
        "launch": launch_text,
        "placement": placement,
        "preflight": preflight,
        # where the logs and the run directory go: one definition, the scheduler class's
        "log_directives": cls.log_directives(spec),
        "run_dir_shell": cls.run_dir_shell(spec),
        # a launcher with one agent per node (torchrun): the scheduler's task is the node's agent
        # and holds the CPUs of all its ranks; the others start one task per rank.
        "tasks_per_node": 1 if per_node_agent else r.ranks_per_node,
        "cpus_per_sched_task": per_task_cpus,
        "slots_per_node": r.ranks_per_node * r.cpus_per_task,
        "needs_rendezvous": launcher.needs_rendezvous(spec),
        "uses_mpi_opts": "${mpi_opts[@]}" in launch_text,
        "uses_mpi_per_node": "${mpi_per_node[@]}" in launch_text,
        # one emulated node's agent, for a scheduler that starts each node's agent itself
        "local_agent": shell_join(launcher.node_agent(spec), width=LINE_WIDTH),
        "requeue": requeue_context(spec, scheduler),
        "array": array_context(spec, scheduler),
        # the values of the spec fields only this scheduler reads (its class's ``options``)
        "options": {o.key: cls.option(spec, o.key) for o in cls.options},
        **cls.template_context(spec),
    }


def render_script(
    spec: JobSpec, scheduler: str, template_dirs: Sequence[str | Path] | None = None
) -> str:
    """The batch script for ``scheduler`` (``slurm``, ``pbs``, ``sge`` or ``local``).

    The arguments of hpcbench's own programs are checked with their parsers first
    (:mod:`hpcbench.jobs.program_args`). A template found in the user's directories is named on
    stderr (through the ``hpcbench`` logger), and every rendered script is checked line by line: no line after the directive
    header may be one that a scheduler reads as a directive (see :mod:`hpcbench.jobs.script_check`).
    """
    try:
        cls = scheduler_class(scheduler)
    except SchedulerError as err:
        raise RenderError(str(err)) from None
    check_program_args(spec)
    env = make_environment(template_dirs)
    if (custom := user_template(scheduler, template_dirs)) is not None:
        log.warning("hpcbench: using the user template %s", custom)
    try:
        template = env.get_template(cls.template)
        text = template.render(template_context(spec, scheduler))
    except jinja2.sandbox.SecurityError as err:
        raise RenderError(f"template {cls.template}: refused by the sandbox: {err}") from None
    except jinja2.TemplateError as err:
        where = getattr(err, "filename", None) or cls.template
        line = getattr(err, "lineno", None)
        raise RenderError(f"template {where}{f':{line}' if line else ''}: {err}") from None
    try:
        check_directives(text, scheduler)
    except ScriptCheckError as err:
        raise RenderError(str(err)) from None
    return text
