"""The trainer's options, each declared once: a field of :class:`TrainConfig` whose metadata holds
its help text, choices, group and rule. From these come the command line (:func:`build_parser`,
whose ``--help`` prints every default from the field itself: :mod:`.command_line`), the checks
(:meth:`TrainConfig.check`, one line naming the flag) and the TOML file of ``--config``
(:func:`~.config_file.read_toml`, :func:`~.config_file.to_toml`: :mod:`.config_file`).

A configuration file holds the options as top-level keys, named as the flags without their dashes
(``global-batch-size`` or ``global_batch_size``); flags given on the command line override it.

Batch semantics are explicit: ``--global-batch-size G`` (unset: :data:`DEFAULT_GLOBAL_BATCH`, so
that the default run learns the built-in set in a few CPU minutes; the reference study's batch is in
jobs/reference-study/resnet34.toml) keeps the effective batch constant as ranks are added (each rank gets
G/W, or its ``--rank-weights`` share); ``--batch-size-per-rank B`` makes the global batch B×W instead.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, fields
from typing import Any

from hpcbench.train.option_fields import (
    DEFAULT_DATA,
    DEFAULT_GLOBAL_BATCH,
    GROUPS,
    STRATEGIES,
    ConfigError,
    parse_model,
)
from hpcbench.train.options_learning import BatchAndOptimisationOptions, DataAndModelOptions
from hpcbench.train.options_running import (
    CheckpointsAndStoppingOptions,
    OutputOptions,
    ParallelismOptions,
)
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

__all__ = [
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


# the groups' fields in the order of GROUPS (a dataclass lists its bases' fields last base first)
@dataclass
class TrainConfig(
    OutputOptions,
    CheckpointsAndStoppingOptions,
    BatchAndOptimisationOptions,
    ParallelismOptions,
    DataAndModelOptions,
):
    """Every option of the trainer, one field each, grouped as ``--help`` shows them."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def uses_per_rank_batch(self) -> bool:
        return self.batch_size_per_rank is not None

    def check(self, names: Mapping[str, str] | None = None) -> None:
        """Raise :class:`ConfigError` for the first option out of its rules. ``names``: how to
        name an option in the message where not by its flag (a file and key)."""
        names = names or {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            choices, rule = f.metadata["choices"], f.metadata["rule"]
            problem = rule(value) if rule is not None else None
            if choices is not None and value not in choices:
                problem = f"must be one of {', '.join(choices)}"
            if problem is not None:
                raise ConfigError(f"{names.get(f.name, flag(f))} {problem}")
        for ok, message in (
            (
                self.global_batch_size is None or self.batch_size_per_rank is None,
                "give --global-batch-size or --batch-size-per-rank, not both",
            ),
            (
                self.rank_weights is None or self.data_order == "global",
                "--rank-weights needs --data-order global",
            ),
            (
                not self.error_feedback or self.grad_compression != "none",
                "--error-feedback needs --grad-compression fp16 or bf16",
            ),
            (
                self.rank_weights is None or not self.uses_per_rank_batch,
                "--rank-weights shares a --global-batch-size; drop --batch-size-per-rank",
            ),
            (
                self.compile == "off"
                or self.strategy not in STRATEGY_KINDS
                or STRATEGY_KINDS[self.strategy].compiles,
                f"--compile {self.compile} cannot compile torch.nn.DataParallel's per-step "
                "replicas (--strategy dp); use --strategy ddp, one process per GPU",
            ),
        ):
            if not ok:
                raise ConfigError(message)


OPTIONS: tuple[Field, ...] = fields(TrainConfig)
HINTS = typing.get_type_hints(TrainConfig)


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
