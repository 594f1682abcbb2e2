"""Launchers behind one shape (:class:`~.base.Launcher`), one module each: torchrun, mpiexec,
srun, direct (the program itself, one process).

Every module of this package that defines a ``Launcher`` subclass with a ``name`` is a launcher:
:func:`launcher_classes` finds them by importing them, on its first call, with the modules other
distributions declare under the ``hpcbench.launchers`` entry point
(:func:`hpcbench.plugins.discover`, as every registry), so adding one is one module here. A launcher knows no scheduler by its code: it says under which batch system alone it runs
(``only_under``), and :func:`launcher_for` picks it, or its stand-in, for a scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpcbench.jobs.launchers.base import Launcher, LaunchError
from hpcbench.plugins import LAUNCHER_GROUP, discover


def launcher_classes() -> dict[str, type[Launcher]]:
    """Every launcher by name, in the order ``--help`` lists them (plug-ins' too): imported on
    the first question to the registry (not while this package is imported: the schedulers'
    base imports it, and a plug-in imports that base)."""
    return {cls.name: cls for cls in discover(__name__, Launcher, LAUNCHER_GROUP, order="order")}


def launcher_names() -> tuple[str, ...]:
    """What ``--launcher`` and ``launcher.kind`` take."""
    return tuple(launcher_classes())


def launcher_for(
    kind: str,
    scheduler: str,
    plays_every_system: bool = False,
    labels: Mapping[str, str] | None = None,
) -> type[Launcher]:
    """The launcher that starts ``kind``'s ranks under ``scheduler``: ``kind`` itself, or its
    stand-in where the scheduler plays every batch system on one machine (the local one); a
    launcher that runs only under another batch system is a one-line :class:`LaunchError`
    naming that system (``labels``: the schedulers' names in messages, by scheduler name)."""
    classes = launcher_classes()
    cls = classes.get(kind)
    if cls is None:
        raise LaunchError(f"launcher.kind: unknown launcher {kind!r}")
    if cls.only_under and cls.only_under != scheduler:
        if plays_every_system and cls.stand_in in classes:
            return classes[cls.stand_in]
        others = sorted(n for n, c in classes.items() if not c.only_under)
        raise LaunchError(
            f"launcher.kind: {kind} runs only under "
            f"{(labels or {}).get(cls.only_under, cls.only_under)}, "
            f"not {scheduler}; use {' or '.join(others)}"
        )
    return cls


__all__ = [
    "LaunchError",
    "Launcher",
    "launcher_classes",
    "launcher_for",
    "launcher_names",
]
