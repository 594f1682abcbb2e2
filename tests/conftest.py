"""Shared test helpers: run the real CLI in a subprocess, isolate state, insist on tools in CI,
mark each test with its tier.

In CI (``CI=true``) a test that needs MPI, torch or shellcheck fails when the tool is missing
instead of skipping: the Makefile installs all of them, so a skip there would hide a broken set-up.

Tiers: tests/tiers.toml names the tier of every test module (``fast`` or ``full``) and, for a
full module, the tests that represent it in the fast tier; each such test is marked ``fast``
(``pytest -m fast`` is ``make test-fast``). ``HPCBENCH_TEST_TIER=fast`` also shrinks the property
tests' example counts (:func:`examples`); their pinned examples always run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TIERS_FILE = TESTS / "tiers.toml"
FAST_TIER = os.environ.get("HPCBENCH_TEST_TIER", "") == "fast"


def tier_table() -> tuple[dict[str, str], dict[str, list[str]]]:
    """tests/tiers.toml: each module's tier ("unit/test_x.py" -> "fast" or "full") and the fast
    representatives of the full modules (module -> test ids)."""
    from hpcbench.tomlfile import read_toml_file

    table = read_toml_file(TIERS_FILE, 1 << 20, "tests/tiers.toml", "a tier table")
    return dict(table.get("modules", {})), {
        k: list(v) for k, v in table.get("representatives", {}).items()
    }


def examples(full: int) -> int:
    """A property test's number of examples: ``full`` in the whole suite, a sixth of it (at least
    20) in the fast tier (``HPCBENCH_TEST_TIER=fast``)."""
    return max(20, full // 6) if FAST_TIER else full


def pytest_configure(config):
    """No cluster profile of this machine's or its user's reaches a test (tests that use
    profiles write their own files and point these variables at them), no test's bench lands in
    the user's results history, waits poll the test clusters every second, and torch computes
    in one thread in every process the tests start."""
    import tempfile

    empty = Path(tempfile.mkdtemp(prefix="hpcbench-test-config-"))
    config._hpcbench_config_dir = empty  # removed when the session ends (pytest_unconfigure)
    os.environ["HPCBENCH_SITE_CONFIG"] = str(empty / "site-profiles.toml")
    os.environ["XDG_CONFIG_HOME"] = str(empty / "config")
    os.environ.pop("HPCBENCH_PROFILE", None)
    os.environ["XDG_DATA_HOME"] = str(empty / "data")  # the history's default place
    os.environ.pop("HPCBENCH_HISTORY", None)
    # the test clusters answer at once: a job's end is seen within a second, not ten
    os.environ["HPCBENCH_POLL_CEILING"] = "1"
    # several test processes share two cores: every trainer and predictor they start computes
    # in one thread (the trainer's own default would give each rank all the cores, and threads
    # of busy-waiting OpenMP pools would take turns on them)
    os.environ["OMP_NUM_THREADS"] = "1"
    # and torch.compile's C++ kernels are compiled in the process itself rather than by a pool
    # of workers that each import torch (measured: a fifth less CPU for a small model)
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    # the files tests write have the usual modes whatever the umask they run under (a profiles
    # file that group members may write is refused, as OpenSSH refuses its config)
    os.umask(0o022)


def pytest_unconfigure(config):
    """The session's own configuration directory goes (each process made its own)."""
    import shutil

    made = getattr(config, "_hpcbench_config_dir", None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)


def require(tool_ok: bool, reason: str) -> None:
    """Skip on a developer machine without the tool; fail in CI."""
    if tool_ok:
        return
    if IN_CI:
        pytest.fail(f"CI must have {reason} (the Makefile installs it)")
    pytest.skip(f"needs {reason}")


