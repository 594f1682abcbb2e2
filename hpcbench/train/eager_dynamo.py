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
the stand-in's place, as the first import would have (under a lock: one thread loads it, the
others wait), and the stand-in forwards to it from then on; the functions it disabled are then
disabled by the real ``disable``, and a submodule the real package imported is the one an
import of it gets (never a second copy). The trainer defers only in a process of its own that does not compile, and not where
``HPCBENCH_DEFER_DYNAMO=0``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

NAME = "torch._dynamo"
OFF_VARIABLE = "HPCBENCH_DEFER_DYNAMO"
DEFAULT_DDP_MODE = "ddp_optimizer"  # torch._dynamo.config.optimize_ddp = True, untouched
_SWAP = threading.Lock()  # the stand-in in or out of sys.modules
_REDO = threading.RLock()  # the stand-in's disabled functions handed to the real module
_DISABLE_CACHE = "__dynamo_disable"  # where torch._disable_dynamo keeps a function's disable
_REDO_ATTRIBUTE = "__hpcbench_redisable__"  # on each wrapper: disable it with the real module
# the wrappers the stand-in's disable gave out (held weakly: those dropped are not redone)
_DISABLED: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


class _StandIn(types.ModuleType):
    """``torch._dynamo`` while it is not loaded: the eager answers, and the real module for
    anything else (``__path__`` too: a submodule's import needs the real package)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__path__", "__all__"):
            raise AttributeError(name)  # a probe (hasattr, inspect, pickle) loads nothing
        try:
            module = real()
        except AttributeError as err:  # a broken compiler, not a missing name
            raise ImportError(f"{NAME} failed to import: {err}") from err
        return getattr(module, name)


class _Part:
    """A submodule of the stand-in (``trace_rules``, ``utils``): its eager answers, and the real
    submodule for anything else."""

    def __init__(self, name: str, answers: Mapping[str, Callable[..., Any]]) -> None:
        self._name = name
        for attr, eager in answers.items():
            setattr(self, attr, _eager_or_real(f"{name}.{attr}", eager))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        real()
        return getattr(importlib.import_module(f"{NAME}.{self._name}"), attr)


class _LoadedFirst(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on ``sys.meta_path`` from the stand-in's arrival on. Python imports a submodule of
    the stand-in (``import torch._dynamo.config``) by asking it for ``__path__``, which loads
    the real package, which imports that submodule itself; Python then loads the file again, a
    second module the rest of the compiler never reads. This finder hands over the first. It
    stays (the import that loaded the real package is still under way when the load ends); once
    the package is real, Python asks finders only for submodules not imported yet, and for those
    it answers nothing."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        # (a reload passes its module as target: that is the usual finders' work; and Python
        # has read the stand-in's __path__, which loaded the real package, before it asks here)
        if target is not None or not fullname.startswith(NAME + ".") or not loaded():
            return None
        module = sys.modules.get(fullname)
        if module is None:
            return None  # not imported by the package: the usual finders load it, once
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = sys.modules[spec.name]
        spec.loader_state = module.__spec__  # put back once Python has set its own
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        spec = module.__spec__
        # (a config module refused the new spec: nothing to put back)
        if spec is not None and spec.loader is self and spec.loader_state is not None:
            module.__spec__ = spec.loader_state


_FINDER = _LoadedFirst()


def loaded() -> bool:
    """Whether the real module is loaded (in place of the stand-in, or never deferred)."""
    module = sys.modules.get(NAME)
    return module is not None and not isinstance(module, _StandIn)


def real() -> types.ModuleType:
    """The real ``torch._dynamo``, loaded now in the stand-in's place if it was not yet: one
    thread takes the stand-in away and imports it, the others wait for that import as Python
    makes them wait for any module (its per-module lock, with its deadlock detection)."""
    with _SWAP:
        swapping = isinstance(sys.modules.get(NAME), _StandIn)
        if swapping:
            del sys.modules[NAME]
    # the import also puts it on the torch package, where the stand-in was
    module = importlib.import_module(NAME)
    if swapping:
        _redisable(module)
    return module


def _redisable(module: types.ModuleType) -> None:
    """Each function the stand-in disabled, disabled by the real module from now on, where
    torch keeps it (its first call after this would otherwise still go through the stand-in's
    wrapper, which a compiler would trace)."""
    with _REDO:
        for wrapper in list(_DISABLED):
            getattr(wrapper, _REDO_ATTRIBUTE)(module)


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
    """``torch._dynamo.disable``: a function as it is while nothing can compile, the real
    ``disable`` of it once the real module is loaded. Anything else (a module, a class, a
    builtin: the real ``disable`` gives back another kind of object) loads the real module."""
    if fn is None:
        return functools.partial(_disable, recursive=recursive, **options)
    if not isinstance(fn, (types.FunctionType, types.MethodType)):
        return real().disable(fn, recursive, **options)
    done: list[Callable[..., Any]] = []  # the real module's disable of fn, once made

    def redisable(module: types.ModuleType) -> None:
        with _REDO:
            if not done:
                done.append(module.disable(fn, recursive, **options))
                if getattr(fn, _DISABLE_CACHE, None) is call:
                    setattr(fn, _DISABLE_CACHE, done[0])

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not done and loaded():  # loaded by a path that did not go through real()
            redisable(real())
        return (done[0] if done else fn)(*args, **kwargs)

    setattr(call, _REDO_ATTRIBUTE, redisable)
    _DISABLED.add(call)
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
    (:func:`wanted`) and the real module is not loaded yet (``import torch`` itself loads it
    where ``TORCH_COMPILE_DEBUG`` or a backend's plug-in asks); say whether it is (now or
    already) in place."""
    if not wanted():
        return False
    import torch

    with _SWAP:
        if isinstance(sys.modules.get(NAME), _StandIn):
            return True
        if NAME in sys.modules:
            return False
        stand_in = _StandIn(NAME)
        # what a probe of the module reads, without loading it
        stand_in.__spec__ = importlib.machinery.PathFinder.find_spec(NAME, torch.__path__)
        stand_in.__file__ = getattr(stand_in.__spec__, "origin", None)
        stand_in.graph_break = _eager_or_real("graph_break", _graph_break)  # type: ignore[attr-defined]
        stand_in.disable = _eager_or_real("disable", _disable)  # type: ignore[attr-defined]
        stand_in.trace_rules = _Part("trace_rules", {"clear_lru_cache": _nothing})  # type: ignore[attr-defined]
        stand_in.utils = _Part("utils", {"get_optimize_ddp_mode": _default_ddp_mode})  # type: ignore[attr-defined]
        sys.meta_path.insert(0, _FINDER)
        sys.modules[NAME] = stand_in
        torch._dynamo = stand_in  # type: ignore[attr-defined]  # as an import would have set it
        return True
