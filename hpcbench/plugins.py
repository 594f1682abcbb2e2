"""Plug-ins from other installed packages: a batch system or a launcher added without an edit here.

A package declares its modules under an entry-point group of its ``pyproject.toml``::

    [project.entry-points."hpcbench.schedulers"]
    mybatch = "my_package.mybatch"        # defines a Scheduler subclass (and its template dir)

    [project.entry-points."hpcbench.launchers"]
    mylauncher = "my_package.mylauncher"  # defines a Launcher subclass

Importing the module registers its classes, as a module of hpcbench's own packages does. A
plug-in that fails to import is named in one line on stderr and left out; hpcbench goes on.
"""

from __future__ import annotations

import logging

SCHEDULER_GROUP = "hpcbench.schedulers"
LAUNCHER_GROUP = "hpcbench.launchers"
log = logging.getLogger("hpcbench")


def load_plugins(group: str) -> list[str]:
    """Import every module declared under the entry-point ``group``; the names loaded."""
    from importlib.metadata import entry_points  # 25 ms: only where plug-ins are looked for

    loaded = []
    for point in entry_points(group=group):
        try:
            point.load()
        except Exception as err:  # a broken plug-in: said, left out
            log.warning("hpcbench: plug-in %s (%s) not loaded: %s", point.name, group, err)
            continue
        loaded.append(point.name)
    return loaded
