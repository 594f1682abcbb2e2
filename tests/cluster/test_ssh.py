"""Working from a laptop: hpcbench runs the test SLURM cluster's commands over SSH, through a
real OpenSSH server on 127.0.0.1 (tests/cluster/sshd.py) with its own host key and the test
user's key. "The laptop" is a hpcbench whose PATH has no batch system and whose directory is
not the cluster's: submit pushes the script into the working directory on the login node,
sbatch, squeue, sacct and scancel run there over one multiplexed connection, the logs and the
run directory come back; a dropped connection is made again; a wrong host key, a refused key,
an unreachable host and a missing command are each one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cluster.sshd import start_login, stop_login
from tests.conftest import hpcbench, require
from tests.docblocks import laptop_path


@pytest.fixture(scope="module")
def login(tmp_path_factory):
    require(Path("/usr/sbin/sshd").exists(), "sshd (apt-get install openssh-server)")
    server = start_login(tmp_path_factory.mktemp("sshd"))
    yield server
    stop_login(server)


@pytest.fixture
def laptop(login, tmp_path):
    """(the laptop's directory, its environment, the cluster-side directory)."""
    here = tmp_path / "laptop"
    here.mkdir()
    sockets = tempfile.mkdtemp(prefix="hs-")  # short: a socket's path holds 107 bytes at most
    env = {
        "PATH": laptop_path(tmp_path / "laptop-bin"),
        "HPCBENCH_SSH_CONFIG": str(login.config),
        "XDG_RUNTIME_DIR": sockets,
        "HPCBENCH_STATE_DIR": str(tmp_path / "laptop-state"),
    }
    yield here, env, tmp_path / "cluster-side"
    drop_connection(env)


def drop_connection(env: dict[str, str], check: bool = False) -> None:
    """Stop the shared ssh connection hpcbench keeps to the login node (``check``: it must be
    there): the next command has to make a new one."""
    socket_dir = Path(env["XDG_RUNTIME_DIR"]) / "hpcbench" / "ssh"
    subprocess.run(["ssh", "-F", env["HPCBENCH_SSH_CONFIG"], "-o", f"ControlPath={socket_dir}/%C",
                    "-O", "exit", "login"], capture_output=True, check=check)  # fmt: skip


def write_job(here: Path, command: list[str]) -> None:
    (here / "job.toml").write_text(
        '[resources]\njob_name = "far"\nnodes = 1\ntime = "00:05:00"\n\n'
        '[launcher]\nkind = "srun"\n\n'
        f"[program]\ncommand = {json.dumps(command)}\n"
    )


def submitted(out: str) -> str:
    found = re.search(r"submitted job (\d+) to slurm", out)
    assert found, out
    return found.group(1)


def test_submit_wait_status_logs_and_results_over_one_connection(slurm_cluster, login, laptop):
    here, env, remote = laptop
    write_job(here, ["sh", "-c", "echo far away in $(pwd); echo done > $HPCBENCH_RUN_DIR/x.txt"])
    before = login.accepted()
    r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login",
                 "--remote-dir", str(remote), "--wait", cwd=here, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted(r.stdout)
    assert f"job {job} completed" in r.stdout + r.stderr
    assert f"far away in {remote}" in r.stdout  # followed from the login node as it grew
    # the script went to the login node; the log and the run directory came back here
    assert list((remote / "runs" / "scripts").glob("far-*.sbatch"))
    assert "far away" in (here / "runs" / f"far-{job}.out").read_text()
    assert (here / "runs" / f"far-{job}" / "x.txt").read_text() == "done\n"
    r = hpcbench("status", job, cwd=here, env=env)
    assert r.returncode == 0 and f"{job}\tCOMPLETED exit=0" in r.stdout, r.stdout + r.stderr
    r = hpcbench("logs", job, cwd=here, env=env)
    assert r.returncode == 0 and "far away" in r.stdout, r.stdout + r.stderr
    # submit, its waits, status and logs: every command over one connection
    assert login.accepted() - before == 1


def test_cancel_and_a_dropped_connection_made_again(slurm_cluster, login, laptop):
    here, env, remote = laptop
    write_job(here, ["sleep", "300"])
    before = login.accepted()
    r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login",
                 "--remote-dir", str(remote), cwd=here, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted(r.stdout)
    drop_connection(env, check=True)
    r = hpcbench("status", job, cwd=here, env=env)
    assert r.returncode == 0 and re.search(rf"{job}\t(PENDING|RUNNING)", r.stdout), r.stdout
    r = hpcbench("cancel", job, cwd=here, env=env)
    assert r.returncode == 0 and f"cancelled {job}" in r.stdout, r.stdout + r.stderr
    assert login.accepted() - before == 2  # the first connection, and the one made again
    state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                           text=True).stdout.strip()  # fmt: skip
    assert state in ("", "CANCELLED", "COMPLETING"), state


