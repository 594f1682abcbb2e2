"""How files cross to and from a login node safely: rsync with its arguments protected from the
remote shell (``--protect-args``: an old rsync, or ``RSYNC_OLD_ARGS=1``, would otherwise hand a
path such as ``runs;touch x;#`` to the login node's shell), and only regular files, directories
and links that stay inside the tree brought back (no FIFOs, devices, owners or set-id bits);
scp over SFTP where the client has it (``scp -s``), and with the legacy protocol only for paths
that no shell could read as anything but a path."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from functools import lru_cache
from pathlib import Path

#: what a path may hold where it passes through the login node's shell (legacy scp)
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9._+,@%/=:-]+$")
#: rsync options that bring back a tree as plain files: recursive, times kept; no links (one
#: "inside" the tree could still point anywhere in this directory), permissions (no set-id
#: bits), owners, groups, devices or FIFOs
PULL_OPTIONS = ("-r", "-t", "--protect-args")
PUSH_OPTIONS = ("-a", "--protect-args")


@lru_cache(maxsize=1)
def rsync_protects_args() -> bool:
    """Whether this machine's rsync takes ``--protect-args`` (rsync 3.0 and later; not the
    rsync 2.6.9 or openrsync of a stock macOS): without it hpcbench copies with scp."""
    rsync = shutil.which("rsync")
    if rsync is None:
        return False
    try:
        said = subprocess.run([rsync, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    found = re.search(r"^rsync\s+version\s+v?(\d+)\.", said.stdout, re.MULTILINE)
    return bool(found) and int(found[1]) >= 3


def copy_env() -> dict[str, str]:
    """This environment without what would turn rsync's argument protection off."""
    env = dict(os.environ)
    env.pop("RSYNC_OLD_ARGS", None)
    return env


@lru_cache(maxsize=1)
def scp_speaks_sftp() -> bool:
    """Whether this machine's scp takes ``-s`` (SFTP, OpenSSH 8.7 and later; the default from 9.0):
    its paths then never reach the login node's shell."""
    ssh = shutil.which("ssh")
    if ssh is None:
        return False
    try:
        said = subprocess.run([ssh, "-V"], capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.TimeoutExpired):
        return False
    found = re.search(r"OpenSSH_(\d+)\.(\d+)", said)
    return bool(found) and (int(found[1]), int(found[2])) >= (8, 7)


def scp_options() -> list[str]:
    """SFTP where this scp speaks it, else the legacy protocol (paths then checked)."""
    return ["-s"] if scp_speaks_sftp() else []


def check_carried(path: str, target: str) -> str:
    """A remote path legacy scp may carry: refused in one line when the login node's shell
    could read it as more than a path."""
    if scp_speaks_sftp() or _SHELL_SAFE.fullmatch(path):
        return path
    raise ValueError(
        f"{path!r}: this scp (OpenSSH older than 8.7, no SFTP) passes paths through "
        f"{target}'s shell, and this one holds characters that shell would read; install rsync "
        "on both sides or a newer OpenSSH here, or use a plain directory name"
    )


def disarm(root: Path, rels: list[str]) -> None:
    """After scp brought ``rels`` back under ``root``: their set-id bits cleared (scp itself
    makes only regular files and directories)."""
    for rel in rels:
        top = root / rel
        walk = [top] + (list(top.rglob("*")) if top.is_dir() and not top.is_symlink() else [])
        for path in walk:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
