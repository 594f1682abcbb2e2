"""One login node and the working directory there that mirrors a local directory: its
commands run through ssh in that directory (local paths in their arguments become the remote
ones), files go there (:meth:`RemoteHost.push`) and come back (:meth:`RemoteHost.pull`) with
rsync where both sides have it, else scp."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcbench.jobs.remote.ssh import check_target, failure, ssh_options
from hpcbench.jobs.remote.transfer import (
    PULL_OPTIONS,
    PUSH_OPTIONS,
    check_carried,
    copy_env,
    disarm,
    rsync_protects_args,
    scp_options,
)
from hpcbench.jobs.schedulers.base import JobRecord
from hpcbench.jobs.schedulers.commands import run_here
from hpcbench.jobs.schedulers.errors import SchedulerError, SchedulerUnreachable

#: the remote working directory when none is given: under the remote home, by the local name
DEFAULT_REMOTE_ROOT = "hpcbench"


#: the prefix of the lines hpcbench reads back from a remote shell (a banner is not one)
_MARK = "hpcbench-answer:"


def _home_relative(remote_dir: str) -> str:
    """``remote_dir`` as the shell on the login node reads it: ``~/x`` is ``x`` (the commands
    start in the home); refused in one line when it is not a directory name."""
    text = remote_dir.strip()
    if text in ("~", "~/"):
        return "."
    if text.startswith("~/"):
        text = text[2:]
    if "\n" in text or "\0" in text or text.startswith(("-", "~")):
        raise RemoteError(
            f"remote_dir: {remote_dir!r} is not a directory name (give a path relative to the "
            "remote home, or an absolute one; ~user is not read)"
        )
    return text


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
        self.remote_dir = _home_relative(self.remote_dir) or (
            f"{DEFAULT_REMOTE_ROOT}/{self.local_dir.name or 'root'}"
        )

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
        argv = ["ssh", *self._options(), self.target, remote_command]
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
        """Make the remote working directory (once per process) and name it by its absolute
        path from then on: every path the login node sees (the command's directory, the
        script's, the logs') is then the same one, wherever a command runs there."""
        if self._ready:
            return
        # ./ before a relative path: a CDPATH the remote shell sets is not searched
        relative = not self.remote_dir.startswith("/")
        where = shlex.quote(("./" if relative else "") + self.remote_dir)
        proc = self.ssh(
            f'mkdir -p -- {where} && cd -- {where} && printf "\\n{_MARK}%s\\n" "$PWD"', timeout
        )
        found = [line[len(_MARK) :] for line in proc.stdout.splitlines() if line.startswith(_MARK)]
        if proc.returncode != 0 or not found or not found[-1].startswith("/"):
            said = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
            raise RemoteError(f"{self.target}: cannot make {self.remote_dir}: {said}")
        self.remote_dir = found[-1]
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
            self._copy(["rsync", *PUSH_OPTIONS, "--relative", "-e", self._rsh(), *sources,
                        f"{self.target}:{self.remote_dir}/"], timeout)  # fmt: skip
            return
        for rel in rels:
            dest = f"{self.target}:{self._carried(self.remote_path(self.local_dir / rel))}"
            self._copy(["scp", *scp_options(), "-p", "-r", *self._options(), f"./{rel}", dest],
                       timeout)  # fmt: skip

    def pull(self, paths: Sequence[Path], timeout: float = 600) -> None:
        """Bring remote files or directories back to the same places here, incrementally with
        rsync (only what changed); what does not exist remotely yet is left alone."""
        rels = [self._relative(p) for p in paths]
        if not rels:
            return
        self.prepare()
        quoted = " ".join(shlex.quote(self.remote_path(self.local_dir / r)) for r in rels)
        there = self.ssh(  # marked answers: a login shell's banner on stdout is no answer
            f'for p in {quoted}; do [ -e "$p" ] && echo {_MARK}y || echo {_MARK}n; done', timeout
        )
        answers = [
            line[len(_MARK) :] for line in there.stdout.splitlines() if line.startswith(_MARK)
        ]
        found = [r for r, y in zip(rels, answers, strict=False) if y == "y"]
        for rel in found:
            (self.local_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        if not found:
            return
        if self._rsync(timeout):
            sources = [f"{self.target}:{self.remote_dir}/./{r}" for r in found]
            self._copy(["rsync", *PULL_OPTIONS, "--relative", "-e", self._rsh(), *sources, "./"],
                       timeout)  # fmt: skip
            return
        for rel in found:
            source = f"{self.target}:{self._carried(self.remote_path(self.local_dir / rel))}"
            dest = str((self.local_dir / rel).parent)
            self._copy(["scp", *scp_options(), "-r", *self._options(), source, dest], timeout)
        disarm(self.local_dir, found)

    def _carried(self, path: str) -> str:
        try:
            return check_carried(path, self.target)
        except ValueError as err:
            raise RemoteError(str(err)) from None

    def _relative(self, path: Path) -> str:
        resolved = Path(os.path.normpath(self.local_dir / path))  # no ".." left to climb out
        try:
            return str(resolved.relative_to(self.local_dir))
        except ValueError:
            raise RemoteError(
                f"{path}: only files under {self.local_dir} go to {self.target}"
            ) from None

    def _rsh(self) -> str:
        return shlex.join(["ssh", *self._options()])

    def _options(self) -> list[str]:
        try:
            return ssh_options()
        except ValueError as err:
            raise RemoteError(str(err)) from None

    def _rsync(self, timeout: float) -> bool:
        """Whether both sides have rsync (asked once)."""
        if self._has_rsync is None:
            here = rsync_protects_args()  # an rsync that keeps paths from the remote shell
            self._has_rsync = here and self.ssh("command -v rsync", timeout).returncode == 0
        return self._has_rsync

    def _copy(self, argv: list[str], timeout: float) -> None:
        proc = run_here(argv, f"{argv[0]} with {self.target}", timeout, cwd=self.local_dir,
                        env=copy_env())  # fmt: skip
        if argv[0] == "rsync" and proc.returncode == 24:  # files that vanished meanwhile
            return  # (a run's temporary files, renamed as they are written): the rest came
        if proc.returncode != 0:
            if "Permission denied" in proc.stderr or "Host key" in proc.stderr:
                raise LoginUnreachable(failure(self.target, proc.stderr))
            if argv[0] == "scp" and "Connection closed" in proc.stderr:
                raise RemoteError(
                    f"scp with {self.target}: the login node has no rsync, and closed the "
                    "connection scp copies over (SFTP): install rsync there (or here), or ask "
                    "the site whether its SFTP subsystem is off"
                )
            said = " ".join(proc.stderr.split())[:300] or f"exit status {proc.returncode}"
            raise RemoteError(f"{argv[0]} with {self.target}: {said}")
