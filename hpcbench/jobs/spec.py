"""The job spec: one typed description of a job, plain data at the bottom of the submit side.

A spec has six tables -- ``[resources]``, ``[environment]`` (with ``[environment.container]``),
``[launcher]``, ``[program]``, ``[scheduler]`` and ``[requeue]`` -- described field by field in
docs/job-spec.md. Each field's metadata says what kind of value it takes; :mod:`.spec_load` reads
TOML and CLI flags into these classes by those kinds. This module imports nothing of hpcbench: the
schedulers, the launchers and the renderer all stand on it.

No torch, no third-party imports: this module runs on login nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import NotRequired

DEFAULT_PROGRAM_MODULE = "hpcbench.train"

# Upper bounds. A file name component is at most 255 bytes, and the job name becomes part of log
# file names; one argument of a command line is at most 128 KiB on Linux (MAX_ARG_STRLEN).
MAX_NAME_CHARS = 128
MAX_LINE_CHARS = 4096
MAX_TEXT_CHARS = 128 * 1024 - 1
MAX_COUNTS = {"nodes": 100_000, "gpus_per_node": 64, "tasks_per_node": 1024, "cpus_per_task": 8192}
_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")


# Short names for the fields people override most: load_spec(nodes=2), and the CLI's flags.
FIELD_KEYWORDS = {
    "nodes": "resources.nodes",
    "gpus_per_node": "resources.gpus_per_node",
    "tasks_per_node": "resources.tasks_per_node",
    "cpus_per_task": "resources.cpus_per_task",
    "memory": "resources.memory",
    "time": "resources.time",
    "partition": "resources.partition",
    "account": "resources.account",
    "qos": "resources.qos",
    "constraint": "resources.constraint",
    "exclusive": "resources.exclusive",
    "job_name": "resources.job_name",
    "output_dir": "resources.output_dir",
    "modules": "environment.modules",
    "venv": "environment.venv",
    "conda_env": "environment.conda_env",
    "container": "environment.container.image",
    "container_runtime": "environment.container.runtime",
    "binds": "environment.container.binds",
    "variables": "environment.variables",
    "setup": "environment.setup",
    "launcher": "launcher.kind",
    "port": "launcher.port",
    "placement": "launcher.placement",
    "doctor": "launcher.doctor",
    "doctor_args": "launcher.doctor_args",
    "python": "program.python",
    "module": "program.module",
    "script": "program.script",
    "command": "program.command",
    "args": "program.args",
    "scheduler": "scheduler.name",
    "host": "scheduler.host",
    "remote_dir": "scheduler.remote_dir",
    "directives": "scheduler.directives",
    "after": "scheduler.after",
    "requeue": "requeue.enabled",
    "max_requeues": "requeue.max",
    "signal_lead": "requeue.lead",
}


class SpecError(ValueError):
    """A job spec the user can fix; ``str(err)`` is one line naming the field and the value."""


#: a field's value once checked (:func:`hpcbench.jobs.spec_values.check_value`): a count, or
#: seconds, or megabytes; a flag; a line or a text; a list of them; an environment table; or unset
SpecValue = int | bool | str | list[str] | dict[str, str] | None


class FieldKind(TypedDict):
    """A spec field's metadata: the ``kind`` of value it takes (how it is checked, by
    :mod:`.spec_values`) and what that kind reads besides."""

    kind: str  # "posint", "line", "table", "own", "internal"...
    key: NotRequired[str]  # its key in the file, where not the field's name
    required: NotRequired[bool]
    cls: NotRequired[type]  # a table's class
    max: NotRequired[int]  # the largest count
    max_len: NotRequired[int]  # the longest text, in characters
    noopt: NotRequired[bool]  # a text that must not start with '-'
    choices: NotRequired[tuple[str, ...]]


def _kind(kind: str, **extra: Any) -> FieldKind:
    return {"kind": kind, **extra}  # type: ignore[typeddict-item]


@dataclass(frozen=True)
class OwnOption:
    """A job spec field that one batch system or one launcher alone reads, declared by its class
    (``options``): the spec's loader, the cluster profiles and the CLI's flags take it from
    there, and its value sits in the ``own`` dict of its table (read with ``option(spec, key)``
    of the class that declares it)."""

    table: str  # the spec's table it belongs to: "scheduler" or "launcher"
    key: str  # its name in that table (and in load_spec's keywords when ``flag_help`` is set)
    kind: str  # a field kind, as a dataclass field's metadata says: "line", "choice"...
    default: SpecValue = None
    choices: tuple[str, ...] = ()
    profile_key: str | None = None  # the cluster profiles' key that fills it
    flag_help: str | None = None  # a CLI flag --KEY with this help, when it has one
    metavar: str | None = None

    @property
    def metadata(self) -> FieldKind:
        """The field metadata its values are checked by."""
        return _kind(self.kind, **({"choices": self.choices} if self.choices else {}))

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.key}"


def own_value(options: tuple[OwnOption, ...], spec: JobSpec, key: str) -> SpecValue:
    """The value in ``spec`` of the option ``key`` among ``options`` (its default if unset)."""
    declared = next(o for o in options if o.key == key)
    return getattr(spec, declared.table).own.get(key, declared.default)


@dataclass
class Resources:
    """What the job asks the scheduler for. Counts are per node unless the name says otherwise."""

    nodes: int = field(default=1, metadata=_kind("posint", max=MAX_COUNTS["nodes"]))
    gpus_per_node: int = field(
        default=0, metadata=_kind("nonnegint", max=MAX_COUNTS["gpus_per_node"])
    )
    tasks_per_node: int | None = field(
        default=None, metadata=_kind("posint", max=MAX_COUNTS["tasks_per_node"])
    )
    cpus_per_task: int = field(default=1, metadata=_kind("posint", max=MAX_COUNTS["cpus_per_task"]))
    memory_mb: int | None = field(default=None, metadata=_kind("memory", key="memory"))
    time_s: int = field(default=3600, metadata=_kind("time", key="time"))
    partition: str | None = field(default=None, metadata=_kind("line"))
    account: str | None = field(default=None, metadata=_kind("line"))
    qos: str | None = field(default=None, metadata=_kind("line"))
    constraint: str | None = field(default=None, metadata=_kind("line"))
    exclusive: bool = field(default=False, metadata=_kind("bool"))
    job_name: str = field(default="hpcbench", metadata=_kind("line", max_len=MAX_NAME_CHARS))
    output_dir: str = field(default="runs", metadata=_kind("outdir"))

    @property
    def ranks_per_node(self) -> int:
        """Processes per node: tasks_per_node if given, else one per GPU, else one."""
        return self.tasks_per_node or self.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def file_name(self) -> str:
        """The job name reduced to characters safe in a file name (for log and run paths)."""
        return _UNSAFE_FILENAME.sub("_", self.job_name).strip("._") or "job"

    @property
    def letter_first_name(self) -> str:
        """``file_name`` starting with a letter, as PBS requires of job names."""
        return self.file_name if self.file_name[0].isalpha() else f"j{self.file_name}"


@dataclass
class Container:
    """The image every rank runs in, and the runtime that runs it (Apptainer, Singularity,
    enroot through pyxis, enroot, podman-hpc, Charliecloud)."""

    image: str = field(default="", metadata=_kind("path", required=True))
    runtime: str = field(default="apptainer", metadata=_kind("container_runtime"))
    binds: list[str] = field(default_factory=list, metadata=_kind("pathlist"))
    options: list[str] = field(default_factory=list, metadata=_kind("linelist"))


@dataclass
class Environment:
    """How the job's shell is prepared before launch."""

    modules: list[str] = field(default_factory=list, metadata=_kind("linelist", noopt=True))
    venv: str | None = field(default=None, metadata=_kind("path"))
    conda_env: str | None = field(default=None, metadata=_kind("path"))
    container: Container | None = field(default=None, metadata=_kind("table", cls=Container))
    variables: dict[str, str] = field(default_factory=dict, metadata=_kind("envdict"))
    # Shell lines run as written, before launch: the one place where the spec holds code on purpose.
    setup: list[str] = field(default_factory=list, metadata=_kind("textlist"))


