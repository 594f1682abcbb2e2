"""The trainer's options as a tree, each declared once: a field of one branch (a dataclass per
``--help`` section), whose metadata holds its help text, choices and rule. :class:`TrainConfig`
holds the branches: ``config.data`` (the data and the model), ``config.parallelism`` (the
strategy, the device, precision; the options each strategy declares for itself,
:mod:`.strategy_options`), ``config.batch`` (the batch and the optimisation),
``config.checkpoints`` (checkpoints and stopping) and ``config.output``. From the fields come the
command line (:func:`build_parser`, whose ``--help`` prints every default from the field itself:
:mod:`.command_line`), the checks (:meth:`TrainConfig.check`, one line naming the flag) and the
TOML file of ``--config`` (:func:`~.config_file.read_toml`, :func:`~.config_file.to_toml`:
:mod:`.config_file`).

Flags and file keys stay flat: an option's flag is its name (``--bucket-mb``), whatever its
branch. A configuration file holds the options as top-level keys, named as the flags without
their dashes (``global-batch-size`` or ``global_batch_size``); flags given on the command line
override it.

Batch semantics are explicit: ``--global-batch-size G`` (unset: :data:`DEFAULT_GLOBAL_BATCH`, so
that the default run learns the built-in set in a few CPU minutes; the reference study's batch is in
jobs/reference-study/resnet34.toml) keeps the effective batch constant as ranks are added (each rank gets
G/W, or its ``--rank-weights`` share); ``--batch-size-per-rank B`` makes the global batch B×W instead.
"""

from __future__ import annotations

import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import Field, asdict, fields
from typing import Any

from hpcbench.train.option_fields import (
    DEFAULT_DATA,
    DEFAULT_GLOBAL_BATCH,
    ConfigError,
    parse_model,
)
from hpcbench.train.options_learning import BatchAndOptimisationOptions, DataAndModelOptions
from hpcbench.train.options_running import (
    STRATEGIES,
    CheckpointsAndStoppingOptions,
    OutputOptions,
    ParallelismOptions,
)
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

__all__ = [
    "BRANCHES",
    "DEFAULT_DATA",
    "DEFAULT_GLOBAL_BATCH",
    "GROUPS",
    "OPTIONS",
    "STRATEGIES",
    "ConfigError",
    "TrainConfig",
    "flag",
    "kind_of",
    "parse_model",
    "shown",
]

#: the branches of the tree: the attribute, its ``--help`` section's title, its dataclass
BRANCHES: tuple[tuple[str, str, type], ...] = (
    ("data", "data and model", DataAndModelOptions),
    ("parallelism", "parallelism", ParallelismOptions),
    ("batch", "batch and optimisation", BatchAndOptimisationOptions),
    ("checkpoints", "checkpoints and stopping", CheckpointsAndStoppingOptions),
    ("output", "output", OutputOptions),
)
#: the ``--help`` sections, in order
GROUPS = tuple(title for _, title, _ in BRANCHES)
#: each option's branch, by the option's name
BRANCH_OF: dict[str, str] = {f.name: name for name, _, cls in BRANCHES for f in fields(cls)}
#: each option's ``--help`` section, by the option's name
SECTION_OF: dict[str, str] = {f.name: title for _, title, cls in BRANCHES for f in fields(cls)}


class TrainConfig:
    """Every option of the trainer, as a tree of branches (``config.parallelism.bucket_mb``).

    Built from the options by name, flat as the flags are: ``TrainConfig(epochs=2,
    bucket_mb=50)``; :meth:`value` and :meth:`as_dict` read them by name. Reading an option
    directly off the configuration (``config.bucket_mb``) still works, with a
    :class:`DeprecationWarning`, for one release.
    """

    data: DataAndModelOptions
    parallelism: Any  # ParallelismOptions, assembled with the strategies' own options
    batch: BatchAndOptimisationOptions
    checkpoints: CheckpointsAndStoppingOptions
    output: OutputOptions

    def __init__(self, **options: Any) -> None:
        unknown = [name for name in options if name not in BRANCH_OF]
        if unknown:
            raise TypeError(f"TrainConfig got an unexpected keyword argument {unknown[0]!r}")
        for name, _, cls in BRANCHES:
            mine = {f.name: options[f.name] for f in fields(cls) if f.name in options}
            object.__setattr__(self, name, cls(**mine))

    def value(self, name: str) -> Any:
        """The option ``name``'s value, wherever it is in the tree."""
        return getattr(getattr(self, BRANCH_OF[name]), name)

    def as_dict(self) -> dict[str, Any]:
        """Every option by name, flat and in ``--help``'s order (metrics.json's ``config``)."""
        return {k: v for name, _, _ in BRANCHES for k, v in asdict(getattr(self, name)).items()}

    def __getattr__(self, name: str) -> Any:
        # only reached for what is not a branch: an option read the old flat way
        if name in BRANCH_OF:
            branch = BRANCH_OF[name]
            warnings.warn(
                f"TrainConfig.{name} is config.{branch}.{name} now; the flat name goes in the "
                "next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(self.__dict__[branch], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"set config.{BRANCH_OF.get(name, name)}.{name}, not config.{name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrainConfig) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return "TrainConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    @property
    def uses_per_rank_batch(self) -> bool:
        return self.batch.batch_size_per_rank is not None

    def check(self, names: Mapping[str, str] | None = None) -> None:
        """Raise :class:`ConfigError` for the first option out of its rules. ``names``: how to
        name an option in the message where not by its flag (a file and key)."""
        names = names or {}
        for f in OPTIONS:
            value = self.value(f.name)
            if value is None:
                continue
            choices, rule = f.metadata["choices"], f.metadata["rule"]
            problem = rule(value) if rule is not None else None
            if choices is not None and value not in choices:
                problem = f"must be one of {', '.join(choices)}"
            if problem is not None:
                raise ConfigError(f"{names.get(f.name, flag(f))} {problem}")
        batch, par = self.batch, self.parallelism
        for ok, message in (
            (
                batch.global_batch_size is None or batch.batch_size_per_rank is None,
                "give --global-batch-size or --batch-size-per-rank, not both",
            ),
            (
                batch.rank_weights is None or self.data.data_order == "global",
                "--rank-weights needs --data-order global",
            ),
            (
                not par.error_feedback or par.grad_compression != "none",
                "--error-feedback needs --grad-compression fp16 or bf16",
            ),
            (
                batch.rank_weights is None or not self.uses_per_rank_batch,
                "--rank-weights shares a --global-batch-size; drop --batch-size-per-rank",
            ),
            (
                par.compile == "off"
                or par.strategy not in STRATEGY_KINDS
                or STRATEGY_KINDS[par.strategy].compiles,
                f"--compile {par.compile} cannot compile torch.nn.DataParallel's per-step "
                "replicas (--strategy dp); use --strategy ddp, one process per GPU",
            ),
        ):
            if not ok:
                raise ConfigError(message)


#: every option's field, in ``--help``'s order
OPTIONS: tuple[Field, ...] = tuple(f for _, _, cls in BRANCHES for f in fields(cls))
HINTS = {n: t for _, _, cls in BRANCHES for n, t in typing.get_type_hints(cls).items()}


def flag(f: Field) -> str:
    """The option's flag: ``--global-batch-size`` for ``global_batch_size``."""
    return "--" + f.name.replace("_", "-")


def kind_of(f: Field) -> type:
    """int, float, str, bool or list: the option's type without its None, from the annotation."""
    hint = HINTS[f.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def shown(value: Any) -> str:
    """A value as ``--help`` shows it: as written on the command line, unset for None."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(f"{w:g}" for w in value)
    return str(value)
