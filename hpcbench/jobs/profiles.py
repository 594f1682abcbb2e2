"""Cluster profiles: a cluster's settings written once, under every job spec.

A profile is a named table of a TOML file::

    [profiles.hydra]
    scheduler = "slurm"
    partition = "ampere_gpu"
    account = "my_project"
    modules = ["PyTorch/2.1.2-foss-2023a-CUDA-12.1.1"]
    variables = { NCCL_SOCKET_IFNAME = "ib0" }
    gpus_per_node = 2
    cores_per_node = 32          # what the nodes have (shown; profile init fills it in)
    launcher = "torchrun"
    requeue_method = "scontrol"
    sacct = true                 # whether SLURM accounting answers here
    carbon_intensity = 250       # gCO2e/kWh, pue, price_per_kwh, price_per_node_hour,
    pue = 1.2                    # price_per_gpu_hour, currency: the bench report's estimates

Two files hold profiles: the site's (``$HPCBENCH_SITE_CONFIG``, else
``/etc/hpcbench/profiles.toml``) and the user's (``$XDG_CONFIG_HOME/hpcbench/profiles.toml``,
else ``~/.config/hpcbench/profiles.toml``). One is chosen with ``--profile NAME`` or
``$HPCBENCH_PROFILE``; the value of a field comes from the first of: the command line's flags,
the job spec, the user's profile of that name, the site's, hpcbench's default
(:func:`hpcbench.jobs.spec_load.explain` says which for each field).

A profile is data, never code: it has no ``setup`` lines and no raw ``directives``, and each value
passes the checks and the quoting of the job spec field it fills. A malformed file is a one-line
:class:`~.spec.SpecError` naming the file and the key.

Yet a profile's ``venv``, ``modules`` and ``variables`` land in every script rendered with it, so
whoever can write a profiles file chooses what every job runs. As OpenSSH treats its config, a
profiles file must be a regular file owned by root or the reader and writable by no one else
(group or others); and a profile chosen from the user's file may not set the variables that
change how programs load (:data:`LOADER_VARIABLES`): a job spec's ``[environment] variables`` sets them for one job, in
plain sight, and the site's file (its administrators') may set them for everyone.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.jobs.spec import FIELD_KEYWORDS, SpecError
from hpcbench.jobs.spec_options import profile_notes, profile_spec_keys
from hpcbench.tomlfile import TomlFileError, parse_toml

PROFILE_VAR = "HPCBENCH_PROFILE"
SITE_VAR = "HPCBENCH_SITE_CONFIG"
SITE_FILE = Path("/etc/hpcbench/profiles.toml")
MAX_PROFILE_BYTES = 1 << 20
#: variables that change which code a program loads or what a shell runs first: refused from a
#: profile of the user's file (a job spec or the site's file may set them)
LOADER_VARIABLES = frozenset(
    {
        "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_PROFILE", "LD_DEBUG_OUTPUT",
        "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND", "PS4", "IFS", "PATH",
        "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT",
        "PERL5OPT", "PERL5LIB", "RUBYOPT", "NODE_OPTIONS", "LUA_INIT", "MODULEPATH",
    }
)  # fmt: skip

#: the job spec's keywords (:data:`~.spec.FIELD_KEYWORDS`) a profile may set: what one cluster
#: has in common for its jobs, not what one job runs or how large it is
PROFILE_KEYWORDS = (
    "scheduler", "host", "remote_dir", "partition", "account", "qos", "constraint",
    "gpus_per_node", "cpus_per_task", "memory", "time", "exclusive", "modules", "venv",
    "conda_env", "container", "container_runtime", "binds", "variables", "launcher", "placement",
)  # fmt: skip
#: a profile's keys -> the job spec field each fills (with the keys of the options that one
#: batch system or launcher declares: :func:`spec_keys`): those keywords' fields, and the
#: requeue method, which no keyword of a job names
SPEC_KEYS = {
    **{key: FIELD_KEYWORDS[key] for key in PROFILE_KEYWORDS},
    "requeue_method": "requeue.method",
}
#: keys a profile holds for the user and hpcbench's own commands, not for the job script:
#: key -> (what it says, kind)
INFO_KEYS = {
    "cores_per_node": ("CPU cores of one node", int),
    "description": ("what this profile is for", str),
    # the factors of the bench report's carbon and cost estimates (a matrix's [estimates] wins)
    "carbon_intensity": ("grid carbon intensity, gCO2e per kWh", float),
    "pue": ("the data centre's power usage effectiveness (1 or more)", float),
    "price_per_kwh": ("price of one kWh of energy", float),
    "price_per_node_hour": ("price of one node for one hour", float),
    "price_per_gpu_hour": ("price of one GPU for one hour", float),
    "currency": ("the currency of the prices (e.g. EUR)", str),
}


def spec_keys() -> dict[str, str]:
    """Every key of a profile that fills a job spec field -> that field."""
    return {**SPEC_KEYS, **profile_spec_keys()}


def info_keys() -> dict[str, tuple[str, type]]:
    """Every profile-only key -> (what it says, its type): :data:`INFO_KEYS` and the facts
    the batch systems declare (:func:`~.spec_options.profile_notes`)."""
    return {**INFO_KEYS, **profile_notes()}


#: the bounds of the estimate factors (low, high)
FACTOR_BOUNDS = {
    "carbon_intensity": (0.0, 5000.0),
    "pue": (1.0, 10.0),
    "price_per_kwh": (0.0, 1e6),
    "price_per_node_hour": (0.0, 1e6),
    "price_per_gpu_hour": (0.0, 1e6),
}


def check_factor(where: str, key: str, value: Any) -> Any:
    """One estimate factor checked (a number within its bounds; ``currency`` a short word);
    :class:`SpecError` naming ``where`` otherwise."""
    if key == "currency":
        if not isinstance(value, str) or not re.fullmatch(r"[^\x00-\x1f]{1,12}", value):
            raise SpecError(f"{where}: expected a currency of 1 to 12 characters, got {value!r}")
        return value
    low, high = FACTOR_BOUNDS[key]
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise SpecError(f"{where}: expected a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


@dataclass
class Layer:
    """One file's table of the chosen profile."""

    label: str  # "user profile hydra (/home/me/.config/hpcbench/profiles.toml)"
    path: Path
    values: dict[str, Any]


