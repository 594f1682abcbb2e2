"""NVIDIA's enroot without pyxis: ``enroot start --mount SRC:DST … IMAGE`` before each rank's
program. The image is a container created with ``enroot create`` (its name) or a SquashFS file
from ``enroot import``; enroot keeps the host's network and environment, and its NVIDIA hook
makes the GPUs visible when ``NVIDIA_VISIBLE_DEVICES`` is set (added when the job asks for
GPUs)."""

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


class Enroot(ContainerRuntime):
    name = "enroot"
    order = 40
    image_is = "a container name (enroot create) or a SquashFS file (enroot import)"

    @classmethod
    def rank_words(cls, spec: JobSpec) -> list[Word]:
        c = spec.environment.container
        assert c is not None
        words: list[Word] = ["enroot", "start"]
        if spec.resources.gpus_per_node:
            words += ["--env", "NVIDIA_VISIBLE_DEVICES=all"]
        words += ["--mount", joined(WORKDIR, ":", WORKDIR)]
        words += bind_options("--mount", c.binds)
        return [*words, *c.options, image_word(spec)]
