"""What only this batch system reads: its own job spec fields (each an
:class:`~hpcbench.jobs.spec.OwnOption`, with its profile key and CLI flag), and the facts a
cluster profile may record about it.

A batch system with a setting no other has (a parallel environment, a resource syntax) declares
it in ``options``; the spec's loader, the profiles and the CLI take it from there, its template
reads it as ``options.KEY`` and its class as ``cls.option(spec, KEY)``. ``profile_notes`` are
facts a profile records about the cluster (whether its accounting answers).
"""

from __future__ import annotations

from typing import Any, ClassVar

from hpcbench.jobs.spec import JobSpec, OwnOption, own_value


class OwnOptions:
    """The job spec fields and profile facts one batch system declares."""

    #: the job spec fields only this scheduler reads (:class:`~hpcbench.jobs.spec.OwnOption`)
    options: ClassVar[tuple[OwnOption, ...]] = ()
    #: facts a cluster profile may record about it: key -> (what it says, its type)
    profile_notes: ClassVar[dict[str, tuple[str, type]]] = {}

    @classmethod
    def option(cls, spec: JobSpec, key: str) -> Any:
        """The value of its own option ``key`` in ``spec`` (the declared default if unset)."""
        return own_value(cls.options, spec, key)
