"""The run side's half of each launcher and batch system: what the processes they start learn
from their environment, one small module each (:class:`~.base.Environment`).

Every module of this package that defines an ``Environment`` subclass with a ``name`` is one:
:func:`environments` finds them by importing them (and, on its first call, the modules other
distributions declare under the ``hpcbench.environments`` entry point), so that a launcher or a
batch system added to the submit side adds its run side here in one module, and nothing else on
the run side names it. :mod:`hpcbench.launch` asks them. Pure Python, no torch: every rank
imports this package.
"""

from __future__ import annotations

import importlib
import os
from functools import cache

from hpcbench.environments.base import Environment, RankVariables
from hpcbench.plugins import ENVIRONMENT_GROUP, load_plugins, registered

__all__ = ["Environment", "RankVariables", "environments"]


def _discover() -> None:
    """Import every module of this package (listed directly: pkgutil costs every rank 3 ms)."""
    names = {n.removesuffix(".py") for n in os.listdir(__path__[0]) if n.endswith(".py")}
    for name in sorted(names - {"__init__", "base"}):
        importlib.import_module(f"{__name__}.{name}")


@cache
def _load_plugins() -> None:
    load_plugins(ENVIRONMENT_GROUP)


def environments() -> list[type[Environment]]:
    """Every launcher's and batch system's environment, in the order they are asked."""
    _load_plugins()
    return sorted(registered(Environment), key=lambda c: (c.order, c.name))


_discover()
