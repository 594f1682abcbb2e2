"""Where a job's files go: the one definition of its stdout, stderr and run directory under
``resources.output_dir``, read by Python and written by the template alike.

Every batch system has this part (the :class:`~.base.Scheduler` base includes it). By default the
logs are ``{name}-{id}.out`` and ``.err`` and the run directory ``{name}-{id}``, and the
template's log directives name them with the batch system's id token. A batch system sets
``log_id_token`` when its log directives substitute the job id (``%j``), ``log_names`` and
``run_dir_name`` when it names the files itself from a directory, ``escape_log_path`` when its
directives interpret characters of a path, and ``log_path_refusals`` for the characters it reads
in a way that cannot be escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from hpcbench.jobs.shell import quote_word
from hpcbench.jobs.spec import JobSpec


class LogLayout:
    """The batch script's logs and the run directory, as names with fields."""

    #: The one definition of where a job's files go, under ``resources.output_dir``: the batch
    #: script's stdout and stderr, and the run directory. ``{name}`` is the job's file name,
    #: ``{letter_name}`` the same starting with a letter, ``{id}`` the job id and ``{seq}`` its
    #: part before the first dot. Python reads them (:meth:`log_paths`, :meth:`run_dir`) and the
    #: template writes them (``log_directives``, ``run_dir_shell`` in its context).
    log_names: ClassVar[tuple[str, str]] = ("{name}-{id}.out", "{name}-{id}.err")
    run_dir_name: ClassVar[str] = "{name}-{id}"
    #: What the scheduler substitutes with the job id in its log directives (``%j``); None when
    #: it names the files itself from the job name and id, given only a directory.
    log_id_token: ClassVar[str | None] = None
    #: characters its log directives interpret, refused in ``resources.output_dir``:
    #: (character, its name, how it reads it)
    log_path_refusals: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    @staticmethod
    def _fields(spec: JobSpec, job_id: str) -> dict[str, str]:
        r = spec.resources
        return {
            "name": r.file_name,
            "letter_name": r.letter_first_name,
            "id": job_id,
            "seq": job_id.split(".", 1)[0],
        }

    def log_paths(self, spec: JobSpec, job_id: str, cwd: Path) -> tuple[Path, Path]:
        """Where the batch script's stdout and stderr go (as the template's directives say)."""
        base = cwd / spec.resources.output_dir
        fields = self._fields(spec, job_id)
        out, err = (name.format(**fields) for name in self.log_names)
        return base / out, base / err

    def run_dir(self, spec: JobSpec, job_id: str, cwd: Path) -> Path:
        fields = self._fields(spec, job_id)
        return cwd / spec.resources.output_dir / self.run_dir_name.format(**fields)

    @classmethod
    def escape_log_path(cls, path: str) -> str:
        """``path`` as the scheduler's log directive reads it literally (SLURM doubles ``%``)."""
        return path

    @classmethod
    def log_directives(cls, spec: JobSpec) -> tuple[str, str]:
        """The stdout and stderr paths the template writes in its directives: the file names of
        :attr:`log_names` with the scheduler's id token, or the directory alone (with a slash)
        when the scheduler names the files itself."""
        out_dir = cls.escape_log_path(spec.resources.output_dir)
        token = cls.array_log_token if spec.array is not None else cls.log_id_token
        if token is None:
            return f"{out_dir}/", f"{out_dir}/"
        fields = {**cls._fields(spec, token), "seq": token}
        out, err = (name.format(**fields) for name in cls.log_names)
        return f"{out_dir}/{out}", f"{out_dir}/{err}"

    @classmethod
    def run_dir_shell(cls, spec: JobSpec) -> str:
        """The run directory as a shell word for the script, the id read from ``$job_id``."""
        marker = "\x00"
        fields = {**cls._fields(spec, marker), "seq": marker}
        before, _, after = cls.run_dir_name.format(**fields).partition(marker)
        word = quote_word(f"{spec.resources.output_dir}/{before}") + '"$job_id"'
        return word + (quote_word(after) if after else "")
