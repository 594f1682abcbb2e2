"""One login node and the working directory there that mirrors a local directory: its
commands run through ssh in that directory (local paths in their arguments become the remote
ones), files go there (:meth:`RemoteHost.push`) and come back (:meth:`RemoteHost.pull`) with
rsync where both sides have it, else scp."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcbench.jobs.remote.ssh import check_target, failure, ssh_options
from hpcbench.jobs.schedulers.base import JobRecord
from hpcbench.jobs.schedulers.commands import run_here
from hpcbench.jobs.schedulers.errors import SchedulerError, SchedulerUnreachable

#: the remote working directory when none is given: under the remote home, by the local name
DEFAULT_REMOTE_ROOT = "hpcbench"


def login_for(record: JobRecord | None) -> RemoteHost | None:
    """The login node a recorded job was submitted to over SSH (None: this machine's)."""
    if record is None or not record.host:
        return None
    return RemoteHost(record.host, Path(record.local_dir), record.remote_dir)


class RemoteError(SchedulerError):
    """The login node cannot be reached or refused us; one line saying what to do."""


class LoginUnreachable(RemoteError, SchedulerUnreachable):
    """ssh itself failed (no route, a refused key, a changed host key): no command reaches the
    login node now, so a matrix stops with its runs as they are and a poll asks again later."""


@dataclass
class RemoteHost:
    """``target`` (``user@login.cluster`` or an ssh alias), the ``remote_dir`` there (relative
    to the remote home, or absolute) that mirrors ``local_dir`` here."""

    target: str
    local_dir: Path
    remote_dir: str = ""
    _ready: bool = field(default=False, repr=False)
    _has_rsync: bool | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        try:
            check_target(self.target)
        except ValueError as err:
            raise RemoteError(f"host: {self.target!r}: {err}") from None
        self.local_dir = Path(self.local_dir).resolve()
        if not self.remote_dir:
            self.remote_dir = f"{DEFAULT_REMOTE_ROOT}/{self.local_dir.name or 'root'}"
        if "\n" in self.remote_dir or self.remote_dir.startswith("-"):
            raise RemoteError(f"remote_dir: {self.remote_dir!r} is not a directory name")

    # ---------------------------------------------------------------------- commands

    def remote_path(self, local: str | Path) -> str:
        """The remote path of a local path inside ``local_dir`` (relative to the remote home
        when ``remote_dir`` is); other paths unchanged."""
        text = str(local)
        root = str(self.local_dir)
        if text == root:
            return self.remote_dir
        if text.startswith(root + "/"):
            return f"{self.remote_dir}/{text[len(root) + 1 :]}"
        return text

    def translate(self, word: str) -> str:
        """An argument with the local directory in it (``PATH``, ``--opt=PATH``) made remote."""
        root = str(self.local_dir)
        if root not in word:
            return word
        head, sep, tail = word.partition("=")
        if sep and tail.startswith(root):
            return f"{head}={self.remote_path(tail)}"
        return self.remote_path(word)

    def ssh(self, remote_command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run one shell command line on the login node (its exit status whatever it is)."""
        argv = ["ssh", *ssh_options(), self.target, remote_command]
        proc = run_here(argv, f"ssh {self.target}", timeout)
        if proc.returncode == 255:
            raise LoginUnreachable(failure(self.target, proc.stderr))
        return proc

    def run(
        self,
        argv: Sequence[str],
        what: str,
        timeout: float = 60,
        stdin_file: Path | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a scheduler command in the remote working directory (or ``cwd``'s remote place),
        ``stdin_file``'s remote copy as its input; a missing command there is one line naming
        the host."""
        self.prepare(timeout)
        words = [self.translate(str(w)) for w in argv]
        where = self.remote_path(cwd) if cwd is not None else self.remote_dir
        line = f"cd {shlex.quote(where)} && exec {shlex.join(words)}"
        if stdin_file is not None:
            line += f" < {shlex.quote(self.remote_path(stdin_file))}"
        proc = self.ssh(line, timeout)
        if proc.returncode == 127 and "not found" in proc.stderr:
            raise RemoteError(f"{what}: {words[0]} not found on {self.target}'s PATH")
        return proc

    def prepare(self, timeout: float = 60) -> None:
        """Make the remote working directory (once per process)."""
        if self._ready:
            return
        proc = self.ssh(f"mkdir -p -- {shlex.quote(self.remote_dir)}", timeout)
        if proc.returncode != 0:
            said = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
            raise RemoteError(f"{self.target}: cannot make {self.remote_dir}: {said}")
        self._ready = True

    def check_hpcbench(self, python: str, timeout: float = 60) -> None:
        """Refuse in one line a login node where the jobs' Python is missing or cannot import
        hpcbench (asked where the job's script runs: the remote working directory)."""
        proc = self.run([python, "-c", "import hpcbench"], "the job's Python", timeout)
        if proc.returncode != 0:
            raise RemoteError(
                f"{self.target}: {python} cannot import hpcbench: install it in the environment "
                "your jobs use (pip install hpcbench), or name that environment (--venv, --load)"
            )

    # ------------------------------------------------------------------------- files

    def push(self, paths: Sequence[Path], timeout: float = 600) -> None:
        """Copy local files or directories inside ``local_dir`` to the same places remotely."""
        rels = [self._relative(p) for p in paths if Path(p).exists()]
        if not rels:
            return
        self.prepare()
        parents = sorted({str(Path(r).parent) for r in rels if str(Path(r).parent) != "."})
        if parents:
            quoted = " ".join(shlex.quote(self.remote_path(self.local_dir / p)) for p in parents)
            self.ssh(f"mkdir -p -- {quoted}", timeout)
        if self._rsync(timeout):
            sources = [f"./{r}" for r in rels]
            self._copy(["rsync", "-a", "--relative", "-e", self._rsh(), *sources,
                        f"{self.target}:{self.remote_dir}/"], timeout)  # fmt: skip
            return
        for rel in rels:
            dest = f"{self.target}:{self.remote_path(self.local_dir / rel)}"
            self._copy(["scp", "-p", "-r", *ssh_options(), f"./{rel}", dest], timeout)

    def pull(self, paths: Sequence[Path], timeout: float = 600) -> None:
        """Bring remote files or directories back to the same places here, incrementally with
        rsync (only what changed); what does not exist remotely yet is left alone."""
        rels = [self._relative(p) for p in paths]
        if not rels:
            return
        self.prepare()
        quoted = " ".join(shlex.quote(self.remote_path(self.local_dir / r)) for r in rels)
        there = self.ssh(f'for p in {quoted}; do [ -e "$p" ] && echo y || echo n; done', timeout)
        found = [r for r, y in zip(rels, there.stdout.split(), strict=False) if y == "y"]
        for rel in found:
            (self.local_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        if not found:
            return
        if self._rsync(timeout):
            sources = [f"{self.target}:{self.remote_dir}/./{r}" for r in found]
            self._copy(["rsync", "-a", "--relative", "-e", self._rsh(), *sources, "./"], timeout)
            return
        for rel in found:
            source = f"{self.target}:{self.remote_path(self.local_dir / rel)}"
            dest = str((self.local_dir / rel).parent)
            self._copy(["scp", "-p", "-r", *ssh_options(), source, dest], timeout)

    def _relative(self, path: Path) -> str:
        resolved = Path(os.path.normpath(self.local_dir / path))  # no ".." left to climb out
        try:
            return str(resolved.relative_to(self.local_dir))
        except ValueError:
            raise RemoteError(
                f"{path}: only files under {self.local_dir} go to {self.target}"
            ) from None

    def _rsh(self) -> str:
        return shlex.join(["ssh", *ssh_options()])

    def _rsync(self, timeout: float) -> bool:
        """Whether both sides have rsync (asked once)."""
        if self._has_rsync is None:
            here = shutil.which("rsync") is not None
            self._has_rsync = here and self.ssh("command -v rsync", timeout).returncode == 0
        return self._has_rsync

    def _copy(self, argv: list[str], timeout: float) -> None:
        proc = run_here(argv, f"{argv[0]} with {self.target}", timeout, cwd=self.local_dir)
        if argv[0] == "rsync" and proc.returncode == 24:  # files that vanished meanwhile
            return  # (a run's temporary files, renamed as they are written): the rest came
        if proc.returncode != 0:
            if "Permission denied" in proc.stderr or "Host key" in proc.stderr:
                raise LoginUnreachable(failure(self.target, proc.stderr))
            said = " ".join(proc.stderr.split())[:300] or f"exit status {proc.returncode}"
            raise RemoteError(f"{argv[0]} with {self.target}: {said}")
