"""podman-hpc (NERSC's podman for HPC): ``podman-hpc run --rm --network=host --ipc=host
--pid=host --env-host --volume "$PWD:$PWD" --workdir "$PWD" [--gpu] --volume SRC:DST … IMAGE``
before each rank's program: one container per rank (or per torchrun agent), on the host's
network and IPC so that ranks and NCCL find each other, with the host's environment (the
launcher's rank variables) inside. MPI ranks need the site's MPI in the image: add podman-hpc's
``--mpi`` (or what the site documents) to ``options``."""

from __future__ import annotations

from hpcbench.jobs.containers.base import (
    WORKDIR,
    ContainerRuntime,
    bind_options,
    image_word,
    joined,
)
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec


class PodmanHpc(ContainerRuntime):
    name = "podman-hpc"
    order = 50
    image_is = "an image migrated with podman-hpc migrate (NAME:TAG)"

    @classmethod
    def rank_words(cls, spec: JobSpec) -> list[Word]:
        c = spec.environment.container
        assert c is not None
        words: list[Word] = [cls.name, "run", "--rm", "--network=host", "--ipc=host"]
        words += ["--pid=host", "--env-host", "--volume", joined(WORKDIR, ":", WORKDIR)]
        words += ["--workdir", WORKDIR]
        if spec.resources.gpus_per_node:
            words.append("--gpu")
        words += bind_options("--volume", c.binds)
        return [*words, *c.options, image_word(spec)]
