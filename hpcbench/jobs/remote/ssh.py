"""The user's OpenSSH client, with the options hpcbench adds: batch mode (never a password
prompt), one multiplexed connection kept a while for every later command (``ControlMaster``,
``ControlPersist``), keep-alives, a connection timeout; and ssh's failures as one line that says
what to do. Host keys are checked as the user's ``known_hosts`` says: never turned off."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

#: how long the shared connection outlives the last command (seconds)
CONTROL_PERSIST_S = 600
#: an ssh client configuration other than ~/.ssh/config (``ssh -F``)
CONFIG_VAR = "HPCBENCH_SSH_CONFIG"
_TARGET = re.compile(r"^(?:[A-Za-z0-9._%+-]+@)?[A-Za-z0-9][A-Za-z0-9._-]*$")

#: ssh's words for each way a connection fails, and what hpcbench says instead
_FAILURES = (
    (
        ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "{host}'s host key is not one your known_hosts holds: check it with your site, then "
        "add it (ssh {host} once; ssh-keygen -R {host} first if it changed); hpcbench never "
        "skips the check",
    ),
    (
        ("Permission denied",),
        "{host} refused your key: load it into your agent (ssh-add) or name it in ~/.ssh/config "
        "(IdentityFile); hpcbench asks for no password",
    ),
    (
        (
            "Could not resolve hostname",
            "Connection refused",
            "Connection timed out",
            "No route to host",
            "Network is unreachable",
            "Connection closed",
            "Connection reset",
        ),
        "{host} is unreachable: {said}",
    ),
)


def check_target(target: str) -> str:
    """``user@host`` or an ssh alias, refused in one line when it could be read as an option or
    holds anything but a user and host name."""
    if not _TARGET.fullmatch(target or ""):
        raise ValueError("not USER@HOST or a host name (letters, digits, . _ - only)")
    if target.startswith("-"):
        raise ValueError("a user or host name starting with '-' would be read as ssh's option")
    return target


def control_dir() -> Path:
    """Where the shared connections' sockets are: a directory of the user's alone."""
    base = os.environ.get("XDG_RUNTIME_DIR") or str(Path.home() / ".cache")
    path = Path(base) / "hpcbench" / "ssh"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    # another user's directory (or a link to one) would hold the sockets that carry every
    # command of this user's to the login node
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ValueError(
            f"{path}: the directory for ssh's shared connections is not a directory of yours "
            "(a link, or another user's): remove it, or set XDG_RUNTIME_DIR to a directory of "
            "your own"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def ssh_options() -> list[str]:
    """The options hpcbench gives every ssh (and scp and rsync's ssh)."""
    options = []
    if config := os.environ.get(CONFIG_VAR):
        options += ["-F", config]
    for option in (
        "BatchMode=yes",
        "ControlMaster=auto",
        f"ControlPath={control_dir()}/%C",
        f"ControlPersist={CONTROL_PERSIST_S}",
        "ConnectTimeout=20",
        "ServerAliveInterval=15",
        "ServerAliveCountMax=4",
    ):
        options += ["-o", option]
    return options


def failure(host: str, stderr: str) -> str:
    """ssh's failure (its exit status 255) as one line."""
    said = " ".join(line.strip() for line in stderr.splitlines() if line.strip()) or "no answer"
    for words, message in _FAILURES:
        if any(w in said for w in words):
            return message.format(host=host, said=said[:300])
    return f"ssh {host}: {said[:300]}"
