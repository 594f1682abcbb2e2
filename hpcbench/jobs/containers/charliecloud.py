"""Charliecloud: ``ch-run --bind SRC:DST … --bind "$PWD" --cd "$PWD" IMAGE --`` before each
rank's program. The image is a directory (or a SquashFS file) made with ``ch-image`` or
``ch-convert``; the environment passes through; GPU libraries are put into the image once, on
the node, with ``ch-fromhost --nvidia`` (nothing to add at run time). A bind's target must
exist in the image unless the image directory is yours to write."""

from __future__ import annotations

from hpcbench.jobs.containers.base import (
    WORKDIR,
    ContainerRuntime,
    bind_options,
    image_word,
)
from hpcbench.jobs.shell import Word
from hpcbench.jobs.spec import JobSpec


class Charliecloud(ContainerRuntime):
    name = "charliecloud"
    order = 60
    image_is = "an image directory or SquashFS file (ch-image, ch-convert)"

    @classmethod
    def rank_words(cls, spec: JobSpec) -> list[Word]:
        c = spec.environment.container
        assert c is not None
        words: list[Word] = ["ch-run"]
        words += bind_options("--bind", c.binds)
        # the job's directory at the same path, and the ranks started in it, as on the host
        words += ["--bind", WORKDIR, "--cd", WORKDIR]
        return [*words, *c.options, image_word(spec), "--"]
