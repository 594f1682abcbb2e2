"""Apptainer and Singularity: ``apptainer exec --nv --bind SRC:DST … IMAGE`` before each rank's
program (they bind the working directory, home and /tmp by themselves, and keep the environment
and the working directory)."""

from __future__ import annotations

from hpcbench.jobs.containers.base import ContainerRuntime, bind_options, image_word, refuse_commas
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec


class Apptainer(ContainerRuntime):
    name = "apptainer"
    order = 10
    image_is = "a SIF file (or a sandbox directory, or docker://…)"

    @classmethod
    def rank_words(cls, spec: JobSpec) -> list[Word]:
        c = spec.environment.container
        assert c is not None
        words: list[Word] = [cls.name, "exec"]
        if spec.resources.gpus_per_node:
            words.append("--nv")  # the node's NVIDIA driver and devices inside
        words += bind_options("--bind", c.binds)  # ~/ on either side: the node's home
        return [*words, *c.options, image_word(spec)]

    @classmethod
    def check(cls, spec: JobSpec, scheduler: str, launcher: str) -> None:
        super().check(spec, scheduler, launcher)
        c = spec.environment.container
        assert c is not None
        refuse_commas(cls.name, c.binds)  # --bind takes a list: a comma starts another bind


class Singularity(Apptainer):
    name = "singularity"
    order = 20