@dataclass
class Profile:
    """The chosen profile: its layers, the site's first."""

    name: str
    layers: list[Layer] = field(default_factory=list)

    def spec_table(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The profile as job spec tables (later layers over earlier), and for each dotted
        field the label of the layer its value came from."""
        table: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for layer in self.layers:
            for key, value in layer.values.items():
                dotted = spec_keys().get(key)
                if dotted is None:
                    continue
                *parents, last = dotted.split(".")
                node = table
                for part in parents:
                    node = node.setdefault(part, {})
                if isinstance(value, dict) and isinstance(node.get(last), dict):
                    node[last] = {**node[last], **value}
                else:
                    node[last] = value
                origin[dotted] = f"{layer.label}: {key}"
        return table, origin

    def info(self) -> dict[str, tuple[Any, str]]:
        """The profile-only keys: key -> (value, label of its layer)."""
        found: dict[str, tuple[Any, str]] = {}
        for layer in self.layers:
            for key, value in layer.values.items():
                if key in info_keys():
                    found[key] = (value, layer.label)
        return found


def site_file() -> Path:
    return Path(os.environ.get(SITE_VAR) or SITE_FILE)


def user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "hpcbench" / "profiles.toml"


def _read_trusted(path: Path) -> bytes | None:
    """The bytes of a profiles file we may trust (None when there is none): a regular file,
    owned by root or the reader, writable by no one else, of at most MAX_PROFILE_BYTES."""
    from hpcbench.files import NotRegularFile, open_regular

    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise SpecError(
            f"{path}: not a regular file (a directory, a FIFO or a device); expected a TOML "
            "file of profiles"
        ) from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_uid not in (0, os.geteuid()):
            raise SpecError(
                f"{path}: owned by uid {st.st_uid}, neither root nor you: refused, as its owner "
                "chooses what every job runs"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SpecError(
                f"{path}: writable by others (mode {stat.S_IMODE(st.st_mode):o}): refused, as "
                f"anyone who can write it chooses what every job runs; chmod go-w {path}"
            )
        if st.st_size > MAX_PROFILE_BYTES:
            raise SpecError(f"{path}: larger than {MAX_PROFILE_BYTES} bytes; not a profiles file")
        raw = fh.read(MAX_PROFILE_BYTES + 1)
    if len(raw) > MAX_PROFILE_BYTES:
        raise SpecError(f"{path}: larger than {MAX_PROFILE_BYTES} bytes; not a profiles file")
    return raw


def read_profiles(path: Path) -> dict[str, dict[str, Any]]:
    """The profiles of one file (name -> table), each key checked for its kind; {} when the
    file does not exist."""
    raw = _read_trusted(path)
    if raw is None:
        return {}
    try:
        data = parse_toml(raw.decode("utf-8-sig"), str(path))
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except TomlFileError as err:
        raise SpecError(str(err)) from None
    for key in data:
        if key != "profiles":
            raise SpecError(f"{path}: {key}: unknown key (profiles are [profiles.NAME] tables)")
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise SpecError(f"{path}: profiles: expected tables [profiles.NAME]")
    for name, table in profiles.items():
        if not isinstance(table, dict):
            raise SpecError(f"{path}: profiles.{name}: expected a table of settings")
        for key, value in table.items():
            _check_key(path, name, key, value)
    return profiles


def _check_user_variables(path: Path, name: str, variables: dict[str, Any]) -> None:
    for var in variables:
        if var in LOADER_VARIABLES:
            raise SpecError(
                f"{path}: profiles.{name}.variables.{var}: changes how programs load, so it is "
                "not taken from a user's profile; set it in a job spec's [environment] variables "
                "(for that job, in plain sight), or ask your site to put it in its profile"
            )


def _check_key(path: Path, name: str, key: str, value: Any) -> None:
    where = f"{path}: profiles.{name}.{key}"
    if key in ("setup", "directives"):
        raise SpecError(
            f"{where}: a profile holds data, not code or raw directives; put {key} in a job spec"
        )
    if key in FACTOR_BOUNDS or key == "currency":
        check_factor(where, key, value)
        return
    notes = info_keys()
    if key in notes:
        kind = notes[key][1]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SpecError(f"{where}: expected {kind.__name__}, got {value!r}")
        if kind is int and not 1 <= value <= 1_000_000:
            raise SpecError(f"{where}: expected a count from 1 to 1000000, got {value!r}")
        if kind is str and any(ord(c) < 32 for c in value):
            raise SpecError(f"{where}: must be one line without control characters")
        return
    if key not in spec_keys():
        known = [*spec_keys(), *notes]
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        raise SpecError(f"{where}: unknown key{hint}")


def chosen_name(name: str | None = None) -> str | None:
    """The profile asked for: ``name``, else ``$HPCBENCH_PROFILE``, else none."""
    return name or os.environ.get(PROFILE_VAR) or None


def load_profile(name: str | None = None) -> Profile | None:
    """The chosen profile from the site's file and the user's (None when none is chosen);
    a name neither file has is an error."""
    name = chosen_name(name)
    if name is None:
        return None
    profile = Profile(name)
    files = [("site", site_file()), ("user", user_file())]
    for kind, path in files:
        table = read_profiles(path).get(name)
        if table is not None and kind == "user" and isinstance(table.get("variables"), dict):
            _check_user_variables(path, name, table["variables"])  # the chosen profile's alone
        if table is not None:
            profile.layers.append(Layer(f"{kind} profile {name} ({path})", path, table))
    if not profile.layers:
        shown = " or ".join(str(p) for _, p in files)
        known = sorted({n for _, p in files for n in read_profiles(p)})
        more = f" (profiles there: {', '.join(known)})" if known else ""
        raise SpecError(f"profile {name!r}: not in {shown}{more}")
    return profile


def profile_names() -> list[tuple[str, str]]:
    """Every profile of the site's and the user's file: (name, file)."""
    return [
        (name, str(path)) for path in (site_file(), user_file()) for name in read_profiles(path)
    ]


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def profile_text(name: str, values: dict[str, Any], notes: list[str], said_by: str) -> str:
    """A ``[profiles.NAME]`` table holding ``values``, with ``notes`` as comments above it."""
    from hpcbench.train.config_file import toml_value

    lines = ["", f"# written by hpcbench profile init from what {said_by} said; edit freely"]
    lines += [f"# {note}" for note in notes]
    lines.append(f"[profiles.{toml_value(name) if not _BARE.fullmatch(name) else name}]")
    lines += [f"{key} = {toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def add_profile(path: Path, name: str, text: str) -> None:
    """Add a profile's table at the end of ``path`` (created if missing), through a temporary
    file and a rename; a profile of that name already there is left alone and refused."""
    from hpcbench.atomic import write_atomically

    path = path.resolve()  # a profiles file that is a link (a dotfiles manager's) stays one
    if name in read_profiles(path):
        raise SpecError(
            f"{path}: profile {name!r} exists already; edit it there, or choose a new name"
        )
    try:
        old = path.read_text(encoding="utf-8") if path.exists() else ""
    except OSError as err:
        raise SpecError(f"{path}: cannot read it ({err.strerror})") from None
    joined = old + ("" if not old or old.endswith("\n") else "\n") + text
    parse_toml(joined, str(path))  # what is written must read back (built from checked values)
    try:
        write_atomically(path, joined, 0o600)
    except OSError as err:
        raise SpecError(f"{path}: cannot write it ({err.strerror})") from None