@dataclass
class Launcher:
    """How ranks are started: torchrun (one agent per node), mpiexec or srun (one task per rank)."""

    kind: str = field(default="torchrun", metadata=_kind("launcher"))
    port: int | None = field(default=None, metadata=_kind("port"))
    # the options one launcher alone reads (its class's ``options``), by key
    own: dict[str, SpecValue] = field(default_factory=dict, metadata=_kind("own"))
    args: list[str] = field(default_factory=list, metadata=_kind("linelist"))
    # where each rank runs: "auto" (its own share of the node's cores, near its GPU), "none", or
    # one CPU list per rank of a node ("0-3;4-7")
    placement: str = field(default="auto", metadata=_kind("placement"))
    # hpcbench's doctor runs through the same launcher, in the same allocation, before the program
    # (submit --preflight), and the job stops with its reason when the allocation is not healthy
    doctor: bool = field(default=False, metadata=_kind("bool"))
    # the doctor's own options for that preflight (["--steps", "launch,communication"])
    doctor_args: list[str] = field(default_factory=list, metadata=_kind("textlist"))


@dataclass
class Program:
    """What every rank runs: ``python -m MODULE``, ``python SCRIPT`` or a whole COMMAND, plus args."""

    python: str = field(default="python", metadata=_kind("path"))
    module: str | None = field(default=None, metadata=_kind("module"))
    script: str | None = field(default=None, metadata=_kind("path"))
    command: list[str] | None = field(default=None, metadata=_kind("textlist"))
    # The trainer's options as a TOML file, passed as --config (flags in args override it).
    config: str | None = field(default=None, metadata=_kind("path"))
    args: list[str] = field(default_factory=list, metadata=_kind("textlist"))

    def module_run(self) -> str:
        """The module ``python -m`` runs: the given one, else hpcbench's trainer; '' for a
        script or a command."""
        if self.command or self.script:
            return ""
        return self.module or DEFAULT_PROGRAM_MODULE

    def argv(self) -> list[str]:
        """The program's command line (without any launcher in front)."""
        args = ["--config", self.config, *self.args] if self.config else self.args
        if self.command:
            return [*self.command, *args]
        if self.script:
            return [self.python, self.script, *args]
        return [self.python, "-m", self.module or DEFAULT_PROGRAM_MODULE, *args]


