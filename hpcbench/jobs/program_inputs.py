"""The files a job's program reads, looked for before anything is queued: a ``program.script``
that is not there (the job would queue, start, and fail behind the launcher's wall of text), and
the trainer's ``--data`` without a dataset. Where the job runs on this machine (the local
scheduler) a missing one is refused in one line; on a cluster the compute nodes may see other
files than this machine (a container's image, node-local storage, another side of SSH), so it is
a warning saying so."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from hpcbench.jobs.spec import DEFAULT_PROGRAM_MODULE, JobSpec, SpecError

#: what marks a directory as a dataset hpcbench prep wrote (hpcbench.data's manifest)
MANIFEST = "manifest.json"
#: where the trainer generates the built-in dataset when it is missing
GENERATED_DATA = ("data", "shapes")


def check_program_inputs(spec: JobSpec, here: bool, workdir: Path) -> list[str]:
    """Raise :class:`SpecError` for a missing input of a job that runs on this machine
    (``here``); return the warnings for one that runs elsewhere."""
    missing = [f"{field}: {path}: {what}" for field, path, what in _missing(spec, workdir)]
    if not missing:
        return []
    if here:
        raise SpecError(f"{missing[0]} (the job runs on this machine, and would fail at its start)")
    return [f"{m}, not from here: the job fails at its start unless its nodes see it"
            for m in missing]  # fmt: skip


def _missing(spec: JobSpec, workdir: Path) -> list[tuple[str, str, str]]:
    program, found = spec.program, []
    if program.script and not spec.environment.container:  # an image may hold the script
        if not _resolve(program.script, workdir).is_file():
            found.append(("program.script", program.script, "no such file"))
    if program.module_run() == DEFAULT_PROGRAM_MODULE and not spec.environment.container:
        data = _data_given(program.args)
        if data is not None and Path(data).parts[-2:] != GENERATED_DATA:
            root = _resolve(data, workdir)
            if not (root / MANIFEST).is_file():
                what = "no dataset there (make one with 'hpcbench prep …')" if root.is_dir() \
                    else "no such directory"  # fmt: skip
                found.append(("program.args --data", data, what))
    return found


def _resolve(path: str, workdir: Path) -> Path:
    expanded = Path(path).expanduser()
    return expanded if expanded.is_absolute() else workdir / expanded


def _data_given(args: list[str]) -> str | None:
    """The trainer's ``--data`` as its own parser reads ``args`` (None when not given)."""
    from hpcbench.train.command_line import build_parser  # torch-free, as render reads it

    parser = build_parser()

    def refuse(message: str) -> NoReturn:  # a bad argument: render refuses it in one line
        raise ValueError(message)

    parser.error = refuse  # type: ignore[method-assign]
    try:
        given, _ = parser.parse_known_args(args)
    except (ValueError, argparse.ArgumentError):
        return None
    return getattr(given, "data", None)
