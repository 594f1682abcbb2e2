"""A training process that compiles nothing never loads PyTorch's compiler, ``torch._dynamo``.

An eager training touches ``torch._dynamo`` in a few places only, none of which needs it when
nothing is being compiled: ``Optimizer.step`` marks a graph break on every step, an optimizer's
and ``DistributedDataParallel``'s methods are wrapped in ``torch._dynamo.disable`` on first call,
``init_process_group`` clears two of its caches, and ``DistributedDataParallel`` reads one of its
settings. Each of those imports it, about a thousand modules (sympy and triton among them): a
second or more of CPU per rank on a laptop's core (half of a small training's process), and a
thousand more files that every rank reads from the shared filesystem of a cluster.

:func:`defer` puts a stand-in under that module's name that answers those calls exactly as the
real module does while nothing is compiled (nothing can trace without the real module):

- ``graph_break()`` does nothing (the real one's body is empty; only a tracing compiler acts);
- ``disable(fn)`` gives a wrapper that calls ``fn`` as it is; once the real module is loaded the
  wrapper goes through the real ``disable`` (it asks at every call, so a later compile in the
  same process still skips what PyTorch marked);
- ``trace_rules.clear_lru_cache()`` does nothing (those caches belong to the real module);
- ``utils.get_optimize_ddp_mode()`` is the mode of the untouched setting, ``"ddp_optimizer"``.

Any other use (``torch.compile``, any other name, a submodule's import) loads the real module in
the stand-in's place, as the first import would have, and the stand-in forwards to it from then
on. The trainer defers only in a process of its own that does not compile, and not where
``HPCBENCH_DEFER_DYNAMO=0``.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

NAME = "torch._dynamo"
OFF_VARIABLE = "HPCBENCH_DEFER_DYNAMO"
DEFAULT_DDP_MODE = "ddp_optimizer"  # torch._dynamo.config.optimize_ddp = True, untouched


class _StandIn(types.ModuleType):
    """``torch._dynamo`` while it is not loaded: the eager answers, and the real module for
    anything else."""

    def __getattr__(self, name: str) -> Any:
        return getattr(real(), name)


class _Part:
    """A submodule of the stand-in (``trace_rules``, ``utils``): its eager answers, and the real
    submodule for anything else."""

    def __init__(self, name: str, answers: Mapping[str, Callable[..., Any]]) -> None:
        self._name = name
        for attr, eager in answers.items():
            setattr(self, attr, _eager_or_real(f"{name}.{attr}", eager))

    def __getattr__(self, attr: str) -> Any:
        real()
        return getattr(importlib.import_module(f"{NAME}.{self._name}"), attr)


def loaded() -> bool:
    """Whether the real module is loaded (in place of the stand-in, or never deferred)."""
    module = sys.modules.get(NAME)
    return module is not None and not isinstance(module, _StandIn)


def real() -> types.ModuleType:
    """The real ``torch._dynamo``, loaded now in the stand-in's place if it was not yet."""
    module = sys.modules.get(NAME)
    if isinstance(module, _StandIn):
        del sys.modules[NAME]
        module = None
    # the import also puts it on the torch package, where the stand-in was
    return module if module is not None else importlib.import_module(NAME)


def _eager_or_real(path: str, eager: Callable[..., Any]) -> Callable[..., Any]:
    """``eager`` while the real module is not loaded, the real ``NAME.path`` once it is."""

    def answer(*args: Any, **kwargs: Any) -> Any:
        if not loaded():
            return eager(*args, **kwargs)
        owner, _, attr = f"{NAME}.{path}".rpartition(".")
        return getattr(importlib.import_module(owner), attr)(*args, **kwargs)

    answer.__name__ = answer.__qualname__ = path.rpartition(".")[2]
    return answer


def _graph_break(msg: str = "") -> None:
    """Outside a compiler's trace a graph break is nothing."""


def _disable(fn: Callable[..., Any] | None = None, recursive: bool = True, **options: Any) -> Any:
    """``torch._dynamo.disable``: ``fn`` as it is while nothing can compile, the real ``disable``
    of it from the first call after the real module is loaded."""
    if fn is None:
        return functools.partial(_disable, recursive=recursive, **options)
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not loaded():
            return fn(*args, **kwargs)
        if not disabled:
            disabled.append(real().disable(fn, recursive, **options))
        return disabled[0](*args, **kwargs)

    return call


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _default_ddp_mode() -> str:
    return DEFAULT_DDP_MODE


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this environment lets a process defer: unless ``HPCBENCH_DEFER_DYNAMO=0`` (the
    compiler's own variables change nothing the stand-in answers: they act when compiling)."""
    environ = os.environ if environ is None else environ
    return environ.get(OFF_VARIABLE, "1") != "0"


def defer() -> bool:
    """Put the stand-in in place of ``torch._dynamo`` where the environment wants it
    (:func:`wanted`) and the real module is not loaded yet; say whether it is (now or already)
    in place."""
    if isinstance(sys.modules.get(NAME), _StandIn):
        return True
    if NAME in sys.modules or not wanted():
        return False
    import torch

    stand_in = _StandIn(NAME)
    stand_in.graph_break = _eager_or_real("graph_break", _graph_break)  # type: ignore[attr-defined]
    stand_in.disable = _eager_or_real("disable", _disable)  # type: ignore[attr-defined]
    stand_in.trace_rules = _Part("trace_rules", {"clear_lru_cache": _nothing})  # type: ignore[attr-defined]
    stand_in.utils = _Part("utils", {"get_optimize_ddp_mode": _default_ddp_mode})  # type: ignore[attr-defined]
    sys.modules[NAME] = stand_in
    torch._dynamo = stand_in  # type: ignore[attr-defined]  # as an import would have set it
    return True
