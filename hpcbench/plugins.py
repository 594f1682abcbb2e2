"""The registries' shared mechanics: the classes of one kind defined so far
(:func:`registered`), and plug-ins from other installed packages, a batch system or a launcher
added without an edit here.

A package declares its modules under an entry-point group of its ``pyproject.toml``::

    [project.entry-points."hpcbench.schedulers"]
    mybatch = "my_package.mybatch"        # defines a Scheduler subclass (and its template dir)

    [project.entry-points."hpcbench.launchers"]
    mylauncher = "my_package.mylauncher"  # defines a Launcher subclass

    [project.entry-points."hpcbench.environments"]
    mybatch = "my_package.mybatch_env"    # defines an Environment subclass (the run side)

Importing the module registers its classes, as a module of hpcbench's own packages does. A
plug-in that fails to import is named in one line on stderr and left out; hpcbench goes on.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from typing import TypeVar

SCHEDULER_GROUP = "hpcbench.schedulers"
LAUNCHER_GROUP = "hpcbench.launchers"
ENVIRONMENT_GROUP = "hpcbench.environments"
T = TypeVar("T")


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