def test_ssh_failures_are_one_line_each(slurm_cluster, login, laptop):
    here, env, remote = laptop
    write_job(here, ["true"])
    host_key = (login.root / "other_key.pub").read_text().split()
    wrong_known = login.root / "wrong_known_hosts"
    port = login.client_config("probe").read_text().split("Port ")[1].split()[0]
    wrong_known.write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    cases = {
        "a wrong host key": (
            {"UserKnownHostsFile": str(wrong_known)},
            "login's host key is not one your known_hosts holds",
        ),
        "a refused key": (
            {"IdentityFile": str(login.root / "other_key")},
            "login refused your key",
        ),
        "an unreachable host": ({"Port": "1"}, "login is unreachable"),
    }
    for what, (changes, said) in cases.items():
        config = login.client_config(what.replace(" ", "-"), **changes)
        r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login",
                     "--remote-dir", str(remote), cwd=here,
                     env={**env, "HPCBENCH_SSH_CONFIG": str(config),
                          "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="hs-")})  # fmt: skip
        assert r.returncode != 0, (what, r.stdout)
        errors = [line for line in r.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and said in errors[0], (what, r.stderr)
    # a batch system the login node does not have: its command is missing there
    r = hpcbench("submit", "job.toml", "--scheduler", "lsf", "--launcher", "mpiexec",
                 "--host", "login", "--remote-dir", str(remote), cwd=here, env=env)  # fmt: skip
    assert r.returncode != 0
    assert "bsub not found on login's PATH" in r.stderr, r.stderr
    # hpcbench's trainer, with a Python the login node lacks, or one without hpcbench
    for python, said in (
        ("no-such-python", "no-such-python not found on login's PATH"),
        ("/usr/bin/python3", "/usr/bin/python3 cannot import hpcbench: install it"),
    ):
        r = hpcbench("submit", "--scheduler", "slurm", "--python", python, "--host", "login",
                     "--remote-dir", str(remote), cwd=here, env=env)  # fmt: skip
        errors = [line for line in r.stderr.splitlines() if "error" in line]
        assert r.returncode != 0 and len(errors) == 1 and said in errors[0], r.stderr


SWEPT = """
import argparse
from hpcbench import measure

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
lr = p.parse_args().lr
with measure.run(model="far", config={"lr": lr, **measure.settings(batch=4)}) as m:
    with m.phase("train"):
        m.step(samples=4)
    m.epoch(val_accuracy=1.0 - abs(lr - 0.1))
"""


def test_a_sweep_from_the_laptop_runs_on_the_cluster_and_is_reported_here(
    slurm_cluster, login, laptop
):
    """The sweep's array script (relative paths: it runs in the login node's directory) and its
    settings files go there; its tasks are followed over SSH and their run directories come
    back as they end, so the report is made here."""
    here, env, remote = laptop
    remote.mkdir()
    for side in (here, remote):  # the user's code, in their checkout on both machines
        (side / "swept.py").write_text(SWEPT)
    (here / "job.toml").write_text(  # the Python of the cluster's environment that has hpcbench
        '[resources]\ntime = "00:05:00"\n[launcher]\nkind = "srun"\n'
        f"[program]\npython = {json.dumps(sys.executable)}\n"
    )
    (here / "sweep.toml").write_text(
        'name = "far"\njob = "job.toml"\nprogram = { script = "swept.py" }\n'
        'program_args = ["--lr", "{lr}"]\n[axes]\nlr = [0.01, 0.1]\n'
    )
    r = hpcbench("sweep", "sweep.toml", "--scheduler", "slurm", "--host", "login",
                 "--remote-dir", str(remote), cwd=here, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 completed" in r.stdout, r.stdout
    results = here / "runs" / "sweep-far"
    script = next((remote / "runs" / "sweep-far" / "logs" / "scripts").glob("*.sbatch"))
    assert str(here) not in script.read_text()  # nothing of the laptop's paths
    runs = sorted((results / "runs").iterdir())
    assert [json.loads((d / "metrics.json").read_text())["config"]["lr"] for d in runs] == [
        0.01,
        0.1,
    ]
    report = hpcbench("report", str(results), cwd=here, env=env)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "lr = 0.1," in (results / "report" / "report.md").read_text()
    # run again: nothing to do, the states read from the results brought back
    r = hpcbench("sweep", "sweep.toml", "--scheduler", "slurm", "--host", "login",
                 "--remote-dir", str(remote), cwd=here, env=env)  # fmt: skip
    assert r.returncode == 0 and "2 completed" in r.stdout, r.stdout + r.stderr


MEASURED = """
from hpcbench import measure

with measure.run(model="far", config={}) as m:
    with m.phase("train"):
        m.step(samples=4)
    m.epoch(val_accuracy=0.5)
"""


def test_a_bench_matrix_from_the_laptop_runs_on_the_cluster_and_is_reported_here(
    slurm_cluster, login, laptop
):
    """Each run of the matrix and its idle-power job go to the login node's SLURM; the runs'
    directories, the idle measurement and the scheduler's accounting come back, so report
    reads them here."""
    here, env, remote = laptop
    remote.mkdir()
    for side in (here, remote):
        (side / "measured.py").write_text(MEASURED)
    (here / "job.toml").write_text(
        '[resources]\ntime = "00:05:00"\n[launcher]\nkind = "srun"\n'
        f"[program]\npython = {json.dumps(sys.executable)}\n"
    )
    (here / "m.toml").write_text(
        'name = "far"\njob = "job.toml"\nrepetitions = 1\nenergy_repetitions = 1\n'
        'idle_seconds = 1\nprogram = { script = "measured.py" }\n'
        '[[config]]\nname = "one"\nstrategy = "single"\n'
    )
    r = hpcbench("bench", "m.toml", "--scheduler", "slurm", "--host", "login", "--remote-dir",
                 str(remote), "--no-history", cwd=here, env=env, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    results = here / "runs" / "bench-far"
    runs = json.loads((results / "runs.json").read_text())["runs"]
    assert [(x["kind"], x["status"]) for x in runs] == [("timing", "completed"),
                                                        ("energy", "completed")], runs  # fmt: skip
    assert json.loads((results / "idle.json").read_text())["seconds"] > 0
    for run in runs:
        assert (results / run["run_dir"] / "metrics.json").is_file()
        accounting = json.loads((results / run["run_dir"] / "accounting.json").read_text())
        assert accounting["available"] is True, accounting  # sacct, asked on the login node
    scripts = list((remote / "runs" / "bench-far").rglob("*.sbatch"))
    assert len(scripts) == 3 and not [s for s in scripts if str(here) in s.read_text()]
    report = hpcbench("report", str(results), cwd=here, env=env)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "sacct (SLURM accounting)" in (results / "report" / "report.md").read_text()
    # continued without --host: it runs on the login node it was started on, and no other
    r = hpcbench("bench", "m.toml", "--scheduler", "slurm", "--no-history", cwd=here, env=env)
    assert r.returncode == 0 and "resumed with 2 done" in r.stdout, r.stdout + r.stderr
    r = hpcbench("bench", "m.toml", "--scheduler", "slurm", "--host", "other", cwd=here, env=env)
    assert r.returncode == 2 and "ran on login" in r.stderr, r.stdout + r.stderr


def test_watch_follows_a_job_on_the_login_node_across_a_dropped_connection(
    slurm_cluster, login, laptop
):
    """watch asks the login node at every refresh and brings the run directory back; the shared
    connection dropped in the middle, the next refresh makes a new one and the watch ends with
    the job."""
    here, env, remote = laptop
    write_job(here, ["sh", "-c", 'sleep 6; echo ok > "$HPCBENCH_RUN_DIR/seen.txt"; sleep 2'])
    r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login",
                 "--remote-dir", str(remote), cwd=here, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job = submitted(r.stdout)
    before = login.accepted()
    argv = [sys.executable, "-m", "hpcbench", "watch", job, "--interval", "1"]
    with subprocess.Popen(argv, cwd=here, env={**os.environ, **env}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as watching:  # fmt: skip
        assert watching.stdout is not None
        first = watching.stdout.readline()  # the first look has been shown
        drop_connection(env, check=True)
        out, err = watching.communicate(timeout=120)
    assert watching.returncode == 0, first + out + err
    assert f"job {job} completed" in out, first + out + err
    assert login.accepted() - before == 1  # submit's connection served it, then one made again
    assert (here / "runs" / f"far-{job}" / "seen.txt").read_text() == "ok\n"  # brought back


@pytest.mark.parametrize("output_dir", [None, "out", "ABSOLUTE"])
def test_the_default_remote_directory_works_as_the_readme_writes_it(
    slurm_cluster, login, laptop, output_dir
):
    """``submit --host`` with no ``--remote-dir``: the job goes to ``~/hpcbench/<the local
    directory's name>`` on the login node (the remote home's, wherever the command runs there),
    with no --output-dir, a relative one and an absolute one inside the local directory."""
    here, env, _ = laptop
    mine = here.parent / f"laptop-{os.getpid()}-{output_dir or 'none'}".lower()
    here.rename(mine)
    write_job(mine, ["sh", "-c", "echo far away in $(pwd); echo done > $HPCBENCH_RUN_DIR/x.txt"])
    remote = Path.home() / "hpcbench" / mine.name
    assert not remote.exists()
    flags = []
    if output_dir:
        flags = ["--output-dir", str(mine / "abs-out") if output_dir == "ABSOLUTE" else output_dir]
    try:
        r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login", *flags,
                     "--wait", cwd=mine, env=env)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        job = submitted(r.stdout)
        assert f"far away in {remote}" in r.stdout, r.stdout
        logs = {None: "runs", "out": "out", "ABSOLUTE": "abs-out"}[output_dir]
        assert (mine / logs / f"far-{job}" / "x.txt").read_text() == "done\n"
        assert (remote / logs / f"far-{job}" / "x.txt").read_text() == "done\n"
        r = hpcbench("logs", job, cwd=mine, env=env)
        assert r.returncode == 0 and "far away" in r.stdout, r.stdout + r.stderr
    finally:
        shutil.rmtree(remote, ignore_errors=True)  # made by this test alone (its unique name)


def test_no_path_reaches_the_login_shell_and_only_plain_files_come_back(
    slurm_cluster, login, laptop
):
    """An output directory the login node's shell would read as commands, with rsync passing
    paths the old way (``RSYNC_OLD_ARGS=1``: what rsync before 3.2.4 does by default): carried
    as a path, nothing run. What the job leaves in its run directory (a FIFO, a link to
    /dev/zero, a link out of the tree or inside it, a set-uid file) comes back as plain files
    only: a link "inside" a pulled tree could still point anywhere in this directory."""
    here, env, remote = laptop
    marker = here.parent / "the-shell-ran"
    out = f"runs;touch {marker};#"
    write_job(here, ["sh", "-c", 'cd "$HPCBENCH_RUN_DIR" && mkfifo fifo && ln -s /dev/zero zero'
                     " && ln -s /etc/passwd out && echo x > suid && chmod 4755 suid"
                     " && ln -s suid inside && echo made"])  # fmt: skip
    r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login", "--remote-dir",
                 str(remote), "--output-dir", out, "--wait", cwd=here,
                 env={**env, "RSYNC_OLD_ARGS": "1"})  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists(), "a remote path ran as a command on the login node"
    run = here / out / f"far-{submitted(r.stdout)}"
    assert (run / "suid").read_text() == "x\n"
    assert not (run / "suid").stat().st_mode & 0o6000, oct((run / "suid").stat().st_mode)
    for special in ("fifo", "zero", "out", "inside"):  # no link, even one inside the tree
        assert not os.path.lexists(run / special), special


def test_a_login_shell_that_talks_and_a_home_relative_remote_dir(slurm_cluster, tmp_path):
    """A login node whose shell prints a banner on stdout (here through ``BASH_ENV``, as a
    ``.bashrc`` that echoes does), and ``--remote-dir ~/NAME``: the directory is NAME in the
    remote home (not a directory named ``~``), and the banner is never read as an answer."""
    require(Path("/usr/sbin/sshd").exists(), "sshd (apt-get install openssh-server)")
    banner = tmp_path / "banner.sh"
    banner.write_text('echo "Welcome to the cluster: y"\necho y\necho /\n')
    server = start_login(tmp_path / "sshd", extra=f"SetEnv BASH_ENV={banner}\n")
    here = tmp_path / "laptop"
    here.mkdir()
    env = {"PATH": laptop_path(tmp_path / "laptop-bin"), "HPCBENCH_SSH_CONFIG": str(server.config),
           "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="hs-"),
           "HPCBENCH_STATE_DIR": str(tmp_path / "laptop-state")}  # fmt: skip
    name = f"hpcbench-home-{os.getpid()}"
    remote = Path.home() / name
    assert not remote.exists()
    write_job(here, ["sh", "-c", "echo far away in $(pwd); echo done > $HPCBENCH_RUN_DIR/x.txt"])
    try:
        r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login",
                     "--remote-dir", f"~/{name}", "--wait", cwd=here, env=env)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        job = submitted(r.stdout)
        assert f"far away in {remote}" in r.stdout, r.stdout
        assert (here / "runs" / f"far-{job}" / "x.txt").read_text() == "done\n"
        assert not (here / "~").exists() and not (Path.home() / "~" / name).exists()
    finally:
        drop_connection(env)
        stop_login(server)
        shutil.rmtree(remote, ignore_errors=True)  # made by this test alone (its unique name)


@pytest.mark.parametrize("sftp", [False, True])
def test_without_rsync_files_go_by_sftp_and_a_login_node_without_it_says_so(
    slurm_cluster, tmp_path, sftp
):
    """A laptop without rsync copies with scp over SFTP: through a login node that serves SFTP
    the job goes and its run directory comes back; one that does not (no ``Subsystem sftp``)
    is one line saying what is missing, not scp's "Connection closed"."""
    require(Path("/usr/sbin/sshd").exists(), "sshd (apt-get install openssh-server)")
    server = start_login(tmp_path / "sshd", extra="Subsystem sftp internal-sftp\n" if sftp else "")
    here, remote = tmp_path / "laptop", tmp_path / "cluster-side"
    here.mkdir()
    path = laptop_path(tmp_path / "laptop-bin")
    (tmp_path / "laptop-bin" / "rsync").unlink()  # this laptop has no rsync
    env = {"PATH": path, "HPCBENCH_SSH_CONFIG": str(server.config),
           "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="hs-"),
           "HPCBENCH_STATE_DIR": str(tmp_path / "laptop-state")}  # fmt: skip
    write_job(here, ["sh", "-c", "echo done > $HPCBENCH_RUN_DIR/x.txt"])
    try:
        r = hpcbench("submit", "job.toml", "--scheduler", "slurm", "--host", "login",
                     "--remote-dir", str(remote), "--wait", cwd=here, env=env)  # fmt: skip
    finally:
        drop_connection(env)
        stop_login(server)
    if not sftp:
        assert r.returncode == 1, r.stdout + r.stderr
        (line,) = [x for x in r.stderr.splitlines() if x.startswith("hpcbench: error:")]
        assert "the login node has no rsync" in line and "SFTP" in line, r.stderr
        assert "Connection closed" not in line
        return
    assert r.returncode == 0, r.stdout + r.stderr
    assert (here / "runs" / f"far-{submitted(r.stdout)}" / "x.txt").read_text() == "done\n"
