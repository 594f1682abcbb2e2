"""Every command in README.md and docs/ is exercised: each fenced ``bash``, ``sh``, ``console``
or ``python`` block carries a doc-test marker (docs/contributing-docs.md), and the blocks marked
``run`` or ``dry-run`` are run, page by page, in order, in a fresh directory per page holding a
copy of ``jobs/`` and, as ``data/shapes`` (the trainer's default dataset, what ``make data``
makes), a small built-in dataset of 900 samples of 48x48 that trains in seconds
(tests/docblocks.py has the extraction and the dry-run stand-in).

Run blocks see a laptop: the venv first on PATH and no batch system, so ``hpcbench submit``
uses the local scheduler; ``$HPCBENCH_STATE_DIR`` is the page's own, so its first local job is
``local-1``. Dry-run blocks see this machine's PATH: with the test
SLURM cluster up, their ``hpcbench submit`` is checked against its partition; without one that
check is a warning, and in CI (``CI=true``) a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import docblocks
from tests.conftest import IN_CI, REPO, mpiexec_available, need_module, require

need_module("markdown_it")

BLOCK_TIMEOUT_S = 300


def _read_all() -> tuple[list[docblocks.Block], list[str]]:
    blocks: list[docblocks.Block] = []
    problems: list[str] = []
    for page in docblocks.pages():
        found, trouble = docblocks.read_blocks(page)
        blocks += found
        problems += trouble
    return blocks, problems


def _runnable(page: Path) -> list[docblocks.Block]:
    return [b for b in docblocks.read_blocks(page)[0] if b.mode in ("run", "dry-run")]


RUNNABLE_PAGES = [page for page in docblocks.pages() if _runnable(page)]


def test_every_command_block_carries_a_marker():
    blocks, problems = _read_all()
    unmarked = [
        f"{b.where}: ```{b.language} block without a doc-test marker" for b in blocks if not b.mode
    ]
    assert not unmarked + problems, (
        "\n".join(unmarked + problems)
        + "\nput <!-- doc-test: run -->, <!-- doc-test: dry-run --> or "
        "<!-- doc-test: skip: REASON --> on the line before each block (docs/contributing-docs.md)"
    )


def test_markers_are_read_as_documented(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n"
        "<!-- doc-test: run -->\n```bash\necho one\n```\n\n"
        "```python\nprint('unmarked')\n```\n\n"
        "<!-- doc-test: skip -->\n```sh\nnever\n```\n\n"
        "<!-- doc-test: runs -->\n```console\n$ echo typo\n```\n\n"
        "<!-- doc-test: dry-run -->\n```python\nprint('dry')\n```\n\n"
        "<!-- doc-test: skip: the reason -->\n```jinja\n{{ x }}\n```\n\n"
        "````markdown\n<!-- doc-test: run -->\n```bash\nan example, not a block\n```\n````\n\n"
        "<!-- doc-test: run -->\n\nprose\n"
    )
    blocks, problems = docblocks.read_blocks(page)
    assert [(b.line, b.language, b.mode, b.reason) for b in blocks] == [
        (4, "bash", "run", ""),
        (8, "python", "", ""),
        (13, "sh", "skip", ""),
        (18, "console", "runs", ""),
        (23, "python", "dry-run", ""),
    ]
    assert blocks[0].code == "echo one\n"
    where = docblocks.relative(page)
    assert [p.split(": ", 1)[0] for p in problems] == [
        f"{where}:13",
        f"{where}:18",
        f"{where}:23",
        f"{where}:28",
        f"{where}:39",
    ]


def test_console_blocks_split_commands_from_output():
    commands, expected = docblocks.console_parts(
        "$ hpcbench status local-1\nlocal-1\tCOMPLETED exit=0\n$ echo a \\\n  b\na b\n"
    )
    assert commands == "hpcbench status local-1\necho a \\\n  b\n"
    assert expected == "local-1\tCOMPLETED exit=0\na b"
    assert docblocks.output_matches("local-1 COMPLETED ...", "local-1\tCOMPLETED exit=0\n")
    assert docblocks.output_matches("first\n...\nlast", "first\nx\ny\nlast\n")
    assert not docblocks.output_matches("local-1 FAILED ...", "local-1\tCOMPLETED exit=0")


@pytest.fixture(scope="session")
def doc_dataset(tmp_path_factory) -> Path:
    """The small built-in dataset every page starts with as data/shapes."""
    root = tmp_path_factory.mktemp("docdata") / "shapes"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcbench",
            "prep",
            "synthetic",
            str(root),
            "--samples",
            "900",
            "--size",
            "48x48",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return root


@pytest.fixture(scope="session")
def laptop(tmp_path_factory) -> str:
    return docblocks.laptop_path(tmp_path_factory.mktemp("laptop") / "bin")


@pytest.fixture(scope="session")
def slurm_up() -> Iterator[bool]:
    """Whether the dry-run blocks can be checked against a SLURM partition: the test cluster,
    shared with the cluster tests that may run beside this one (as root; elsewhere whatever
    SLURM answers here)."""
    from tests.cluster.conftest import shared_cluster

    for _ in shared_cluster("slurm-up.sh", "slurm-down.sh"):
        yield docblocks.slurm_answers()


def _run(block: docblocks.Block, path: Path, work: Path, env: dict) -> tuple[int | None, str]:
    interpreter, source = docblocks.script_for(block)
    path.write_text(source)
    proc = subprocess.Popen(
        [interpreter, str(path)],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out
    return proc.returncode, out


def _cancel_leftovers(state: Path, work: Path, env: dict) -> None:
    """End the page's local jobs a block left running (cancel says which had finished)."""
    ids = sorted(p.stem for p in (state / "jobs" / "local").glob("local-*.json"))
    if ids:
        subprocess.run(
            [sys.executable, "-m", "hpcbench", "cancel", "--scheduler", "local", *ids],
            cwd=work,
            env=env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=[p.name for p in RUNNABLE_PAGES])