def have_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def need_module(name: str) -> ModuleType:
    """Import a module the tests need: skip (the whole test module) without it on a developer
    machine, fail in CI, where the Makefile installs it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        if IN_CI:
            pytest.fail(f"CI must have {name} (the Makefile installs it)", pytrace=False)
        pytest.skip(f"needs {name}", allow_module_level=True)


@pytest.fixture(scope="session")
def shapes_data(tmp_path_factory):
    """``shapes_data(samples, classes, size, seed=0)``: the built-in synthetic set in that shape
    (grayscale HDF5 shards, ``size`` as (width, height)), converted once per test process and
    shared by every module that asks for the same shape. Read it; never write into it."""
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    made: dict[tuple, Path] = {}

    def get(samples: int, classes: int, size: tuple[int, int], seed: int = 0) -> Path:
        key = (samples, classes, tuple(size), seed)
        if key not in made:
            root = (
                tmp_path_factory.mktemp(f"shapes-{samples}-{classes}-{size[0]}x{size[1]}-s{seed}-")
                / "shapes"
            )
            options = ConvertOptions(size=tuple(size), grayscale=True, progress=False)
            convert(synthetic(samples, classes, seed=seed), root, options)
            made[key] = root
        return made[key]

    return get


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory):
    """``shared_run(key, make)``: the directory ``make(path)`` fills, made once in the whole
    session and shared by every test process (pytest-xdist's too) that asks for the same
    ``key``: the first to ask makes it under a lock, the others wait for it. For a result
    several modules compare against (an uninterrupted training run): the key must say all that
    decides its content. Read it; never write into it."""
    import fcntl
    import hashlib

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this session's directory, above each process's own
    root = root / "shared-runs"
    root.mkdir(exist_ok=True)

    def get(key: str, make) -> Path:
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        out = root / name
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not (root / f"{name}.made").exists():
                shutil.rmtree(out, ignore_errors=True)  # a maker that failed left it half made
                make(out)
                (root / f"{name}.made").write_text(key)
        return out

    return get


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh directory to submit from, with its own local-scheduler state."""
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("HPCBENCH_TEMPLATE_DIR", raising=False)
    # As after activating the venv: its torchrun and mpiexec come first on PATH.
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    d = tmp_path / "work"
    d.mkdir()
    return d


def hpcbench(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    """Run ``python -m hpcbench ARGS`` for real; return the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYTHONUNBUFFERED", None)  # as on a cluster: prove the output stays line-whole
    bindir = str(Path(sys.executable).parent)  # the venv's torchrun/mpiexec, as after activation
    full_env["PATH"] = bindir + os.pathsep + full_env.get("PATH", "")
    return subprocess.run(
        [sys.executable, "-m", "hpcbench", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


# MPICH's mpiexec (Hydra) now and then reports status 141 for a program that ends within
# milliseconds of its start (measured: 33 launches of `true` in 300 on the loaded 2-core machine).
# Tests that start a trivial program under mpiexec run these stand-ins for true and false, which
# live 0.1 s: none of 300 launches of either went wrong.
QUICK_OK = "sleep 0.1"


def own_training_example(workdir: Path, per_class: int) -> Path:
    """jobs/own-training copied into ``workdir`` with a small folder of its images
    (``data/own-images``, 16 × 16): the user's own script as the tests run it."""
    example = workdir / "jobs" / "own-training"
    shutil.copytree(REPO / "jobs" / "own-training", example)
    made = subprocess.run(
        [sys.executable, str(example / "make_images.py"), "data/own-images", "--per-class",
         str(per_class), "--size", "16"], cwd=workdir, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return example


QUICK_FAIL = ("sh", "-c", "sleep 0.1; exit 1")


def mpiexec_available() -> bool:
    return (
        shutil.which(
            "mpiexec",
            path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        )
        is not None
    )


# The SLURM tests run in two processes at once, a module whole in one of them: the two-node test
# cluster runs a job of each (most take one CPU a node), and what each test mostly does is wait
# for its job. This half holds the modules that hold their jobs longest (requeues, arrays).
SLURM_SECOND_HALF = frozenset({"test_requeue_slurm", "test_sweep_arrays", "test_submitit"})


@pytest.hookimpl(tryfirst=True)  # before -m reads the marks
def pytest_collection_modifyitems(config, items):
    """Mark the fast tier's tests ``fast`` (tests/tiers.toml). A module the table does not name is
    in no tier: tests/unit/test_tiers.py fails for it."""
    modules, representatives = tier_table()
    for item in items:
        try:
            module = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue
        if modules.get(module) == "fast" or item.name in representatives.get(module, ()):
            item.add_marker(pytest.mark.fast)


def pytest_itemcollected(item):
    """Under pytest-xdist's ``--dist loadgroup`` (``make test`` and ``make test-fast``): the tests
    of the throwaway SLURM cluster in two processes (see above), one after the other in each
    (they share the cluster, which their fixtures start once); every test of the Grid Engine in
    another; every integration module whole in one process (its module fixtures run once); unit
    tests wherever a process is free. Marked as each test is collected: xdist reads the groups
    in its own collection hook."""
    parts = item.path.parts
    if "cluster" in parts:
        if "sge_cluster" in getattr(item, "fixturenames", ()):
            group = "cluster-sge"
        else:
            group = "cluster-2" if item.path.stem in SLURM_SECOND_HALF else "cluster"
        item.add_marker(pytest.mark.xdist_group(group))
    elif "integration" in parts:
        item.add_marker(pytest.mark.xdist_group(f"integration-{item.path.stem}"))


# The cluster tests are the suite's longest chain, one test after another: the other test
# processes run at a lower priority (the clusters' daemons, and so their jobs, are started at the
# usual one: tests/cluster/conftest.py), and torch computes in one thread in each of them (two
# cores, three processes: more threads only wait for each other).
LOWER_PRIORITY = 5
_lowered: list[bool] = []


def pytest_runtest_setup(item):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if not _lowered and "cluster" not in item.path.parts:
        os.nice(LOWER_PRIORITY)
        _lowered.append(True)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
