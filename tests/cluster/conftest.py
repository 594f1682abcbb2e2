"""The real test clusters: SLURM (tests/cluster/slurm-up.sh) and Grid Engine (sge-up.sh), each
brought up once per session and stopped at the end by its down script, which stops only what
its up script started. In CI a cluster that cannot start fails the tests; on a laptop without
root they skip with the reason. The SLURM one also carries slurm-wlm-torque's PBS-style wrappers
(``torque_wrappers``). Also the small dataset and trainer options the cluster jobs use."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI, hpcbench

HERE = Path(__file__).parent
# A training job short enough for a test: 4 steps of one epoch, then validation and test.
TRAIN_ARGS = [
    "--epochs",
    "1",
    "--max-steps",
    "4",
    "--global-batch-size",
    "16",
    "--eval-batch-size",
    "64",
]
TEST_SAMPLES = 54  # of the dataset below: 13 % of 450, stratified over 9 classes


# The test processes of one run (pytest-xdist's workers, each a session of its own) share each
# cluster: the first to need it starts it, the last to finish stops it, and only if one of them
# started it. The users are counted under a lock in root's /run (the up scripts need root).
SHARED = Path("/run/hpcbench-test-clusters")


@contextlib.contextmanager
def _cluster_lock() -> Iterator[None]:
    SHARED.mkdir(mode=0o700, exist_ok=True)
    with open(SHARED / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def shared_cluster(up_script: str, down_script: str) -> Iterator[subprocess.CompletedProcess]:
    """Run ``up_script`` (it does nothing when the cluster is up already), yield its result while
    this process uses the cluster, then stop the cluster if this was its last user and a test
    process started it (a cluster someone else started stays up)."""
    run = {"capture_output": True, "text": True, "stdin": subprocess.DEVNULL}
    if os.geteuid() != 0:  # the up script says it needs root (exit 3)
        yield subprocess.run(["bash", str(HERE / up_script)], timeout=600, **run)
        return
    users, ours, me = SHARED / f"{up_script}.users", SHARED / f"{up_script}.ours", f"{os.getpid()}"
    with _cluster_lock():
        # the daemons, and every job they start, at the usual priority (root may raise it back:
        # a test process may run at a lower one, tests/conftest.py)
        up = subprocess.run(["bash", str(HERE / up_script)], timeout=600,
                            preexec_fn=lambda: os.nice(-os.nice(0)), **run)  # fmt: skip
        if up.returncode == 0:
            if "already running" not in up.stdout:
                ours.touch()
            alive = [u for u in _lines(users) if u != me and _running(int(u))]
            users.write_text("\n".join([*alive, me]) + "\n")
    try:
        yield up
    finally:
        if up.returncode == 0:
            with _cluster_lock():
                left = [u for u in _lines(users) if u != me and _running(int(u))]
                users.write_text("".join(f"{u}\n" for u in left))
                if not left and ours.exists():
                    subprocess.run(["bash", str(HERE / down_script)], timeout=120, **run)
                    ours.unlink()


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError too says the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _cluster(up_script: str, down_script: str, what: str) -> Iterator[str]:
    for up in shared_cluster(up_script, down_script):
        if up.returncode == 3 and not IN_CI:
            pytest.skip(f"{what} needs root (tests/cluster/{up_script})")
        if up.returncode != 0:
            pytest.fail(f"tests/cluster/{up_script} failed:\n{up.stdout}\n{up.stderr[-3000:]}")
        yield up.stdout.strip()


@pytest.fixture(scope="session")
def slurm_cluster():
    yield from _cluster("slurm-up.sh", "slurm-down.sh", "the test SLURM cluster")


@pytest.fixture(scope="session")
def torque_wrappers(slurm_cluster) -> dict[str, str]:
    """The environment that puts slurm-wlm-torque's qsub/qstat/qdel (installed by slurm-up.sh
    in $HPCB_RUN/torque/bin) first on PATH."""
    bindir = Path(os.environ.get("HPCB_RUN", "/run/hpcbench-slurm")) / "torque" / "bin"
    if not (bindir / "qstat").is_file():
        pytest.fail(f"tests/cluster/slurm-up.sh left no slurm-wlm-torque qstat in {bindir}")
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture(scope="session")
def sge_cluster(monkeypatch_session):
    monkeypatch_session.setenv("SGE_ROOT", "/var/lib/gridengine")
    monkeypatch_session.setenv("SGE_CELL", "default")
    yield from _cluster("sge-up.sh", "sge-down.sh", "the test Grid Engine")


@pytest.fixture(scope="session")
def monkeypatch_session():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="session")
def cluster_data(tmp_path_factory) -> Path:
    """450 synthetic 16×16 samples, on the filesystem every test node shares (this host's)."""
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    root = tmp_path_factory.mktemp("clusterdata") / "shapes"
    convert(synthetic(450, 9), root, ConvertOptions(size=(16, 16), grayscale=True, progress=False))
    return root


def submitted_id(stdout: str, scheduler: str) -> str:
    m = re.search(rf"submitted job (\S+) to {scheduler}", stdout)
    assert m, stdout
    return m.group(1)


# The test cluster once garbled an MPI step's start now and then ("mpi/pmi2: invalid client
# request"): Slurm's pmi2 plugin reads a PMI-1 line with one read() of at most 1024 bytes, and the
# mpich wheel's UCX address cards made lines of up to 1,083. slurm-up.sh's TaskProlog now chooses
# MPICH's OFI network module (one short line): a garbled start-up is a failure, never retried.
STARTUP_GARBLE = "mpi/pmi2: invalid client request"
SLURMD_LOGS = Path("/var/log/slurm")


def _log_sizes() -> dict[Path, int]:
    sizes = {}
    for log in SLURMD_LOGS.glob("slurmd-*.log"):
        try:
            sizes[log] = log.stat().st_size
        except OSError:
            continue
    return sizes


def _garbles_since(sizes: dict[Path, int]) -> dict[str, int]:
    """Garbled start-ups each slurmd logged after ``sizes`` (a log that shrank was rotated or
    restarted: read whole)."""
    found = {}
    for log, size in _log_sizes().items():
        start = sizes.get(log, 0)
        with log.open("rb") as f:
            f.seek(start if start <= size else 0)
            n = f.read().decode(errors="replace").count(STARTUP_GARBLE)
        if n:
            found[log.name] = n
    return found


@pytest.fixture(autouse=True)
def no_garbled_startups(request) -> Iterator[None]:
    """Every test of the SLURM cluster fails if slurmd logged a garbled MPI start-up while it
    ran (the logs are the cluster's: a job another test left running would be counted here too,
    and a garble is a failure wherever it comes from)."""
    if "slurm_cluster" not in request.fixturenames:
        yield
        return
    before = _log_sizes()
    yield
    grown = _garbles_since(before)
    assert not grown, (
        f"the test cluster garbled {sum(grown.values())} MPI start-up(s) ({STARTUP_GARBLE!r} in "
        f"{', '.join(sorted(grown))}): is MPIR_CVAR_CH4_NETMOD=ofi in tests/cluster/slurm-up.sh's "
        "TaskProlog? (docs/troubleshooting.md)"
    )


def bench_on_slurm(cwd: Path, *args: str, timeout: float = 1500, env: dict | None = None) -> Path:
    """``hpcbench bench --scheduler slurm ARGS``; the results directory. The options come first:
    ARGS may end with ``-- TRAINER-ARGS``. ``env``: more of the jobs' environment (sbatch passes
    it on)."""
    r = hpcbench("bench", "--scheduler", "slurm", *args, cwd=cwd, timeout=timeout, env=env)
    found = sorted((cwd / "runs").glob("bench-*"), key=lambda p: p.stat().st_mtime)
    assert found and r.returncode == 0, r.stdout + r.stderr
    return found[-1]


def train_on(
    scheduler: str,
    workdir: Path,
    data: Path,
    *flags: str,
    trainer: tuple[str, ...] = (),
    env: dict | None = None,
) -> tuple[str, dict]:
    """Submit the trainer with ``--wait`` (``env``: more of the job's environment, which sbatch
    passes on); return (job id, its metrics.json as a dict)."""
    r = hpcbench(
        "submit",
        "--scheduler",
        scheduler,
        *flags,
        "--wait",
        "--timeout",
        "300",
        "--",
        "--data",
        str(data),
        *TRAIN_ARGS,
        *trainer,  # after the defaults: the test's own win
        cwd=workdir,
        env=env,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = re.search(r"run directory: (.+)", r.stdout)
    assert run_dir, r.stdout
    metrics = json.loads((Path(run_dir.group(1).strip()) / "metrics.json").read_text())
    job_id = submitted_id(r.stdout, scheduler)
    # the one job handle reads the same results for a job submitted earlier from the CLI
    from hpcbench import api

    assert api.job(job_id).result(timeout=120) == metrics
    return job_id, metrics


def release_requeued(job: str, timeout: float = 120) -> None:
    """Wait until SLURM has requeued ``job`` and started it again. A requeued job waits for the
    job credential's lifetime (``AuthInfo=cred_expire``, 120 s by default, 10 s on the test
    cluster) before it may start: until then the nodes still refuse the old incarnation's steps,
    and an MPI step started early (``scontrol update StartTime=now``) fails its PMI-2 start-up
    ("failed to send temp kvs to compute nodes")."""
    deadline = time.monotonic() + timeout

    def squeue(fmt: str) -> str:
        return subprocess.run(
            ["squeue", "-h", "-j", job, "-o", fmt], capture_output=True, text=True
        ).stdout.strip()

    while squeue("%T") != "PENDING":
        assert time.monotonic() < deadline, f"job {job} was not requeued"
        time.sleep(0.3)
    while (found := squeue("%T %r")).startswith("PENDING"):
        assert time.monotonic() < deadline, f"job {job} stayed pending: {found}"
        time.sleep(1)
