"""The trainer's command line: one flag per option of :class:`~.config.TrainConfig`, ``--config``'s
file under the flags given (:func:`configure`), and a usage error printed once by rank 0."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from hpcbench.argparsing import Parser
from hpcbench.train.config import (
    GROUPS,
    OPTIONS,
    SECTION_OF,
    ConfigError,
    TrainConfig,
    flag,
    kind_of,
    shown,
)
from hpcbench.train.config_file import check_options, read_toml

#: the variable a sweep's job script sets to its task's settings file (``--settings``' default)
SETTINGS_VAR = "HPCBENCH_SETTINGS"


def _weights(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 1,4,4, got {text!r}"
        ) from None


CLI_TYPES: dict[type, Callable[[str], Any]] = {int: int, float: float, str: str, list: _weights}
METAVARS: dict[type, str] = {int: "N", float: "X", list: "W,W,…"}


def launch_rank() -> int:
    """This process's rank as the launcher set it (0 when started alone)."""
    from hpcbench.this_rank import detect_launch

    return detect_launch().rank


class _Parser(Parser):
    """Every rank parses the same options and fails alike: only rank 0 prints the usage error,
    so ``mpiexec -n 64`` shows it once; each rank exits 2."""

    def error(self, message: str) -> NoReturn:
        if launch_rank() != 0:
            self.exit(2)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """One flag per option; only the flags given land in the namespace (the defaults come from
    :class:`TrainConfig`, after ``--config``)."""
    p = _Parser(
        prog="python -m hpcbench.train",
        description="Train an image classifier with one process, PyTorch DDP or MPI (mpi4py), "
        "timing every phase. Rank, world size and device come from the launcher "
        "(torchrun, mpiexec, srun) or default to one process.",
        argument_default=argparse.SUPPRESS,
        # A job script is read once and runs for hours: "--output" must not silently mean
        # --output-dir (nor a benchmark's reserved flags be reached by a prefix): the Parser
        # takes no abbreviations.
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="read the options from this TOML file (top-level keys named as the flags without "
        "dashes); flags given here override it",
    )
    p.add_argument(
        "--settings",
        metavar="FILE",
        help="a sweep task's settings: a TOML file like --config's whose options override "
        "--config and the flags (default: $HPCBENCH_SETTINGS, which a sweep's job script sets)",
    )
    defaults = TrainConfig()
    groups = {name: p.add_argument_group(name) for name in GROUPS}
    exclusive: dict[str, Any] = {}
    for f in OPTIONS:
        meta = f.metadata
        group = groups[SECTION_OF[f.name]]
        if meta["exclusive"]:
            if meta["exclusive"] not in exclusive:
                exclusive[meta["exclusive"]] = group.add_mutually_exclusive_group()
            group = exclusive[meta["exclusive"]]
        default = shown(defaults.value(f.name))
        if meta["unset"] is not None:
            default += f", meaning {meta['unset']}"
        text = f"{meta['help']} (default: {default})".replace("%", "%%")
        kind = kind_of(f)
        if kind is bool:
            group.add_argument(flag(f), action=argparse.BooleanOptionalAction, help=text)
        else:
            group.add_argument(
                flag(f),
                type=CLI_TYPES[kind],
                choices=meta["choices"],
                metavar=(meta["metavar"] or METAVARS.get(kind))
                if meta["choices"] is None
                else None,
                help=text,
            )
    return p


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """The checked configuration: ``--config``'s file, then the flags given. A ConfigError not on
    rank 0 is marked as reported (rank 0, which read the same options, prints it)."""
    given = vars(build_parser().parse_args(argv))
    path = given.pop("config", None)
    settings = given.pop("settings", None) or os.environ.get(SETTINGS_VAR) or None
    try:
        return configure(given, path, settings)
    except ConfigError as err:
        if launch_rank() != 0:
            err.hpcbench_reported = True  # type: ignore[attr-defined]
        raise


def configure(
    given: Mapping[str, Any],
    path: str | None = None,
    settings: str | Mapping[str, Any] | None = None,
) -> TrainConfig:
    """The checked configuration from a file's options (if ``path``) overridden by ``given``
    (field name -> value), both overridden by a sweep task's ``settings`` file. A later layer's
    option also drops the earlier layers' other members of its exclusive group:
    ``--batch-size-per-rank`` on the command line replaces a file's global batch."""
    values: dict[str, Any] = {}
    names: dict[str, str] = {}  # options from a file are named by file and key in errors
    if path is not None:
        for key, (name, value) in read_toml(path).items():
            values[name], names[name] = value, f"{path}: {key}"
    _override(values, names, {name: (value, None) for name, value in given.items()})
    if isinstance(settings, Mapping):  # a table of options, as a --settings file holds
        found, where = check_options(dict(settings), "settings"), "setting"
        _override(values, names, {n: (v, f"{where} {k}") for k, (n, v) in found.items()})
    elif settings is not None:
        found = read_toml(settings, "--settings")
        _override(values, names, {n: (v, f"{settings}: {k}") for k, (n, v) in found.items()})
    config = TrainConfig(**values)
    config.check(names)
    return config


def _override(
    values: dict[str, Any], names: dict[str, str], layer: Mapping[str, tuple[Any, str | None]]
) -> None:
    """Put ``layer``'s options (field name -> (value, how errors name it)) over ``values``."""
    by_name = {f.name: f for f in OPTIONS}
    for name, (value, label) in layer.items():
        group = by_name[name].metadata["exclusive"]
        for other in OPTIONS:
            if group and other.metadata["exclusive"] == group:
                values.pop(other.name, None)
                names.pop(other.name, None)
        values[name] = value
        names.pop(name, None)
        if label is not None:
            names[name] = label


def given_problem(given: argparse.Namespace) -> str | None:
    """The first option given on the command line that breaks its own rule (``--model
    resnet19``: no such model), as the trainer would refuse it; checked at submission, where
    ``--config``'s file and the run's environment are not read."""
    for f in OPTIONS:
        rule = f.metadata["rule"]
        value = getattr(given, f.name, None)
        if rule is not None and value is not None and (problem := rule(value)) is not None:
            return f"{flag(f)} {problem}"
    return None
