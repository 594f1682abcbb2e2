"""Container runtimes behind one shape (:class:`~.base.ContainerRuntime`), one module each:
Apptainer and Singularity, enroot through pyxis, enroot, podman-hpc, Charliecloud.

Every module of this package that defines a ``ContainerRuntime`` subclass with a ``name`` is a
runtime: :func:`runtime_classes` finds them by importing them, on its first call, with the modules
other distributions declare under the ``hpcbench.containers`` entry point
(:func:`hpcbench.plugins.discover`, as every registry), so adding one is one module here; the
spec's ``environment.container.runtime`` takes the names found.
"""

from __future__ import annotations

from hpcbench.jobs.containers.base import ContainerError, ContainerRuntime
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec
from hpcbench.plugins import CONTAINER_GROUP, discover


def runtime_classes() -> dict[str, type[ContainerRuntime]]:
    """Every runtime by name, in the order the docs list them (plug-ins' too)."""
    found = discover(__name__, ContainerRuntime, CONTAINER_GROUP, order="order")
    return {cls.name: cls for cls in found}


def runtime_names() -> tuple[str, ...]:
    """What ``environment.container.runtime`` and ``--container-runtime`` take."""
    return tuple(runtime_classes())


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
    "runtime_names",
    "runtime_of",
    "srun_options",
]
