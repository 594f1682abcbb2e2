"""The real test clusters: SLURM (tests/cluster/slurm-up.sh) and Grid Engine (sge-up.sh), each
brought up once per session and stopped at the end by its down script, which stops only what
its up script started. In CI a cluster that cannot start fails the tests; on a laptop without
root they skip with the reason. The SLURM one also carries slurm-wlm-torque's PBS-style wrappers
(``torque_wrappers``). Also the small dataset and trainer options the cluster jobs use."""

from __future__ import annotations

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


def _cluster(up_script: str, down_script: str, what: str) -> Iterator[str]:
    run = {"capture_output": True, "text": True, "stdin": subprocess.DEVNULL}
    up = subprocess.run(["bash", str(HERE / up_script)], timeout=600, **run)
    if up.returncode == 3 and not IN_CI:
        pytest.skip(f"{what} needs root (tests/cluster/{up_script})")
    if up.returncode != 0:
        pytest.fail(f"tests/cluster/{up_script} failed:\n{up.stdout}\n{up.stderr[-3000:]}")
    yield up.stdout.strip()
    if "already running" not in up.stdout:  # a cluster someone else started stays up
        subprocess.run(["bash", str(HERE / down_script)], timeout=120, **run)


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


# MPICH's PMI-2 client under this test SLURM (two slurmd daemons on one host) now and then
# garbles a start-up request when two ranks share a node ("mpi/pmi2: invalid client request"):
# the step dies before the program starts. That is the test cluster's MPI start, not what the
# tests check: a job that failed with this signature, and only such a job, is submitted again.
STARTUP_GARBLE = "mpi/pmi2: invalid client request"
# Its spells last up to about a minute (four start-ups garbled in a row, 5 s apart, were seen):
# the retries span two.
GARBLE_RETRIES, GARBLE_PAUSE_S = 5, 20.0


@pytest.fixture
def garble_watchdog(slurm_cluster) -> Iterator[list[str]]:
    """While the test runs, a job whose MPI start-up the test cluster garbled (its error log
    holds STARTUP_GARBLE) is cancelled at once: its step would otherwise hang until the job's
    time limit (an hour) with both nodes held, and every retry queue behind it. The tests' own
    retries (:func:`garbled_start`) then submit it again. Yields the ids it cancelled."""
    import threading

    stop, cancelled = threading.Event(), []

    def watch() -> None:
        while not stop.wait(2.0):
            running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%A"],
                                     capture_output=True, text=True).stdout.split()  # fmt: skip
            for job in running:
                shown = subprocess.run(["scontrol", "show", "job", "-o", job],
                                       capture_output=True, text=True).stdout  # fmt: skip
                found = re.search(r"\bStdErr=(\S+)", shown)
                err = Path(found.group(1)) if found else None
                try:
                    garbled = err is not None and STARTUP_GARBLE in err.read_text(errors="replace")
                except OSError:
                    garbled = False
                if garbled and job not in cancelled:
                    subprocess.run(["scancel", job], capture_output=True)
                    cancelled.append(job)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield cancelled
    stop.set()
    thread.join(timeout=30)


def garbled_start(stdout: str) -> bool:
    """Whether the job ``hpcbench submit`` printed ended in the test cluster's PMI-2 garble."""
    logs = re.search(r"^logs: \S+ and (\S+)", stdout, re.M)
    err = Path(logs.group(1)) if logs else None
    return err is not None and err.exists() and STARTUP_GARBLE in err.read_text(errors="replace")


def bench_on_slurm(cwd: Path, *args: str, timeout: float = 1500) -> Path:
    """``hpcbench bench --scheduler slurm ARGS``, run again with ``--retry-failed`` (up to
    ``GARBLE_RETRIES`` times) when a run failed only because the test cluster garbled its MPI
    start-up; the results directory. The options come first: ARGS may end with ``-- TRAINER-ARGS``."""
    for attempt in range(GARBLE_RETRIES + 1):
        ours = ["--scheduler", "slurm", *(["--retry-failed"] if attempt else [])]
        r = hpcbench("bench", *ours, *args, cwd=cwd, timeout=timeout)
        found = sorted((cwd / "runs").glob("bench-*"), key=lambda p: p.stat().st_mtime)
        assert found, r.stdout + r.stderr
        runs = json.loads((found[-1] / "runs.json").read_text())["runs"]
        failed = [x for x in runs if x["status"] != "completed"]
        if not failed or not all(
            Path(x["stderr"]).exists()
            and STARTUP_GARBLE in Path(x["stderr"]).read_text(errors="replace")
            for x in failed
        ):
            break
        time.sleep(GARBLE_PAUSE_S)  # the garbling comes in spells
    assert r.returncode == 0, r.stdout + r.stderr
    return found[-1]


def train_on(
    scheduler: str, workdir: Path, data: Path, *flags: str, trainer: tuple[str, ...] = ()
) -> tuple[str, dict]:
    """Submit the trainer with ``--wait``; return (job id, its metrics.json as a dict)."""
    for attempt in range(GARBLE_RETRIES + 1):
        if attempt:
            time.sleep(GARBLE_PAUSE_S)  # the garbling comes in spells
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
            *trainer,
            *TRAIN_ARGS,
            cwd=workdir,
            timeout=400,
        )
        if r.returncode == 0 or not garbled_start(r.stdout + r.stderr):
            break
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
