"""The user's own model in hpcbench's trainer: ``--model package.module:factory`` or
``--model path/to/file.py:factory``. The factory is imported on every rank and called with the
dataset's shape ``(channels, height, width)`` and number of classes; it returns a
``torch.nn.Module``. What goes wrong is one line naming the model (:class:`ConfigError`): not
importable, no such factory, not callable, a failure inside it, or something else than a
module returned. The model's source file and its SHA-256 go into the run's provenance."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from hpcbench.jsonfile import JSONObject
from hpcbench.train.option_fields import ConfigError, user_model

MAX_SOURCE_BYTES = 64 << 20  # what is hashed of a model's source file


def _module(where: str, spec: str) -> Any:
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"--model {spec}: no such file {where} (a relative path is read "
                              "from the directory the ranks start in)")  # fmt: skip
        name = "hpcbench_user_model_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        if name in sys.modules:
            return sys.modules[name]
        found = importlib.util.spec_from_file_location(name, path)
        if found is None or found.loader is None:
            raise ConfigError(f"--model {spec}: {where} cannot be imported as Python")
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except Exception as err:
            del sys.modules[name]
            raise ConfigError(f"--model {spec}: importing {where} failed: {_said(err)}") from None
        return module
    try:
        return importlib.import_module(where)
    except Exception as err:
        raise ConfigError(
            f"--model {spec}: cannot import {where}: {_said(err)} (is it on PYTHONPATH on the "
            "nodes?)"
        ) from None


def _said(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]


def factory_of(spec: str) -> Callable[..., Any]:
    """The user's factory named by ``spec`` (``user_model(spec)`` is not None)."""
    named = user_model(spec)
    assert named is not None
    where, name = named
    module = _module(where, spec)
    factory = getattr(module, name, None)
    if factory is None:
        raise ConfigError(f"--model {spec}: {where} has no {name}")
    if not callable(factory):
        raise ConfigError(f"--model {spec}: {name} is a {type(factory).__name__}, not callable")
    return factory


def build_user_model(spec: str, shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The user's model for a dataset of ``shape`` and ``num_classes`` classes."""
    factory = factory_of(spec)
    try:
        model = factory(tuple(shape), num_classes)
    except ConfigError:
        raise
    except Exception as err:
        called = f"{spec.rpartition(':')[2]}({tuple(shape)}, {num_classes})"
        raise ConfigError(f"--model {spec}: {called} raised {_said(err)}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"--model {spec}: the factory returned a {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def model_source(spec: str) -> JSONObject | None:
    """Where the user's model came from, for the run's provenance: the factory, the source
    file and its SHA-256 (None for a built-in or torchvision model)."""
    named = user_model(spec)
    if named is None:
        return None
    where, name = named
    try:
        module = _module(where, spec)
        path = Path(module.__file__ or "")
        digest = hashlib.sha256(path.read_bytes()[:MAX_SOURCE_BYTES]).hexdigest()
    except (ConfigError, OSError, TypeError):
        return {"factory": spec, "file": None, "sha256": None}
    return {"factory": spec, "file": str(path), "sha256": digest}
