"""The local scheduler and the job commands under hostile conditions: real submissions through
``python -m hpcbench``, real processes, real state files damaged or planted by hand."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcbench.jobs.processes import proc_stat
from tests.conftest import QUICK_OK, hpcbench, mpiexec_available, need_module, require

LOCAL = ("--scheduler", "local", "--launcher", "mpiexec")


def state(workdir: Path) -> Path:
    return Path(os.environ["HPCBENCH_STATE_DIR"])


def submit(workdir: Path, program: str, *extra: str, wait: bool = True):
    args = ["submit", *LOCAL, "--program", program, *extra]
    return hpcbench(*args, *(["--wait"] if wait else []), cwd=workdir, timeout=120)


def gone(pid: int) -> bool:
    proc = proc_stat(pid)
    return proc is None or proc.state in ("Z", "X")


def wait_for_file(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def one_line_error(result) -> str:
    """The single stderr line of a refused command (no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("hpcbench: sch")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def sleeper():
    """A process of our own in its own session, standing in for a stranger's process."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


# ------------------------------------------------------------------------ recording the job


def test_job_id_is_printed_when_the_job_cannot_be_recorded(workdir):
    (state(workdir) / "jobs").parent.mkdir(parents=True)
    (state(workdir) / "jobs").write_text("a file where the records directory should be\n")
    result = hpcbench("submit", *LOCAL, "--program", QUICK_OK, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "submitted job local-1 to local" in result.stdout
    warning = one_line_error(result)
    assert warning.startswith("hpcbench: warning: job local-1 runs but was not recorded (")
    assert str(state(workdir) / "jobs") in warning


# ------------------------------------------------------------------------------- cancel


def test_cancel_kills_a_rank_that_ignores_sigterm(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    program = "bash -c 'trap \"\" TERM; echo $$ > rank.pid; exec sleep 300'"
    assert submit(workdir, program, wait=False).returncode == 0
    rank = int(wait_for_file(workdir / "rank.pid"))
    try:
        cancel = hpcbench("cancel", "local-1", cwd=workdir, timeout=60)
        assert cancel.returncode == 0, cancel.stderr
        assert gone(rank), "the rank that ignores SIGTERM outlived cancel"
        status = hpcbench("status", "local-1", cwd=workdir)
        assert status.stdout.startswith("local-1\tCANCELLED")
    finally:
        if not gone(rank):
            os.kill(rank, signal.SIGKILL)


def test_cancel_ends_a_process_that_left_the_session_and_lost_its_parent(workdir):
    """A rank MPI starts in a session of its own, whose parent dies first: no longer the job's
    session's nor a descendant of it, it carries the job's token in its environment, and the
    cancel ends it (a trainer left so spun in a collective for ever, a core gone)."""
    program = "sh -c '(setsid sh -c \"echo \\$\\$ > orphan.pid; exec sleep 300\" &); sleep 300'"
    assert submit(workdir, program, wait=False).returncode == 0
    orphan = int(wait_for_file(workdir / "orphan.pid"))
    try:
        assert proc_stat(orphan).ppid != os.getpid()
        cancel = hpcbench("cancel", "local-1", cwd=workdir, timeout=60)
        assert cancel.returncode == 0, cancel.stderr
        assert gone(orphan), "a process of the job outlived its cancel"
    finally:
        if not gone(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_cancel_of_a_finished_job_says_so_and_changes_nothing(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    assert submit(workdir, QUICK_OK).returncode == 0
    cancel = hpcbench("cancel", "local-1", cwd=workdir)
    assert cancel.returncode == 0
    assert cancel.stdout.strip() == "local-1 had already finished (COMPLETED); nothing to cancel"
    assert hpcbench("status", "local-1", cwd=workdir).stdout.startswith("local-1\tCOMPLETED")


# -------------------------------------------------------------------------------- job ids


def test_a_reset_or_damaged_counter_never_hands_out_a_used_id(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    first = submit(workdir, "echo first")
    assert first.returncode == 0 and "submitted job local-1 " in first.stdout
    counter = state(workdir) / "local" / "last_id"
    counter.write_text("0\n")
    second = submit(workdir, "echo second")
    assert second.returncode == 0, second.stderr
    assert "submitted job local-2 " in second.stdout
    counter.write_text("\x00garbage")
    third = submit(workdir, "echo third")
    assert third.returncode == 0, third.stderr
    assert "submitted job local-3 " in third.stdout
    assert (
        (workdir / "runs" / "hpcbench-local-1.out").read_text().splitlines()[-1].endswith(" first")
    )


def test_an_absurd_counter_is_recovered_from_the_job_files(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    (state(workdir) / "local").mkdir(parents=True)
    (state(workdir) / "local" / "last_id").write_text("99999999999999999999\n")
    result = submit(workdir, QUICK_OK)
    assert result.returncode == 0 and "submitted job local-1 " in result.stdout, result.stdout
    assert hpcbench("status", "local-1", cwd=workdir).stdout.startswith("local-1\tCOMPLETED")


def test_an_id_whose_logs_exist_is_skipped(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    (workdir / "runs").mkdir()
    (workdir / "runs" / "hpcbench-local-1.out").write_text("a log from an earlier state dir\n")
    result = submit(workdir, QUICK_OK)
    assert result.returncode == 0 and "submitted job local-2 " in result.stdout
    assert (workdir / "runs" / "hpcbench-local-1.out").read_text().startswith("a log from")


@pytest.mark.parametrize("command", ["cancel", "status"])
def test_a_path_as_job_id_is_refused_and_nothing_outside_is_touched(workdir, sleeper, command):
    planted = state(workdir).parent / "victim.json"  # = <state>/local/../../victim.json
    (state(workdir) / "local").mkdir(parents=True)
    planted.write_text(json.dumps({"pid": sleeper.pid}))
    result = hpcbench(command, "../../victim", "--scheduler", "local", cwd=workdir)
    assert result.returncode == 2
    assert one_line_error(result) == (
        "hpcbench: error: job id '../../victim' is not a local job id "
        "(expected local-<number>, e.g. local-1, or local-1_3 for an array task)"
    )
    assert sleeper.poll() is None, "a process named by a file outside the state dir was signalled"
    assert not (state(workdir).parent / "victim.cancelled").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("status", "1;reboot", "--scheduler", "slurm"),
        ("cancel", "-1", "--scheduler", "pbs"),
        ("logs", "../x"),
        ("status", "local-\u0661"),  # an Arabic-Indic digit one: \\d would take it
        ("status", "\u0661\u0662", "--scheduler", "slurm"),
    ],
)
def test_malformed_ids_are_refused_for_every_scheduler(workdir, args):
    result = hpcbench(*args, cwd=workdir)
    assert result.returncode == 2
    assert "is not a" in one_line_error(result)


# ----------------------------------------------------------------- process identity checks


def plant_record(workdir: Path, job_id: str, **fields) -> Path:
    root = state(workdir) / "local"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{job_id}.json"
    path.write_text(json.dumps(fields))
    return path


def test_a_reused_pid_is_never_signalled(workdir, sleeper):
    me = proc_stat(sleeper.pid)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    plant_record(
        workdir,
        "local-7",
        pid=sleeper.pid,
        start=me.start - 1,
        boot_id=boot,
        host=socket.gethostname(),
    )
    status = hpcbench("status", "local-7", cwd=workdir)
    assert status.stdout.startswith("local-7\tFAILED"), status.stdout + status.stderr
    cancel = hpcbench("cancel", "local-7", cwd=workdir)
    assert cancel.returncode == 0
    assert sleeper.poll() is None, "a process that only shares the recorded PID was signalled"


def test_a_job_recorded_on_another_host_is_reported_and_never_signalled(workdir, sleeper):
    me = proc_stat(sleeper.pid)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    plant_record(workdir, "local-8", pid=sleeper.pid, start=me.start, boot_id=boot, host="node-b")
    status = hpcbench("status", "local-8", cwd=workdir)
    assert status.stdout == "local-8\tUNKNOWN\tstarted on host node-b\n"
    cancel = hpcbench("cancel", "local-8", cwd=workdir)
    assert cancel.returncode == 1
    assert one_line_error(cancel) == (
        "hpcbench: error: cancel: local job local-8 was started on host node-b; cancel it there"
    )
    assert sleeper.poll() is None


# --------------------------------------------------------------- damaged state, bad places


def test_a_state_dir_that_is_a_file_is_one_line(workdir):
    blocker = workdir.parent / "state-file"
    blocker.write_text("not a directory\n")
    env = {"HPCBENCH_STATE_DIR": str(blocker)}
    for args in (
        ("submit", *LOCAL, "--program", QUICK_OK),
        ("status", "local-1"),
        ("logs", "local-1"),
    ):
        result = hpcbench(*args, cwd=workdir, env=env)
        assert result.returncode != 0, args
        line = one_line_error(result)
        assert line.startswith("hpcbench: error: ") and "state-file" in line, line


@pytest.mark.parametrize(
    "name, text, command",
    [
        ("local/local-1.json", '{"pid": 12', "status"),
        ("local/local-1.exit", "\x00\x01", "status"),
        ("jobs/local/local-1.json", "[1, 2", "logs"),
    ],
)
def test_damaged_state_files_are_one_line(workdir, name, text, command):
    plant_record(workdir, "local-1", pid=None)
    path = state(workdir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    result = hpcbench(command, "local-1", cwd=workdir)
    assert result.returncode == 1
    line = one_line_error(result)
    assert str(path) in line and "hpcbench: error: " in line, line


def test_unusable_output_dirs_and_long_names_are_one_line(workdir):
    (workdir / "taken").write_text("a file\n")
    for output_dir in ("taken", "/proc/hpcbench-out", "x" * 300):
        result = hpcbench("submit", *LOCAL, "--program", QUICK_OK, "-o", output_dir, cwd=workdir)
        assert result.returncode == 2, (output_dir, result.stderr)
        assert one_line_error(result).startswith("hpcbench: error: resources.output_dir: ")
    result = hpcbench("submit", *LOCAL, "--program", QUICK_OK, "-J", "n" * 300, cwd=workdir)
    assert result.returncode == 2
    assert "job_name" in one_line_error(result)
    assert not list(state(workdir).glob("local/local-*.json"))  # nothing was queued


# ------------------------------------------------------------------------------------ logs


def test_logs_with_zero_lines_prints_no_log_lines_and_negative_is_refused(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    assert submit(workdir, "echo a-line-of-output").returncode == 0
    zero = hpcbench("logs", "local-1", "-n", "0", cwd=workdir)
    assert zero.returncode == 0 and "a-line-of-output" not in zero.stdout
    assert "a-line-of-output" in hpcbench("logs", "local-1", "-n", "5", cwd=workdir).stdout
    negative = hpcbench("logs", "local-1", "-n", "-3", cwd=workdir)
    assert negative.returncode == 2 and "-3" in negative.stderr.splitlines()[-1]


# ------------------------------------------------------------------------------------ umask


def test_files_honour_a_private_umask(workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    bindir = str(Path(sys.executable).parent)
    result = subprocess.run(
        ["bash", "-c", 'umask 077; exec "$@"', "umask077", sys.executable, "-m", "hpcbench"]
        + ["submit", *LOCAL, "--program", QUICK_OK, "--env", "TOKEN=s3cret", "--wait"],
        cwd=workdir,
        env={**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    files = [
        *(workdir / "runs" / "scripts").iterdir(),
        workdir / "runs" / "hpcbench-local-1.out",
        workdir / "runs" / "hpcbench-local-1.err",
        *(state(workdir) / "local").iterdir(),
        *(state(workdir) / "jobs" / "local").iterdir(),
    ]
    assert any(f.suffix == ".sh" for f in files) and any(f.name == "local-1.exit" for f in files)
    for path in files:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} has mode {oct(mode)} under umask 077"


# ------------------------------------------------------------------- processes left behind


def processes_running(marker: str) -> list[int]:
    """PIDs whose command line holds ``marker`` (a sleep with a duration no one else uses)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline and not gone(int(entry)):
            found.append(int(entry))
    return found


def test_processes_a_finished_job_left_running_are_ended(workdir):
    """As on a cluster, a job's leftover processes (a background server, a stray worker; one
    ignoring SIGTERM) do not outlive it; its exit status is its script's."""
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    marker = "1241.25"
    quiet = ">/dev/null 2>&1"
    setup = f"(sleep {marker} {quiet} &); (trap '' TERM; exec sleep {marker}1 {quiet}) &"
    try:
        result = submit(workdir, "bash -c 'exit 3'", "--setup", setup)
        assert "local-1" in result.stdout, result.stderr
        status = hpcbench("status", "local-1", cwd=workdir)
        assert status.stdout.startswith("local-1\tFAILED exit=3"), status.stdout
        assert processes_running(f"sleep {marker}") == []
    finally:
        for pid in processes_running(f"sleep {marker}"):
            os.kill(pid, signal.SIGKILL)


def test_an_inherited_continuation_variable_never_moves_a_new_job(workdir, tmp_path):
    """HPCBENCH_CONTINUE_RUN_DIR in the submitting shell (a continuation's environment, passed on
    by SLURM or qsub -V to any job submitted from inside it) must not redirect a new job into
    another run directory and its checkpoints: only a run directory that names the job as its
    continuation is taken over."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "control").mkdir(parents=True)
    (elsewhere / "control" / "continued-as").write_text("local-999\n")  # another job's
    r = hpcbench(
        "submit", *LOCAL, "--requeue", "--program", "printenv HPCBENCH_RUN_DIR", "--wait",
        cwd=workdir, env={"HPCBENCH_CONTINUE_RUN_DIR": str(elsewhere)}, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = r.stdout.split("submitted job ")[1].split()[0]
    out = (workdir / "runs" / f"hpcbench-{job_id}.out").read_text()
    err = (workdir / "runs" / f"hpcbench-{job_id}.err").read_text()
    assert f"runs/hpcbench-{job_id}" in out and str(elsewhere) not in out, out
    assert "HPCBENCH_CONTINUE_RUN_DIR ignored" in err, err
    assert sorted(p.name for p in elsewhere.rglob("*")) == ["continued-as", "control"]


def test_status_of_no_such_job_exits_1_and_without_a_job_lists_the_newest(workdir):
    """``status local-99`` (never submitted) says UNKNOWN and exits 1, so a script can tell;
    ``status`` alone lists the jobs last submitted from here, newest first."""
    r = hpcbench("status", cwd=workdir)
    assert r.returncode == 0 and r.stdout.startswith("no jobs submitted from here"), r.stdout
    done = submit(workdir, QUICK_OK)
    assert done.returncode == 0, done.stderr
    running = submit(workdir, "sleep 30", wait=False)
    assert running.returncode == 0, running.stderr
    try:
        r = hpcbench("status", cwd=workdir)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["local-2\tRUNNING", "local-1\tCOMPLETED exit=0"]
        assert hpcbench("status", "--last", "1", cwd=workdir).stdout == "local-2\tRUNNING\n"
        unknown = hpcbench("status", "local-99", cwd=workdir)
        assert unknown.returncode == 1 and "local-99\tUNKNOWN" in unknown.stdout, unknown
        both = hpcbench("status", "local-1", "local-99", cwd=workdir)
        assert both.returncode == 1 and "local-1\tCOMPLETED" in both.stdout
    finally:
        hpcbench("cancel", "local-2", cwd=workdir)


MEET = """\
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"met: world {dist.get_world_size()} sum {int(t.item())}", flush=True)
time.sleep(4)  # the agents (and the store on the first) outlive the other job's start
dist.destroy_process_group()
"""


def test_two_local_jobs_of_the_same_id_in_two_state_directories_run_at_once(tmp_path):
    """Two users on one workstation, each with their own state directory: both get local-1, and
    two-node torchrun jobs of both run at the same time, each meeting on a port of its own."""
    from concurrent.futures import ThreadPoolExecutor

    need_module("torch")
    users = []
    for name in ("ana", "ben"):
        home = tmp_path / name
        (home / "work").mkdir(parents=True)
        (home / "work" / "meet.py").write_text(MEET)
        users.append(home)

    def run(home: Path):
        return hpcbench(
            "submit", "--scheduler", "local", "--nodes", "2", "--launcher", "torchrun",
            "--program", f"{sys.executable} meet.py", "--wait", "--timeout", "120",
            cwd=home / "work", env={"HPCBENCH_STATE_DIR": str(home / "state")}, timeout=180,
        )  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(run, users[0])
        time.sleep(1.5)
        second = pool.submit(run, users[1])
        results = [first.result(), second.result()]
    for home, r in zip(users, results, strict=True):
        assert r.returncode == 0, r.stdout + r.stderr
        assert "submitted job local-1 " in r.stdout, r.stdout
        out = (home / "work" / "runs" / "hpcbench-local-1.out").read_text()
        assert out.count("met: world 2 sum 2") == 2, out


def test_logs_into_a_pipe_its_reader_closed_is_not_an_error(workdir):
    """``hpcbench logs JOB | head``: the reader had enough; no "error: Broken pipe", no
    traceback, and the exit status a closed pipe gives (141)."""
    r = submit(workdir, "bash -c 'seq 100000; seq 100000 >&2'")
    assert r.returncode == 0, r.stdout + r.stderr
    piped = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {sys.executable} -m hpcbench logs local-1 --lines 100000"
         " | head -c 1 >/dev/null"],
        cwd=workdir, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert piped.stderr == "" and piped.returncode == 141, (piped.returncode, piped.stderr)


@pytest.mark.torch
def test_a_cancelled_torchrun_job_s_log_ends_saying_cancelled(workdir, shapes_data):
    """torchrun's agent prints its SignalException traceback when the cancel's SIGTERM reaches
    it: ``hpcbench logs`` must end with the cancellation's line, not with that traceback."""
    need_module("torch")
    data = shapes_data(180, 3, (12, 12))
    submitted = hpcbench(
        *("submit", "--scheduler", "local", "--env", "HPCBENCH_STEP_DELAY=2"),
        *("--", "--data", str(data), "--epochs", "20", "--progress", "none"),
        cwd=workdir,
    )
    assert submitted.returncode == 0, submitted.stderr
    wait_for_file(workdir / "runs" / "hpcbench-local-1" / "control" / "ready", timeout=120)
    cancel = hpcbench("cancel", "local-1", cwd=workdir, timeout=60)
    assert cancel.returncode == 0, cancel.stderr
    logs = hpcbench("logs", "local-1", cwd=workdir)
    shown = [line for line in logs.stdout.splitlines() if line.strip()]
    last = next(shown[i - 1] for i, line in enumerate(shown) if line.startswith("logs: "))
    assert last.startswith("hpcbench: job local-1 cancelled"), logs.stdout
    err = (workdir / "runs" / "hpcbench-local-1.err").read_text().splitlines()
    assert err[-1].startswith("hpcbench: job local-1 cancelled"), err[-5:]
