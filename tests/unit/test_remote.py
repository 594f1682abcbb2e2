"""The SSH path's own parts, without a server: ssh's failures as one line each (from what
OpenSSH prints), the hosts a spec accepts, local paths made remote in a command's arguments,
and the job records that remember a login node (and the older ones that do not). The path end
to end, through a real sshd in front of the test SLURM cluster, is tests/cluster/test_ssh.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.jobs import job_store
from hpcbench.jobs.remote import RemoteError, RemoteHost, login_for
from hpcbench.jobs.remote.ssh import check_target, failure, ssh_options
from hpcbench.jobs.schedulers.base import JobRecord

CHANGED = """@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
Host key verification failed."""


@pytest.mark.parametrize(
    "stderr, said",
    [
        (CHANGED, "login's host key is not one your known_hosts holds"),
        ("Host key verification failed.\r\n", "login's host key is not one your known_hosts"),
        ("root@127.0.0.1: Permission denied (publickey).", "login refused your key: load it"),
        ("ssh: connect to host 127.0.0.1 port 1: Connection refused", "login is unreachable: ssh"),
        ("ssh: Could not resolve hostname nope: Name or service not known", "login is unreachable"),
        ("kex_exchange_identification: Connection closed by remote host", "login is unreachable"),
        ("something new", "ssh login: something new"),
        ("", "ssh login: no answer"),
    ],
)
def test_ssh_failures_are_one_line_saying_what_to_do(stderr, said):
    line = failure("login", stderr)
    assert said in line and "\n" not in line and "\r" not in line


@pytest.mark.parametrize("target", ["login", "alice@login.cluster", "a-b_c.d", "u.1@h-2"])
def test_user_at_host_and_aliases_are_hosts(target):
    assert check_target(target) == target


@pytest.mark.parametrize(
    "target", ["-oProxyCommand=x", "a b", "x;y", "@h", "", "h\nx", "a@b@c", "h:22", "$(x)"]
)
def test_anything_else_is_refused(target, tmp_path):
    with pytest.raises(ValueError, match="not USER@HOST"):
        check_target(target)
    with pytest.raises(RemoteError, match="host: "):
        RemoteHost(target, tmp_path)


def test_host_keys_are_always_checked_and_no_password_is_asked(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    options = ssh_options()
    assert "BatchMode=yes" in options and "ControlMaster=auto" in options
    assert not any("StrictHostKeyChecking" in o for o in options)
    sockets = tmp_path / "hpcbench" / "ssh"
    assert f"ControlPath={sockets}/%C" in options and sockets.stat().st_mode & 0o777 == 0o700


def test_local_paths_in_a_commands_arguments_become_the_remote_ones(tmp_path):
    host = RemoteHost("login", tmp_path, "/scratch/me/work")
    script = tmp_path / "runs" / "scripts" / "a.sh"
    assert host.translate(str(script)) == "/scratch/me/work/runs/scripts/a.sh"
    assert host.translate(f"--chdir={tmp_path}") == "--chdir=/scratch/me/work"
    assert host.translate("--parsable") == "--parsable"
    assert host.translate(f"{tmp_path}-other/x") == f"{tmp_path}-other/x"  # not inside it
    assert RemoteHost("login", tmp_path / "proj").remote_dir == "hpcbench/proj"
    with pytest.raises(RemoteError, match="remote_dir"):
        RemoteHost("login", tmp_path, "-rf")


def test_a_job_record_remembers_its_login_node_and_old_records_read_as_local(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    paths = [tmp_path / n for n in ("s.sh", "o", "e", "run")]
    far = JobRecord("12", "slurm", *paths, (), "alice@login", "/scratch/w", str(tmp_path))
    job_store.record(far)
    found = job_store.lookup("12", "slurm")
    assert found == far
    login = login_for(found)
    assert login is not None and (login.target, login.remote_dir) == ("alice@login", "/scratch/w")
    here = JobRecord("13", "slurm", *paths)
    job_store.record(here)
    assert job_store.lookup("13", "slurm") == here and login_for(here) is None
    assert "host" not in (tmp_path / "state" / "jobs" / "slurm" / "13.json").read_text()
    damaged = tmp_path / "state" / "jobs" / "slurm" / "14.json"
    damaged.write_text(far_json(far).replace('"alice@login"', "5"))
    with pytest.raises(Exception, match="damaged"):
        job_store.lookup("14", "slurm")


def far_json(record: JobRecord) -> str:
    import json

    return json.dumps({
        "job_id": "14", "scheduler": "slurm", "script": str(record.script_path),
        "stdout": str(record.stdout_path), "stderr": str(record.stderr_path),
        "run_dir": str(record.run_dir), "host": record.host, "remote_dir": record.remote_dir,
        "local_dir": record.local_dir,
    })  # fmt: skip


def test_the_script_is_the_same_whether_submitted_here_or_over_ssh():
    from hpcbench.jobs.render import render_script
    from hpcbench.jobs.spec_load import build_spec

    here = build_spec({"resources": {"nodes": 2}})
    far = build_spec({"resources": {"nodes": 2}, "scheduler": {"host": "alice@login"}})
    assert render_script(here, "slurm") == render_script(far, "slurm")


@pytest.mark.parametrize("target", ["-x@login", "-oBatchMode@h", "-@login"])
def test_a_target_ssh_would_read_as_an_option_is_refused(target, tmp_path):
    with pytest.raises(ValueError, match="option"):
        check_target(target)
    with pytest.raises(RemoteError, match="host: "):
        RemoteHost(target, tmp_path)


def test_a_home_relative_remote_dir_is_relative_to_the_home_and_tilde_user_is_refused(tmp_path):
    assert RemoteHost("login", tmp_path, "~/scratch/x").remote_dir == "scratch/x"
    assert RemoteHost("login", tmp_path, "~").remote_dir == "."
    for bad in ("~alice/x", "a\nb", "-rf"):
        with pytest.raises(RemoteError, match="remote_dir: .* not a directory name"):
            RemoteHost("login", tmp_path, bad)


def test_a_socket_directory_of_another_user_or_a_link_is_refused(monkeypatch, tmp_path):
    import os

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    (tmp_path / "hpcbench").mkdir()
    (tmp_path / "hpcbench" / "ssh").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="not a directory of yours"):
        ssh_options()
    host = RemoteHost("login", tmp_path)
    with pytest.raises(RemoteError, match="not a directory of yours"):
        host.ssh("true", 5)
    if os.getuid() == 0:  # a directory another user owns
        (tmp_path / "hpcbench" / "ssh").unlink()
        (tmp_path / "hpcbench" / "ssh").mkdir(mode=0o700)
        os.chown(tmp_path / "hpcbench" / "ssh", 65534, 65534)
        with pytest.raises(ValueError, match="not a directory of yours"):
            ssh_options()


def test_legacy_scp_carries_only_paths_no_shell_reads_as_more(monkeypatch):
    from hpcbench.jobs.remote import transfer

    monkeypatch.setattr(transfer, "scp_speaks_sftp", lambda: False)
    assert transfer.check_carried("hpcbench/proj/runs/far-1", "login") == "hpcbench/proj/runs/far-1"
    for bad in ("runs;touch x;#", "a b", "$(id)", "x`id`", "r\nx"):
        with pytest.raises(ValueError, match="passes paths through login's shell"):
            transfer.check_carried(bad, "login")
    assert transfer.scp_options() == []
    monkeypatch.setattr(transfer, "scp_speaks_sftp", lambda: True)
    assert transfer.check_carried("runs;touch x;#", "login") == "runs;touch x;#"
    assert transfer.scp_options() == ["-s"]


def test_rsync_is_never_told_to_hand_paths_to_the_shell(monkeypatch):
    from hpcbench.jobs.remote import transfer

    monkeypatch.setenv("RSYNC_OLD_ARGS", "1")
    assert "RSYNC_OLD_ARGS" not in transfer.copy_env()
    assert "--protect-args" in transfer.PULL_OPTIONS and "--protect-args" in transfer.PUSH_OPTIONS
    # what comes back: no devices, FIFOs, permissions (set-id bits), owners, links
    assert not {"-a", "-p", "-o", "-g", "-D", "--devices", "--specials"} & set(
        transfer.PULL_OPTIONS
    )
    assert "-l" not in transfer.PULL_OPTIONS and "--links" not in transfer.PULL_OPTIONS


def test_a_results_directory_does_not_choose_a_login_node_never_used(tmp_path, monkeypatch):
    """A results directory from someone else may record any login node: continuing it without
    ``--host`` goes there only if this user has submitted there before; else one line asks for
    ``--host`` to confirm it."""
    from hpcbench.jobs.spec import SpecError
    from hpcbench.jobs.submission import recorded_login

    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    recorded = {"login": {"host": "attacker.example", "remote_dir": "/tmp/x"}}
    doc, results = tmp_path / "r" / "sweep.json", tmp_path / "r"
    with pytest.raises(SpecError, match="give --host attacker.example to continue there"):
        recorded_login(doc, recorded, {}, results, tmp_path)
    given = {"host": "attacker.example", "remote_dir": "/tmp/x"}
    assert recorded_login(doc, recorded, given, results, tmp_path)["host"] == "attacker.example"
    job_store.record(JobRecord("7", "slurm", tmp_path / "s", tmp_path / "o", tmp_path / "e",
                              tmp_path / "d", (), "attacker.example", "/tmp/x", str(tmp_path)))  # fmt: skip
    assert recorded_login(doc, recorded, {}, results, tmp_path)["host"] == "attacker.example"


def test_an_rsync_that_cannot_protect_its_arguments_is_not_used(tmp_path, monkeypatch):
    """A stock macOS rsync (2.6.9, or openrsync) refuses --protect-args: hpcbench copies with
    scp over SFTP instead of failing every push and pull."""
    from hpcbench.jobs.remote import transfer

    for said, protects in (("rsync  version 2.6.9  protocol version 29", False),
                           ("openrsync: protocol version 29", False),
                           ("rsync  version 3.2.7  protocol version 31", True)):  # fmt: skip
        fake = tmp_path / "rsync"
        fake.write_text(f"#!/bin/sh\necho '{said}'\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
        transfer.rsync_protects_args.cache_clear()
        assert transfer.rsync_protects_args() is protects, said
    transfer.rsync_protects_args.cache_clear()


def test_a_results_directory_does_not_choose_a_directory_on_the_login_node(tmp_path, monkeypatch):
    """The host may be one this user knows, the recorded remote directory another user's (a
    directory they can write, to change the scripts and code before the job starts): used
    without ``--remote-dir`` only where this user's jobs on that host went before."""
    from hpcbench.jobs.spec import SpecError
    from hpcbench.jobs.submission import recorded_login

    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    job_store.record(JobRecord("7", "slurm", tmp_path / "s", tmp_path / "o", tmp_path / "e",
                              tmp_path / "d", (), "cluster", "/home/me/hpcbench/proj",
                              str(tmp_path)))  # fmt: skip
    doc, results = tmp_path / "r" / "sweep.json", tmp_path / "r"
    for hostile in ("/tmp/shared-by-mallory", "../mallory/x", "hpcbench/other"):
        recorded = {"login": {"host": "cluster", "remote_dir": hostile}}
        for given in ({}, {"host": "cluster"}):
            with pytest.raises(SpecError, match="give --remote-dir"):
                recorded_login(doc, recorded, given, results, tmp_path)
        given = {"host": "cluster", "remote_dir": hostile}  # said again by the user: theirs
        assert recorded_login(doc, recorded, given, results, tmp_path)["remote_dir"] == hostile
    for known in ("/home/me/hpcbench/proj", "hpcbench/proj", "~/hpcbench/proj"):
        recorded = {"login": {"host": "cluster", "remote_dir": known}}
        assert recorded_login(doc, recorded, {}, results, tmp_path)["remote_dir"] == known


