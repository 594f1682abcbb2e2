"""A throwaway OpenSSH server on 127.0.0.1 (Debian's openssh-server): its own host key, a test
key authorised for this user, a port of its own, and an ssh client configuration naming it
``login`` (``ssh -F``: ``HPCBENCH_SSH_CONFIG``) with its host key in a known_hosts file of its
own. "The laptop" runs hpcbench with that configuration; "the cluster" behind the login node is
this machine's test SLURM cluster. Every connection it accepts is logged (``accepted()``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Login:
    config: Path  # the client configuration: Host login -> this server
    log: Path  # sshd's log: one "Accepted publickey" line per connection
    process: subprocess.Popen
    root: Path

    def accepted(self) -> int:
        """How many connections the server has accepted so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def client_config(self, name: str, **changes: str) -> Path:
        """Another client configuration: this one with ``changes`` (ssh option -> value)."""
        lines = [
            line
            for line in self.config.read_text().splitlines()
            if line.strip().split(" ", 1)[0] not in changes
        ]
        path = self.root / name
        path.write_text("\n".join([*lines, *(f"  {k} {v}" for k, v in changes.items())]) + "\n")
        return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_login(root: Path, extra: str = "") -> Login:
    """Start the server (``extra``: more lines of its configuration); stop it with
    :func:`stop_login`."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    root.mkdir(parents=True, exist_ok=True)
    keygen(root / "host_key")
    keygen(root / "user_key")
    keygen(root / "other_key")  # a key the server does not know
    (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
    port = free_port()
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\n"
        f"PidFile {root / 'sshd.pid'}\nAuthorizedKeysFile {root / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nLogLevel INFO\n"
        "MaxStartups 50\nMaxSessions 50\n" + extra
    )
    log = root / "sshd.log"
    log.touch()
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config), "-E", str(log)])
    host_key = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    client = root / "ssh_config"
    client.write_text(
        "Host login\n  HostName 127.0.0.1\n"
        f"  Port {port}\n  User {os.environ.get('USER') or 'root'}\n"
        f"  IdentityFile {root / 'user_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {root / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  LogLevel ERROR\n"
    )
    deadline = time.monotonic() + 30
    while True:  # ready when it accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {log.read_text()}") from None
            time.sleep(0.1)
    return Login(client, log, process, root)


def stop_login(login: Login) -> None:
    login.process.terminate()
    try:
        login.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        login.process.kill()
