"""The job spec's fields that one batch system or one launcher declares for itself.

A scheduler or launcher class lists in ``options`` the :class:`~.spec.OwnOption` fields it alone
reads (Grid Engine's parallel environment, srun's ``--mpi``), and a scheduler in
``requeue_methods`` the ways of requeueing it adds, and in ``profile_notes`` the facts a cluster
profile may record about it. This module gathers them from the registries, so that the spec's
loader, the profiles and the CLI know them without naming any batch system.

No torch, no third-party imports: this module runs on login nodes.
"""

from __future__ import annotations

from typing import Any

from hpcbench.jobs.launchers import launcher_classes
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec import FIELD_KEYWORDS, REQUEUE_METHODS, OwnOption


def own_options(table: str | None = None) -> list[OwnOption]:
    """Every declared option (of ``table`` alone when given): the launchers', then the
    schedulers', each in its registry's order; a key two classes declare alike counts once."""
    found: dict[str, OwnOption] = {}
    for cls in [*launcher_classes().values(), *SCHEDULER_CLASSES.values()]:
        for option in cls.options:
            if table is None or option.table == table:
                found.setdefault(option.dotted, option)
    return list(found.values())


def field_keywords() -> dict[str, str]:
    """The short names of fields (``load_spec(nodes=2)``, the CLI's flags) -> dotted field:
    the spec's own and every declared option with a flag."""
    return {**FIELD_KEYWORDS, **{o.key: o.dotted for o in own_options() if o.flag_help}}


def requeue_methods() -> tuple[str, ...]:
    """What ``requeue.method`` takes: "auto", each scheduler's own ways, "resubmit"."""
    own = [m for cls in SCHEDULER_CLASSES.values() for m in cls.requeue_methods]
    first, *rest = REQUEUE_METHODS
    return (first, *dict.fromkeys(own), *rest)


def profile_spec_keys() -> dict[str, str]:
    """The cluster profiles' keys of the declared options -> the spec field each fills."""
    return {o.profile_key: o.dotted for o in own_options() if o.profile_key}


def profile_notes() -> dict[str, tuple[str, Any]]:
    """The facts about a batch system a profile may hold (shown, not rendered): key -> (what it
    says, its type)."""
    return {k: v for cls in SCHEDULER_CLASSES.values() for k, v in cls.profile_notes.items()}
