"""How a trainer option is declared: :func:`option` (a dataclass field whose metadata hold its
help text, choices and rule), the rules that check a value, the choices and defaults the options
share, and :class:`ConfigError`. The options themselves are fields of the option groups, one
dataclass per ``--help`` section (:mod:`.options_learning`, :mod:`.options_running`; the
strategies' own options declared by each strategy's kind, :mod:`.strategy_kinds`), gathered as
the branches of :class:`~.config.TrainConfig`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import MISSING, field
from typing import Any

from hpcbench.train.model_names import unknown_model

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("none", "cosine", "step", "onecycle")
DATA_ORDERS = ("global", "shards")
LR_SCALINGS = ("none", "linear")
DEVICES = ("auto", "cpu", "cuda")
PROGRESS_MODES = ("auto", "bar", "lines", "none")
ENERGY_MODES = ("off", "on")
PRECISIONS = ("fp32", "bf16", "fp16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEFAULT_DATA = "data/shapes"
DEFAULT_GLOBAL_BATCH = 32  # the global batch when neither batch option is given


class ConfigError(Exception):
    """A trainer option the user can fix (one line, naming the flag or the file and key)."""


# ---- rules: None for a good value, else what follows the option's name in the error --------------
Rule = Callable[[Any], "str | None"]


def at_least(low: int) -> Rule:
    return lambda v: None if v >= low else f"must be at least {low}, got {v}"


def finite_in(words: str, ok: Callable[[float], bool]) -> Rule:
    """A float option: finite and ``ok``. The upper limits used below keep every value, and what
    the optimisers derive from it (Adam's lr / (1 - beta1)), far inside float32, where torch keeps
    them: beyond, torch fails with a traceback."""
    return lambda v: (
        None if math.isfinite(v) and ok(v) else f"must be a finite number {words}, got {v}"
    )


def positive_weights(weights: list[float]) -> str | None:
    if all(math.isfinite(w) and w > 0 for w in weights):
        return None
    return "must all be finite positive numbers, got " + ",".join(f"{w:g}" for w in weights)


# The built-in models and the smallest width each accepts after ``NAME:``.
MIN_WIDTH = {"small_cnn": 2, "mlp": 1, "rnn": 1}


#: the user's own model: ``package.module:factory`` or ``path/to/file.py:factory``
USER_MODEL = re.compile(
    r"(?P<where>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[^:\x00-\x1f]+\.py)"
    r":(?P<factory>[A-Za-z_][A-Za-z0-9_]*)"
)


def user_model(spec: str) -> tuple[str, str] | None:
    """(module or file, factory) of the user's own model, None for a built-in or torchvision
    name (``NAME`` or ``NAME:WIDTH``)."""
    found = USER_MODEL.fullmatch(spec)
    if found is None or found["where"] in MIN_WIDTH:
        return None
    return found["where"], found["factory"]


def model_problem(spec: str) -> str | None:
    base, colon, arg = spec.partition(":")
    if not base:
        return f"{spec!r}: give a model name, e.g. small_cnn or resnet18"
    if not colon:
        return unknown_model(base)
    if user_model(spec) is not None:
        return None
    if base not in MIN_WIDTH:
        return (
            f"{spec}: only {', '.join(MIN_WIDTH)} take a width (NAME:N); use {base}, or your own "
            "model as package.module:factory or path/to/file.py:factory"
        )
    low = MIN_WIDTH[base]
    if not (arg.isascii() and arg.isdigit()) or int(arg) < low:
        return f"{spec}: the width after ':' must be a whole number >= {low}, e.g. {base}:64"
    return None


def parse_model(spec: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:WIDTH`` (built-ins only) -> (name, width or None)."""
    problem = model_problem(spec)
    if problem is not None:
        raise ConfigError(f"--model {problem}")
    base, _, arg = spec.partition(":")
    return base, int(arg) if arg else None


def option(
    default: Any = MISSING,
    *,
    help: str,
    choices: tuple[str, ...] | None = None,
    rule: Rule | None = None,
    unset: str | None = None,
    exclusive: str | None = None,
    factory: Callable[[], Any] | None = None,
    metavar: str | None = None,
    after: str | None = None,
) -> Any:
    """A :class:`TrainConfig` field with what the command line, the checks and the file need.

    ``help`` explains the option (the parser appends its default, from the field); ``unset``
    what None means; ``rule`` checks a set value; ``exclusive`` names a group of options of
    which one at most is given; ``metavar`` names the value in ``--help``; ``after``, for an
    option a strategy declares, the option of its section it is listed after (else the
    section's end).
    """
    assert (unset is not None) == (default is None), "say what an unset option means"
    meta = {
        "help": help,
        "choices": choices,
        "rule": rule,
        "unset": unset,
        "exclusive": exclusive,
        "metavar": metavar,
        "after": after,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)