def test_a_cancel_marks_its_job_and_its_continuations_run_directory_never_through_a_link(
    tmp_path, monkeypatch
):
    """The mark goes into the run directory of the job cancelled, or of the job a continuation
    (a resubmission of itself, named in control/continued-as) continues; never through a
    linked control directory, never over a file already there; taken back when the scheduler
    refuses the cancel."""
    from hpcbench.jobs.cancel_mark import MARK, cancel_marks

    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))

    def job(job_id: str, run: Path) -> Path:
        (run / "control").mkdir(parents=True)
        job_store.record(JobRecord(job_id, "pbs", tmp_path / "s", tmp_path / "o", tmp_path / "e",
                                  run))  # fmt: skip
        return run / "control"

    first = job("100", tmp_path / "run-100")
    (first / "continued-as").write_text("101.server\n")
    with cancel_marks(["101"], "pbs"):  # the continuation: no record of its own
        pass
    assert (first / MARK).read_text() == "cancel\n"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run-200").mkdir()
    (tmp_path / "run-200" / "control").symlink_to(elsewhere)
    job_store.record(JobRecord("200", "pbs", tmp_path / "s", tmp_path / "o", tmp_path / "e",
                              tmp_path / "run-200"))  # fmt: skip
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    third = job("300", tmp_path / "run-300")
    (third / MARK).symlink_to(victim)  # planted: never written through
    with cancel_marks(["200", "300"], "pbs"):
        pass
    assert list(elsewhere.iterdir()) == [] and victim.read_text() == "mine\n"

    fourth = job("400", tmp_path / "run-400")
    with pytest.raises(RuntimeError), cancel_marks(["400"], "pbs"):
        assert (fourth / MARK).exists()
        raise RuntimeError("qdel refused")
    assert not (fourth / MARK).exists()  # a later preemption still requeues
