"""Container runtimes behind one shape (:class:`~.base.ContainerRuntime`), one module each:
Apptainer and Singularity, enroot through pyxis, enroot, podman-hpc, Charliecloud.

Every module of this package that defines a ``ContainerRuntime`` subclass with a ``name`` is a
runtime: :func:`runtime_classes` finds them by importing them, so adding one is one module here
(and its name in :data:`hpcbench.jobs.spec.CONTAINER_RUNTIMES`, which a test keeps equal).
"""

from __future__ import annotations

import importlib
import pkgutil

from hpcbench.jobs.containers.base import ContainerError, ContainerRuntime
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec
from hpcbench.plugins import registered


def _discover() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")


_discover()


def runtime_classes() -> dict[str, type[ContainerRuntime]]:
    """Every runtime by name, in the order the docs list them."""
    found = sorted(registered(ContainerRuntime), key=lambda c: (c.order, c.name))
    return {cls.name: cls for cls in found}


def runtime_of(spec: JobSpec) -> type[ContainerRuntime] | None:
    """The runtime of ``spec``'s container (None without one)."""
    c = spec.environment.container
    if c is None:
        return None
    try:
        return runtime_classes()[c.runtime]
    except KeyError:
        raise ContainerError(
            f"environment.container.runtime: unknown runtime {c.runtime!r}"
        ) from None


def rank_prefix(spec: JobSpec) -> list[Word]:
    """The words before each rank's program (or each torchrun agent): [] without a container."""
    cls = runtime_of(spec)
    return cls.rank_words(spec) if cls else []


def srun_options(spec: JobSpec) -> list[Word]:
    """The container's options of the ``srun`` that starts ranks or agents ([] for most)."""
    cls = runtime_of(spec)
    return cls.srun_flags(spec) if cls else []


def check_container(spec: JobSpec, scheduler: str, launcher: str) -> None:
    """Refuse in one line a container its runtime cannot run under ``scheduler`` and
    ``launcher`` (nothing to check without a container)."""
    cls = runtime_of(spec)
    if cls is not None:
        cls.check(spec, scheduler, launcher)


__all__ = [
    "ContainerError",
    "ContainerRuntime",
    "check_container",
    "rank_prefix",
    "runtime_classes",
    "runtime_of",
    "srun_options",
]
