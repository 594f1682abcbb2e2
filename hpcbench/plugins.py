"""The registries' shared mechanics: one way every kind of plug-in is found (:func:`discover`),
hpcbench's own and those of other installed packages, a batch system, a launcher, a run-side
environment, a container runtime, a training strategy or an accounting reader added without an
edit here.

Each registry is the subclasses of its base class that set a name (:func:`registered`), once the
modules of its package are imported and the modules other distributions declare under its
entry-point group. A package declares its modules in its ``pyproject.toml``::

    [project.entry-points."hpcbench.schedulers"]
    mybatch = "my_package.mybatch"        # defines a Scheduler subclass (and its template dir)

    [project.entry-points."hpcbench.launchers"]
    mylauncher = "my_package.mylauncher"  # defines a Launcher subclass

    [project.entry-points."hpcbench.environments"]
    mybatch = "my_package.mybatch_env"    # defines an Environment subclass (the run side)

    [project.entry-points."hpcbench.containers"]
    mybox = "my_package.mybox"            # defines a ContainerRuntime subclass

    [project.entry-points."hpcbench.strategies"]
    mystrategy = "my_package.mystrategy"  # defines a StrategyKind subclass (no torch at import)

    [project.entry-points."hpcbench.accounting"]
    mybatch = "my_package.mybatch_acct"   # defines an AccountingReader subclass

Importing the module registers its classes, as a module of hpcbench's own packages does. A
plug-in that fails to import is named in one line on stderr and left out; hpcbench goes on.
"""

from __future__ import annotations

import importlib
import os
import sys
from functools import cache
from typing import TypeVar

SCHEDULER_GROUP = "hpcbench.schedulers"
LAUNCHER_GROUP = "hpcbench.launchers"
ENVIRONMENT_GROUP = "hpcbench.environments"
CONTAINER_GROUP = "hpcbench.containers"
STRATEGY_GROUP = "hpcbench.strategies"
ACCOUNTING_GROUP = "hpcbench.accounting"
T = TypeVar("T")


def discover(
    package: str, base: type[T], group: str, key: str = "name", order: str = "", within: str = ""
) -> list[type[T]]:
    """Every class of one kind: the subclasses of ``base`` that set ``key`` (:func:`registered`),
    sorted by (``order``, name) when ``order`` names a class attribute, once the modules of
    ``package`` are imported (each module and subpackage of it but ``base``; with ``within``,
    the module of that name in each subpackage holding one; a plain module: itself) and the
    plug-ins declared under the entry-point ``group``. Both are imported on the first call
    alone: a registry asks again at no cost."""
    _import_kind(package, group, within)
    found = registered(base, key)
    return sorted(found, key=lambda c: (getattr(c, order), c.name)) if order else found


@cache
def _import_kind(package: str, group: str, within: str) -> None:
    for name in _modules(package, within):
        importlib.import_module(name)
    load_plugins(group)


def _modules(package: str, within: str) -> list[str]:
    """The modules of ``package`` (listed directly: pkgutil costs every rank 3 ms)."""
    folders = getattr(importlib.import_module(package), "__path__", None)
    if not folders:
        return []
    found = []
    for entry in sorted(os.listdir(folders[0])):
        path = os.path.join(folders[0], entry)
        if within:
            if os.path.isfile(os.path.join(path, f"{within}.py")):
                found.append(f"{package}.{entry}.{within}")
        elif entry.endswith(".py") and entry not in ("__init__.py", "base.py"):
            found.append(f"{package}.{entry[:-3]}")
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            found.append(f"{package}.{entry}")
    return found


def registered(base: type[T], key: str = "name") -> list[type[T]]:
    """Every subclass of ``base`` defined so far, at any depth, that sets ``key`` (its name in
    a registry), in the order they were declared: a plug-in's class counts once its module is
    imported."""
    found: list[type[T]] = []
    todo = list(base.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo += cls.__subclasses__()
        if getattr(cls, key, None):
            found.append(cls)
    return found


@cache
def any_declared() -> bool:
    """Whether any distribution on ``sys.path`` may declare a plug-in of hpcbench: a look at the
    ``entry_points.txt`` of each ``.dist-info`` and ``.egg-info`` directory (2 ms here, where
    importing ``importlib.metadata`` costs 28 ms on every command); a zip or an egg file on the
    path may hold one, so it counts as a maybe."""
    for place in sys.path:
        place = place or "."
        if os.path.isfile(place):
            return True
        try:
            entries = os.scandir(place)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if not entry.name.endswith((".dist-info", ".egg-info")):
                    continue
                try:
                    with open(os.path.join(entry.path, "entry_points.txt"), "rb") as fh:
                        if b"[hpcbench." in fh.read(1 << 20):
                            return True
                except OSError:
                    continue
    return False


def load_plugins(group: str) -> list[str]:
    """Import every module declared under the entry-point ``group``; the names loaded."""
    if not any_declared():
        return []
    from importlib.metadata import entry_points

    loaded = []
    for point in entry_points(group=group):
        try:
            point.load()
        except Exception as err:  # a broken plug-in: said, left out
            import logging  # here: every rank imports this module (through the run side)

            logging.getLogger("hpcbench").warning(
                "hpcbench: plug-in %s (%s) not loaded: %s", point.name, group, err
            )
            continue
        loaded.append(point.name)
    return loaded
