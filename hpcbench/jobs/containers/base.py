"""The shape of a container runtime: a small class that says how a batch script runs the job's
ranks inside an image.

The launcher (torchrun's agent excepted, which runs inside with its ranks), the batch shell and
the scheduler's commands (``scontrol requeue``, ``sbatch`` for a resubmission) stay on the host:
the *hybrid model* sites document for MPI in containers. A runtime answers two questions: the
words put before each rank's program (:meth:`ContainerRuntime.rank_words`: ``apptainer exec …
IMAGE``, ``ch-run … IMAGE --``), and the options it adds to the ``srun`` that starts the ranks or
the agents (:meth:`ContainerRuntime.srun_flags`: pyxis's ``--container-image``). Where it can
run at all (a batch system, launchers) it says in :meth:`ContainerRuntime.check`.
"""

from __future__ import annotations

from typing import ClassVar

from hpcbench.jobs.shell import ShellVar, Word, path_word, quote_word
from hpcbench.jobs.spec import JobSpec

#: the directory the batch script runs in (where the spec's relative paths and the run
#: directories are): every runtime makes it visible inside at the same path
WORKDIR = ShellVar('"$PWD"')


class ContainerError(ValueError):
    """A container that cannot run with the chosen scheduler or launcher; one line naming the
    field."""


def bind_pairs(binds: list[str]) -> list[tuple[str, str]]:
    """``SRC[:DST]`` entries as (source, target) pairs, the target the source where not given."""
    pairs = []
    for bind in binds:
        src, sep, dst = bind.partition(":")
        pairs.append((src, dst if sep and dst else src))
    return pairs


def refuse_commas(runtime: str, binds: list[str], what: str = "binds") -> None:
    """Refuse in one line a bind holding a comma where the runtime's option takes a
    comma-separated list: the path would be split into several (pyxis' mounts, Apptainer's
    ``--bind``)."""
    for bind in binds:
        if "," in bind:
            raise ContainerError(
                f"environment.container.binds: {bind!r}: {runtime} separates its {what} with "
                f"commas, so a path holding one cannot be {'mounted' if what == 'mounts' else 'bound'}"
            )


def home_path(value: str) -> Word:
    """A path for the middle of a shell word: a leading ``~/`` becomes ``"$HOME"/`` (the shell
    expands a tilde only at a word's start); ``~user`` cannot be, and is refused."""
    if value == "~" or value.startswith("~/"):
        return ShellVar('"$HOME"' + (quote_word(value[1:]) if value[1:] else ""))
    if value.startswith("~"):
        raise ContainerError(
            f"environment.container: {value!r}: write another user's directory out in full "
            "(~user is expanded only at the start of a word)"
        )
    return value


def bind_word(src: str, dst: str) -> Word:
    """``SRC:DST`` as one shell word, either path starting with ``~/`` expanded on the node."""
    return joined(home_path(src), ":", home_path(dst))


def bind_options(flag: str, binds: list[str]) -> list[Word]:
    """``FLAG SRC:DST`` for each bind (the target the source where not given)."""
    return [w for src, dst in bind_pairs(binds) for w in (flag, bind_word(src, dst))]


def joined(*parts: Word) -> Word:
    """One shell word made of parts (literals quoted, hpcbench's expressions as written): the
    shell joins adjacent quoted strings, ``--x="$PWD":'/a b'``."""
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)  # type: ignore[arg-type]
    return ShellVar("".join(p.text if isinstance(p, ShellVar) else quote_word(p) for p in parts))


def image_word(spec: JobSpec) -> Word:
    """The image as a shell word (a leading ``~`` expanded on the compute node)."""
    assert spec.environment.container is not None
    return path_word(spec.environment.container.image)


class ContainerRuntime:
    """One way to run ranks in an image. A subclass with a ``name``, in its own module of this
    package, is a runtime: ``environment.container.runtime`` takes it, and every launcher and
    scheduler renders it without an edit."""

    #: the name users give (``runtime = "NAME"``, ``--container-runtime NAME``)
    name: ClassVar[str] = ""
    #: where it stands among the choices listed (lowest first)
    order: ClassVar[int] = 50
    #: the one batch system it runs under, by the scheduler's name ('' for any)
    only_under: ClassVar[str] = ""
    #: the launchers it works with (empty: every one)
    launchers: ClassVar[tuple[str, ...]] = ()
    #: what ``image`` names, for messages and docs
    image_is: ClassVar[str] = "an image file"

    @classmethod
    def rank_words(cls, spec: JobSpec) -> list[Word]:
        """The words before each rank's program (or each torchrun agent)."""
        return []

    @classmethod
    def srun_flags(cls, spec: JobSpec) -> list[Word]:
        """Options of the ``srun`` that starts the ranks or the node agents."""
        return []

    @classmethod
    def check(cls, spec: JobSpec, scheduler: str, launcher: str) -> None:
        """Refuse, in one line, a scheduler or a launcher this runtime cannot work with."""
        if cls.only_under and scheduler != cls.only_under:
            raise ContainerError(
                f"environment.container.runtime: {cls.name} runs only under {cls.only_under}, "
                f"not {scheduler}"
            )
        if cls.launchers and launcher not in cls.launchers:
            raise ContainerError(
                f"environment.container.runtime: {cls.name} starts ranks only through "
                f"{' or '.join(cls.launchers)}, not {launcher} (launcher.kind)"
            )
