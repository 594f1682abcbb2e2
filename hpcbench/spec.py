"""The job spec: one typed description of a job, loaded from TOML, overridden by CLI flags.

A spec has five tables -- ``[resources]``, ``[environment]`` (with ``[environment.container]``),
``[launcher]``, ``[program]`` and ``[scheduler]`` -- described field by field in docs/job-spec.md.
Validation is strict: an unknown key (with a did-you-mean), a wrong type, a non-positive count or a
malformed time limit raises :class:`SpecError` with a one-line message naming the field and value.

No torch, no third-party imports: this module runs on login nodes.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.schedulers import scheduler_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

SCHEDULERS = ("auto", *scheduler_names())
LAUNCHERS = ("torchrun", "mpiexec", "srun")
CONTAINER_RUNTIMES = ("apptainer", "singularity")
PBS_RESOURCE_STYLES = ("select", "nodes")
DEFAULT_PROGRAM_MODULE = "hpcbench.train"
_PROGRAM_KINDS = frozenset({"module", "script", "command"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A leading ~ or ~user, expanded for path fields (a user name as POSIX allows it portably).
_TILDE = re.compile(r"^~([A-Za-z_][A-Za-z0-9_.-]*)?(?=/|$)")
# Upper bounds. A file name component is at most 255 bytes, and the job name becomes part of log
# file names; one argument of a command line is at most 128 KiB on Linux (MAX_ARG_STRLEN).
MAX_NAME_CHARS = 128
MAX_LINE_CHARS = 4096
MAX_TEXT_CHARS = 128 * 1024 - 1
MAX_COUNTS = {"nodes": 100_000, "gpus_per_node": 64, "tasks_per_node": 1024, "cpus_per_task": 8192}
_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"(?:local-)?[0-9]{1,18}(?:[._][A-Za-z0-9_.-]{1,200})?\Z")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?$", re.IGNORECASE)
_MEMORY_FACTOR_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}
# The largest limits every batch system takes: a signed 32-bit count of seconds (about 68 years)
# and of megabytes per node (2 PiB, beyond any node); larger values are typos.
MAX_TIME_S = 2**31 - 1
MAX_MEMORY_MB = 2**31 - 1


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
    "binds": "environment.container.binds",
    "variables": "environment.variables",
    "setup": "environment.setup",
    "launcher": "launcher.kind",
    "port": "launcher.port",
    "python": "program.python",
    "module": "program.module",
    "script": "program.script",
    "command": "program.command",
    "args": "program.args",
    "scheduler": "scheduler.name",
    "directives": "scheduler.directives",
    "after": "scheduler.after",
    "pbs_resources": "scheduler.pbs_resources",
    "requeue": "requeue.enabled",
    "max_requeues": "requeue.max",
    "signal_lead": "requeue.lead",
}


class SpecError(ValueError):
    """A job spec the user can fix; ``str(err)`` is one line naming the field and the value."""


def _kind(kind: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, **extra}


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
    """An Apptainer/Singularity image every rank runs in."""

    image: str = field(default="", metadata=_kind("path", required=True))
    runtime: str = field(default="apptainer", metadata=_kind("choice", choices=CONTAINER_RUNTIMES))
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

    kind: str = field(default="torchrun", metadata=_kind("choice", choices=LAUNCHERS))
    port: int | None = field(default=None, metadata=_kind("port"))
    srun_mpi: str | None = field(default=None, metadata=_kind("line"))
    args: list[str] = field(default_factory=list, metadata=_kind("linelist"))


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

    name: str = field(default="auto", metadata=_kind("choice", choices=SCHEDULERS))
    directives: list[str] = field(default_factory=list, metadata=_kind("linelist"))
    pbs_resources: str = field(
        default="select", metadata=_kind("choice", choices=PBS_RESOURCE_STYLES)
    )
    sge_pe: str | None = field(default=None, metadata=_kind("line"))
    # Jobs that must end successfully before this one starts (SLURM --dependency=afterok, PBS
    # depend=afterok, LSF done(); Grid Engine's -hold_jid waits for them to end at all).
    after: list[str] = field(default_factory=list, metadata=_kind("jobids"))


STOP_SIGNALS = ("USR2", "TERM")  # never USR1: NCCL installs its own handler for it
REQUEUE_METHODS = ("auto", "scontrol", "resubmit")


@dataclass
class Requeue:
    """Surviving time limits and preemption: the scheduler signals the job ``lead`` before its
    time limit, the ranks checkpoint and stop, and the job is requeued (at most ``max`` times)
    and resumes from the checkpoint."""

    enabled: bool | None = field(default=None, metadata=_kind("bool"))
    signal: str = field(default="USR2", metadata=_kind("choice", choices=STOP_SIGNALS))
    lead_s: int = field(default=300, metadata=_kind("time", key="lead"))
    max: int = field(default=3, metadata=_kind("nonnegint", max=1000))
    method: str = field(default="auto", metadata=_kind("choice", choices=REQUEUE_METHODS))

    def active(self, program: Program) -> bool:
        """On when set, else when the program is hpcbench's trainer (which checkpoints on the
        signal); another program would be killed by a signal it does not expect."""
        if self.enabled is not None:
            return self.enabled
        return (
            not program.command
            and not program.script
            and ((program.module or DEFAULT_PROGRAM_MODULE) == DEFAULT_PROGRAM_MODULE)
        )


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


# ----------------------------------------------------------------------------------- parsing values


def parse_time(value: Any) -> int:
    """A SLURM-style time limit to seconds.

    Accepts ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` or an integer
    number of minutes (as sbatch does).
    """
    if isinstance(value, bool):
        raise ValueError("expected a time limit like '01:30:00' or '2-00:00:00'")
    if isinstance(value, int):
        seconds = value * 60
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        days = 0
        with_days = "-" in text
        if with_days:
            day_text, text = text.split("-", 1)
            if not day_text.isdigit():
                raise ValueError("days before '-' must be a whole number")
            days = int(day_text)
        parts = text.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            raise ValueError("expected MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
        nums = [int(p) for p in parts]
        if with_days:
            h, m, s = (nums + [0, 0])[:3]  # D-HH, D-HH:MM, D-HH:MM:SS
        elif len(nums) == 3:
            h, m, s = nums  # HH:MM:SS
        else:
            h, m, s = 0, nums[0], (nums[1] if len(nums) == 2 else 0)  # MM or MM:SS
        if s >= 60 or (m >= 60 and (with_days or len(nums) == 3)):
            raise ValueError("minutes and seconds must be below 60")
        if with_days and h >= 24:
            raise ValueError("hours after 'D-' must be below 24")
        seconds = ((days * 24 + h) * 60 + m) * 60 + s
    else:
        raise ValueError("expected a time limit like '01:30:00' or '2-00:00:00'")
    if seconds <= 0:
        raise ValueError("a time limit must be positive")
    if seconds > MAX_TIME_S:
        raise ValueError(
            f"at most {format_time_slurm(MAX_TIME_S)} (about 68 years), the longest limit "
            "every batch system takes"
        )
    return seconds


def format_time_hms(seconds: int) -> str:
    """Seconds as ``HH:MM:SS`` (hours may exceed 24), the form PBS and Grid Engine take."""
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def format_time_slurm(seconds: int) -> str:
    """Seconds as SLURM's ``D-HH:MM:SS`` (or ``HH:MM:SS`` under a day)."""
    days, rest = divmod(seconds, 86400)
    hms = format_time_hms(rest)
    return f"{days}-{hms}" if days else hms


def parse_memory(value: Any) -> int:
    """A memory size to whole megabytes: ``32G``, ``500M``, ``1.5T``, ``64GB`` or an integer (MB)."""
    if isinstance(value, bool):
        raise ValueError("expected a memory size like '32G' or '500M'")
    if isinstance(value, int):
        mb = value
    elif isinstance(value, str) and len(value) <= 40 and (m := _MEMORY.match(value.strip())):
        mb = float(m.group(1)) * _MEMORY_FACTOR_MB[m.group(2).upper()]
    else:
        raise ValueError("expected a memory size like '32G' or '500M'")
    if mb > MAX_MEMORY_MB:
        raise ValueError(f"at most {format_memory(MAX_MEMORY_MB)} per node")
    mb = int(round(mb))
    if mb <= 0:
        raise ValueError("a memory size must be positive")
    return mb


def format_memory(mb: int, unit_suffix: str = "") -> str:
    """Megabytes as the largest exact unit: 32768 -> '32G', 1500 -> '1500M' (+ suffix, e.g. 'b')."""
    if mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T{unit_suffix}"
    if mb % 1024 == 0:
        return f"{mb // 1024}G{unit_suffix}"
    return f"{mb}M{unit_suffix}"


# ----------------------------------------------------------------------------------- validation


def _check_string(kind: str, meta: dict[str, Any], value: str) -> str:
    """Check one string of a text, line, path or module field; raise ValueError with the problem."""
    if "\x00" in value:
        raise ValueError("must not hold a NUL byte (no shell can pass one on)")
    if not _utf8(value):
        raise ValueError(f"is not UTF-8 text ({ascii(value)}); a job script is written as UTF-8")
    single_line = kind in ("line", "linelist", "path", "pathlist", "outdir", "module")
    if single_line and _CONTROL.search(value):
        raise ValueError("must be a single line without control characters")
    limit = meta.get("max_len", MAX_LINE_CHARS if single_line else MAX_TEXT_CHARS)
    if len(value) > limit:
        raise ValueError(f"is {len(value)} characters long, the limit is {limit}")
    if kind == "module" and not _MODULE_NAME.match(value):
        raise ValueError("expected a dotted Python module name like 'hpcbench.train'")
    if (meta.get("noopt") or kind in ("path", "pathlist")) and value.startswith("-"):
        raise ValueError(
            f"must not start with '-' (it would be read as an option); write ./{value}"
        )
    if kind in ("path", "pathlist", "outdir") and value.startswith("~") and not _TILDE.match(value):
        raise ValueError("a leading ~ must be followed by / or a user name (~/x, ~alice/x)")
    if kind == "outdir":
        return _check_output_dir(value)
    return value


def _check_output_dir(value: str) -> str:
    """``output_dir`` reaches scheduler path patterns, so characters they interpret are refused.

    SLURM reads a ``\\`` anywhere in ``--output`` as "no substitution", Grid Engine expands
    ``$HOME``, ``$JOB_ID``… in ``-o``/``-e``, and PBS and Grid Engine read ``HOST:PATH``: logs
    would land elsewhere than hpcbench looks for them. A leading ``~`` is expanded here, on the
    submitting machine, which is also where the logs are read.
    """
    for char, name, why in (
        ("\\", "a backslash", "SLURM reads it as 'no substitution'"),
        ("$", "'$'", "Grid Engine expands it"),
        (":", "':'", "PBS and Grid Engine read HOST:PATH"),
    ):
        if char in value:
            raise ValueError(f"must not hold {name} ({why} in log paths); give the path itself")
    if value.startswith("~"):
        expanded = os.path.expanduser(value)
        if expanded.startswith("~"):
            raise ValueError(f"no such user for {value.split('/', 1)[0]!r}")
        return expanded
    return value


def _check_value(kind: str, meta: dict[str, Any], value: Any, from_cli: bool) -> Any:
    """Convert and check one value; raise ValueError with the problem (no field name)."""
    if kind in ("posint", "nonnegint", "port"):
        if from_cli and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueError("expected a whole number") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("expected a whole number")
        if kind == "posint" and value < 1:
            raise ValueError("must be a positive count (1 or more)")
        if kind == "nonnegint" and value < 0:
            raise ValueError("must be 0 or more")
        if kind == "port" and not 1024 <= value <= 65535:
            raise ValueError("a port must be between 1024 and 65535")
        if "max" in meta and value > meta["max"]:
            raise ValueError(f"must be at most {meta['max']}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value
    if kind == "time":
        return parse_time(value)
    if kind == "memory":
        return parse_memory(value)
    if kind in ("text", "line", "path", "outdir", "module"):
        if not isinstance(value, str):
            raise ValueError("expected a string")
        if not value:
            raise ValueError("must not be empty")
        return _check_string(kind, meta, value)
    if kind == "jobids":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError('expected a list of job ids, e.g. ["12345"]')
        for entry in value:
            if not _JOB_ID.match(entry):
                raise ValueError(
                    f"{entry!r} is not a job id (digits, as 12345, 12345_7 or 12345.server, "
                    "or local-N)"
                )
        return list(value)
    if kind in ("textlist", "linelist", "pathlist"):
        if isinstance(value, str):
            raise ValueError('expected a list of strings, e.g. ["a", "b"]')
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of strings")
        if len(value) > 4096:
            raise ValueError(f"holds {len(value)} entries, the limit is 4096")
        checked = []
        for i, entry in enumerate(value):
            try:
                checked.append(_check_string(kind, meta, entry))
            except ValueError as err:
                raise ValueError(f"entry {i + 1} {err}") from None
        return checked
    if kind == "envdict":
        if not isinstance(value, dict):
            raise ValueError('expected a table of NAME = "value"')
        for name, val in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if not isinstance(val, (str, int, float)) or isinstance(val, bool):
                raise ValueError(f"{name}: expected a string value")
            try:
                _check_string("text", meta, str(val))
            except ValueError as err:
                raise ValueError(f"{name} {err}") from None
        return {k: str(v) for k, v in value.items()}
    if kind == "choice":
        choices = meta["choices"]
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value
    raise AssertionError(f"unknown field kind {kind}")  # a bug, not user input


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _build(cls: type, table: Any, path: str, origin: dict[str, str], where: str) -> Any:
    """Build dataclass ``cls`` from a TOML table, checking every key and value."""
    label = path or "spec"
    if not isinstance(table, dict):
        raise SpecError(f"{where}{label}: expected a table, got {table!r}")
    fields = {_key(f): f for f in dataclasses.fields(cls) if f.metadata.get("kind") != "internal"}
    kwargs: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        dotted = f"{path}.{key}" if path else key
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(fields)})"
            raise SpecError(f"{where}{dotted}: unknown key{hint}")
        f = fields[key]
        kind = f.metadata["kind"]
        if kind == "table":
            kwargs[f.name] = _build(f.metadata["cls"], value, dotted, origin, where)
            continue
        try:
            kwargs[f.name] = _check_value(kind, f.metadata, value, from_cli=dotted in origin)
        except ValueError as err:
            name = f"{origin[dotted]} ({dotted})" if dotted in origin else f"{where}{dotted}"
            raise SpecError(f"{name}: {err}, got {value!r}") from None
    for key, f in fields.items():
        if f.metadata.get("required") and key not in kwargs:
            raise SpecError(f"{where}{path}.{key}: required")
    return cls(**kwargs)


def _merge(base: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = base
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise SpecError(f"{'.'.join(parts[:-1])}: expected a table")
    parts_key = parts[-1]
    if isinstance(value, list) and isinstance(node.get(parts_key), list):
        node[parts_key] = [*node[parts_key], *value]  # repeatable flags add to the file's list
    elif isinstance(value, dict) and isinstance(node.get(parts_key), dict):
        node[parts_key] = {**node[parts_key], **value}
    else:
        node[parts_key] = value


def _utf8(text: str) -> bool:
    """Whether ``text`` is valid Unicode (command-line bytes that are not UTF-8 arrive as lone
    surrogates, which no UTF-8 file can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML spec file; a missing or malformed file is a one-line SpecError."""
    p = Path(path)
    if not _utf8(str(p)):
        raise SpecError(f"{ascii(str(p))}: the spec file's name is not UTF-8; rename it")
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SpecError(f"{p}: no such spec file") from None
    except IsADirectoryError:
        raise SpecError(f"{p}: is a directory, expected a TOML spec file") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{p}: not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise SpecError(f"{p}: not valid TOML: not UTF-8 text (byte {err.start})") from None
    except ValueError as err:  # tomllib's own int(): an integer of more than 4300 digits
        raise SpecError(f"{p}: not valid TOML: {err}") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid TOML: nested too deeply") from None
    except OSError as err:
        raise SpecError(f"{p}: cannot read the spec file: {err.strerror}") from None


def apply_smoke(merged: dict[str, Any], smoke: bool, where: str) -> dict[str, Any]:
    """The spec file's own ``[smoke]`` table (tables like the file's: ``resources``, ``program``,
    …) replaces the values it names when ``smoke`` is asked for (``--smoke``: the job's
    minutes-long form on a small or test cluster: a tiny model, the built-in data); its
    ``unset`` list names fields (``"resources.account"``) the smoke form leaves at their
    defaults. Without ``smoke`` it is set aside. It is checked either way, by the file's rules."""
    table = merged.pop("smoke", None)
    if table is None:
        if smoke:
            raise SpecError(f"{where}--smoke: this spec has no [smoke] table")
        return merged
    if not isinstance(table, dict):
        raise SpecError(f"{where}smoke: expected a table of the spec's tables")
    table = dict(table)
    unset = table.pop("unset", [])
    if not isinstance(unset, list) or not all(
        isinstance(u, str) and u.count(".") == 1 for u in unset
    ):
        raise SpecError(f'{where}smoke.unset: expected a list of fields like "resources.account"')
    for dotted in unset:  # a misspelt field would silently stay set in the smoke form
        section, key = dotted.replace("-", "_").split(".")
        tables = {
            _key(f): f for f in dataclasses.fields(JobSpec) if f.metadata.get("kind") == "table"
        }
        known = (
            {_key(f) for f in dataclasses.fields(tables[section].metadata["cls"])}
            if section in tables
            else set()
        )
        if key not in known:
            raise SpecError(f"{where}smoke.unset: {dotted!r} is not a field of the spec")

    def deep(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = deep(out[key], value)
            else:
                out[key] = value
        return out

    smoked = copy.deepcopy(merged)
    for dotted in unset:  # either spelling, of the field and of the file's key
        section, key = dotted.replace("-", "_").split(".")
        for name, values in smoked.items():
            if name.replace("-", "_") == section and isinstance(values, dict):
                for found in [k for k in values if k.replace("-", "_") == key]:
                    del values[found]
    smoked = deep(smoked, table)
    if not smoke:  # the smoke form is checked too, so that a broken one is found before use
        _build(JobSpec, copy.deepcopy(smoked), "", {}, f"{where}smoke: ")
        return merged
    return smoked


def build_spec(
    data: dict[str, Any] | None = None,
    overrides: dict[str, tuple[str, Any]] | None = None,
    source: str | None = None,
    smoke: bool = False,
) -> JobSpec:
    """Validate ``data`` (a parsed spec file) with ``overrides`` applied on top.

    ``overrides`` maps a dotted field (``"resources.nodes"``) to ``(origin, value)``, where origin
    is what the user typed (``"--nodes"``) so that errors name it. ``smoke``: the file's
    ``[smoke]`` form (:func:`apply_smoke`).
    """
    where0 = f"{source}: " if source else ""
    merged: dict[str, Any] = apply_smoke(copy.deepcopy(data or {}), smoke, where0)
    origin: dict[str, str] = {}
    # A program named on the command line replaces the file's program of another kind.
    chosen = {k for k in _PROGRAM_KINDS if f"program.{k}" in (overrides or {})}
    if chosen and isinstance(merged.get("program"), dict):
        for kind in _PROGRAM_KINDS - chosen:
            merged["program"].pop(kind, None)
    for dotted, (label, value) in (overrides or {}).items():
        _merge(merged, dotted, value)
        origin[dotted] = label
    where = f"{source}: " if source else ""
    spec = _build(JobSpec, merged, "", origin, where)
    spec.source = source
    _check_program(spec.program, merged.get("program", {}), where)
    return spec


def _check_program(program: Program, table: dict[str, Any], where: str) -> None:
    given = [k for k in ("module", "script", "command") if table.get(k) not in (None, [], "")]
    if len(given) > 1:
        raise SpecError(
            f"{where}program: set only one of module, script or command (got {', '.join(given)})"
        )
    if program.command == []:
        raise SpecError(f"{where}program.command: must not be empty")
    if not given:
        program.module = DEFAULT_PROGRAM_MODULE
    if program.config:
        _check_program_config(program, where)


def _check_program_config(program: Program, where: str) -> None:
    """The file must be there now: the job starts in the directory it is submitted from, where
    a relative path is read. The trainer's own file is checked as the trainer will read it."""
    path = Path(program.config or "").expanduser()
    if not path.is_file():
        raise SpecError(
            f"{where}program.config: no such file {program.config!r} (a relative path is read "
            "from the directory you submit from, where the job starts)"
        )
    if program.module == DEFAULT_PROGRAM_MODULE:
        from hpcbench.train.config import ConfigError, read_toml  # stdlib only: no torch here

        try:
            read_toml(str(path))
        except ConfigError as err:
            raise SpecError(f"{where}program.config: {err}") from None
        except (ValueError, RecursionError) as err:  # what tomllib raises besides its own error
            raise SpecError(
                f"{where}program.config: {program.config}: not valid TOML ({err})"
            ) from None


def load_spec(
    path: str | Path | None = None,
    overrides: dict[str, tuple[str, Any]] | None = None,
    smoke: bool = False,
) -> JobSpec:
    """Load a spec file (or start from the defaults) and apply CLI-style overrides; ``smoke``:
    its ``[smoke]`` form."""
    data = read_spec_file(path) if path is not None else {}
    return build_spec(data, overrides, source=str(path) if path is not None else None, smoke=smoke)
