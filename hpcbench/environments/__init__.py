"""The run side's half of each launcher and batch system: what the processes they start learn
from their environment, one small module each (:class:`~.base.Environment`).

Every module of this package that defines an ``Environment`` subclass with a ``name`` is one:
:func:`environments` finds them by importing them, on its first call, with the modules other
distributions declare under the ``hpcbench.environments`` entry point
(:func:`hpcbench.plugins.discover`, as every registry), so that a launcher or a
batch system added to the submit side adds its run side here in one module, and nothing else on
the run side names it. :mod:`hpcbench.this_rank` asks them. Pure Python, no torch: every rank
imports this package.
"""

from __future__ import annotations

from hpcbench.environments.base import Environment, RankVariables
from hpcbench.plugins import ENVIRONMENT_GROUP, discover

__all__ = ["Environment", "RankVariables", "environments"]


def environments() -> list[type[Environment]]:
    """Every launcher's and batch system's environment, in the order they are asked."""
    return discover(__name__, Environment, ENVIRONMENT_GROUP, order="order")
