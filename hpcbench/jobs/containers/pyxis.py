"""enroot through the pyxis plug-in of SLURM: the image and mounts are options of the ``srun``
that starts the ranks (``--launcher srun``) or the torchrun agents (``--container-image=IMAGE
--container-mounts=SRC:DST,… --container-workdir="$PWD"``). Only under SLURM, and only through
srun: ``mpiexec`` cannot start ranks in pyxis's containers. The image is a registry reference
(``nvcr.io#nvidia/pytorch:24.08-py3``) or a SquashFS file; GPUs and the environment pass
through by themselves."""

from __future__ import annotations

from hpcbench.jobs.containers.base import (
    WORKDIR,
    ContainerRuntime,
    bind_pairs,
    bind_word,
    image_word,
    joined,
    refuse_commas,
)
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec


class Pyxis(ContainerRuntime):
    name = "pyxis"
    order = 30
    only_under = "slurm"
    launchers = ("srun", "torchrun")
    image_is = "a registry reference (nvcr.io#nvidia/pytorch:TAG) or a SquashFS file"

    @classmethod
    def srun_flags(cls, spec: JobSpec) -> list[Word]:
        c = spec.environment.container
        assert c is not None
        mounts: list[Word] = [WORKDIR]
        for src, dst in bind_pairs(c.binds):
            mounts += [",", bind_word(src, dst)]
        return [
            "--container-image",
            image_word(spec),
            "--container-mounts",
            joined(*mounts),
            "--container-workdir",
            WORKDIR,
            *c.options,
        ]

    @classmethod
    def check(cls, spec: JobSpec, scheduler: str, launcher: str) -> None:
        super().check(spec, scheduler, launcher)
        c = spec.environment.container
        assert c is not None
        refuse_commas(cls.name, c.binds, "mounts")
