"""The files a job's program reads, looked for before anything is queued: a ``program.script``
that is not there (the job would queue, start, and fail behind the launcher's wall of text), and
the trainer's ``--data`` without a dataset. Where the job runs on this machine (the local
scheduler) a missing one is refused in one line; on a cluster the compute nodes may see other
files than this machine (a container's image, node-local storage, another side of SSH), so it is
a warning saying so."""

from __future__ import annotations

from pathlib import Path

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
    module = program.module or ("" if program.command or program.script else DEFAULT_PROGRAM_MODULE)
    if module == DEFAULT_PROGRAM_MODULE and not spec.environment.container:
        data = _option_value(program.args, "--data")
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


def _option_value(args: list[str], option: str) -> str | None:
    """The last value given to ``option`` (``--data X`` or ``--data=X``) in ``args``."""
    value = None
    for i, word in enumerate(args):
        if word == "--":
            break
        if word == option and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith(option + "="):
            value = word[len(option) + 1 :]
    return value