@dataclass
class SchedulerOptions:
    """Which scheduler, and the few options that only one scheduler understands."""

    # "auto" or a scheduler's name; the names are the registry's (:mod:`.schedulers`), checked
    # when the spec is loaded
    name: str = field(default="auto", metadata=_kind("scheduler"))
    directives: list[str] = field(default_factory=list, metadata=_kind("linelist"))
    # the options one scheduler alone reads (its class's ``options``), by key
    own: dict[str, SpecValue] = field(default_factory=dict, metadata=_kind("own"))
    # Jobs that must end successfully before this one starts (SLURM --dependency=afterok, PBS
    # depend=afterok, LSF done(); Grid Engine's -hold_jid waits for them to end at all).
    after: list[str] = field(default_factory=list, metadata=_kind("jobids"))
    # a login node whose scheduler is used over SSH from this machine (user@host or an alias of
    # ~/.ssh/config), and the working directory there that mirrors this one (relative to the
    # remote home unless absolute; default hpcbench/<this directory's name>)
    host: str | None = field(default=None, metadata=_kind("sshhost"))
    remote_dir: str | None = field(default=None, metadata=_kind("line"))


STOP_SIGNALS = ("USR2", "TERM")  # never USR1: NCCL installs its own handler for it
# how a job is requeued: "auto" (the scheduler's own way where it has one), "resubmit" (a new
# job continues the old one), or a way a scheduler declares (its class's ``requeue_methods``)
REQUEUE_METHODS = ("auto", "resubmit")


@dataclass
class Requeue:
    """Surviving time limits and preemption: the scheduler signals the job ``lead`` before its
    time limit, the ranks checkpoint and stop, and the job is requeued (at most ``max`` times)
    and resumes from the checkpoint."""

    enabled: bool | None = field(default=None, metadata=_kind("bool"))
    signal: str = field(default="USR2", metadata=_kind("choice", choices=STOP_SIGNALS))
    lead_s: int = field(default=300, metadata=_kind("time", key="lead"))
    max: int = field(default=3, metadata=_kind("nonnegint", max=1000))
    method: str = field(default="auto", metadata=_kind("requeue_method"))

    def active(self, program: Program) -> bool:
        """On when set, else when the program is hpcbench's trainer (which checkpoints on the
        signal); another program would be killed by a signal it does not expect."""
        if self.enabled is not None:
            return self.enabled
        return program.module_run() == DEFAULT_PROGRAM_MODULE


@dataclass
class Array:
    """A job array: the same script run as tasks 1..``size``, at most ``max_parallel`` at once.
    Set by :mod:`hpcbench.sweep` (never read from a spec file): task ``k`` reads its trainer
    settings from ``<tasks_dir>/<k>.toml`` and the name of its run directory (under
    ``runs_dir``) from ``<tasks_dir>/<k>.run``, both written at submission; with ``task_args``,
    also its own program arguments from ``<tasks_dir>/<k>.args`` (each ended by a NUL byte),
    after the job's."""

    size: int
    tasks_dir: str
    runs_dir: str
    max_parallel: int | None = None
    task_args: bool = False


MAX_ARRAY_TASKS = 10_000


@dataclass
class JobSpec:
    """A whole job: resources, environment, launcher, program and scheduler options."""

    resources: Resources = field(default_factory=Resources, metadata=_kind("table", cls=Resources))
    environment: Environment = field(
        default_factory=Environment, metadata=_kind("table", cls=Environment)
    )
    launcher: Launcher = field(default_factory=Launcher, metadata=_kind("table", cls=Launcher))
    program: Program = field(default_factory=Program, metadata=_kind("table", cls=Program))
    scheduler: SchedulerOptions = field(
        default_factory=SchedulerOptions, metadata=_kind("table", cls=SchedulerOptions)
    )
    requeue: Requeue = field(default_factory=Requeue, metadata=_kind("table", cls=Requeue))
    source: str | None = field(default=None, metadata=_kind("internal"))
    array: Array | None = field(default=None, metadata=_kind("internal"))