def test_page_blocks_run(page, tmp_path, doc_dataset, laptop, slurm_up):
    need_module("torch")
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    work, scripts, state = tmp_path / "work", tmp_path / "blocks", tmp_path / "state"
    scripts.mkdir()
    shutil.copytree(REPO / "jobs", work / "jobs")
    shutil.copytree(doc_dataset, work / "data" / "shapes")
    (tmp_path / "tmp").mkdir()
    extra = {
        "HPCBENCH_STATE_DIR": str(state),
        "DOCTEST_SLURM": "1" if slurm_up else "0",
        "TMPDIR": str(tmp_path / "tmp"),
    }
    failure = None
    timings = []
    unchecked = []
    try:
        for i, block in enumerate(_runnable(page)):
            env = docblocks.block_environment(block.mode, dict(os.environ), laptop, **extra)
            suffix = ".py" if block.language in ("python", "py") else ".sh"
            started = time.monotonic()
            code, out = _run(block, scripts / f"{i:02d}-line{block.line}{suffix}", work, env)
            timings.append(f"{block.where} ({block.mode}): {time.monotonic() - started:.1f} s")
            print(f"--- {timings[-1]}\n{out}")  # shown with pytest -rP, or -s
            if code != 0:
                how = f"timed out after {BLOCK_TIMEOUT_S} s" if code is None else f"exit {code}"
                failure = f"{block.where} ({block.mode}): {how}\n{block.code}\n--- output\n{out}"
                break
            if block.language == "console":
                expected = docblocks.console_parts(block.code)[1]
                if expected.strip() and not docblocks.output_matches(expected, out):
                    failure = (
                        f"{block.where}: the output differs from the page's\n--- page\n"
                        f"{expected}\n--- output\n{out}"
                    )
                    break
            unchecked += [
                f"{block.where}: {line}" for line in out.splitlines() if docblocks.UNCHECKED in line
            ]
    finally:
        _cancel_leftovers(
            state, work, docblocks.block_environment("run", dict(os.environ), laptop, **extra)
        )
    assert failure is None, failure + "\n--- blocks run\n" + "\n".join(timings)
    if unchecked:
        message = "\n".join(unchecked)
        if IN_CI:
            pytest.fail(f"CI must have the test SLURM cluster up for dry-run blocks:\n{message}")
        warnings.warn(
            f"dry-run blocks not checked against a SLURM partition:\n{message}", stacklevel=1
        )
