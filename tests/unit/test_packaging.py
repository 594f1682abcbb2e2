"""The wheel ships the templates: an installed hpcbench renders without the source tree; the
GPU benchmark script refuses a machine without a GPU in one line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO


def gpu_script():
    """benchmarks/gpu.py as a module: its ``source_tree`` is how a wheel is built from the sources
    alone."""
    spec = importlib.util.spec_from_file_location("gpu_benchmark", REPO / "benchmarks" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_wheel_contains_templates_and_renders_from_install(tmp_path):
    tree = gpu_script().source_tree(tmp_path / "tree")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(tree),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    wheel = next((tmp_path / "dist").glob("hpcbench-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for template in ("base.sh.j2", "slurm.sbatch.j2", "pbs.qsub.j2", "sge.qsub.j2", "local.sh.j2"):
        assert f"hpcbench/templates/{template}" in names
    sources = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "hpcbench").rglob("*.py")
        if "__pycache__" not in p.parts
    ]
    missing = [s for s in sources if s not in names]
    assert not missing, f"modules left out of the wheel: {missing}"
    extra = [n for n in names if n.endswith(".py") and n not in sources]
    assert not extra, f"modules in the wheel that the source does not hold: {extra}"
    # the converters ship inside the hpcbench namespace: no top-level package to shadow a user's
    assert not [n for n in names if n.split("/")[0] not in ("hpcbench",) and n.endswith(".py")]
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    code = (
        "import hpcbench, hpcbench.jobs.render as r; from hpcbench.jobs.spec_load import build_spec;"
        f"assert hpcbench.__file__.startswith({str(target)!r}), hpcbench.__file__;"
        f"assert str(r.builtin_template_dir()).startswith({str(target)!r});"
        "import hpcbench.data_prep.convert;"
        f"assert hpcbench.data_prep.__file__.startswith({str(target)!r});"
        "print(r.render_script(build_spec({}), 'slurm'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/bash\n#SBATCH --job-name=hpcbench")


def test_the_gpu_benchmark_where_no_gpu_is_visible_says_so_in_one_line(tmp_path):
    """benchmarks/gpu.py on a machine (or with CUDA_VISIBLE_DEVICES) without a GPU: one line
    and exit 1 before its wheels are installed, naming the --device cpu rehearsal, instead of
    eight minutes of failing steps."""
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--wheels", str(tmp_path / "none"),
         "--out", str(out)],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("benchmarks/gpu.py: no GPU here (") and "--device cpu" in line
    assert not out.exists() and r.stdout == ""


def test_make_demo_ends_with_what_to_do_next_and_the_readme_says_how_to_reach_hpcbench():
    """A newcomer's first command ends with the next ones (hpcbench on the PATH, the
    quickstart, measuring their own script), and the README says how a new shell finds it."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    planned = subprocess.run(["make", "-n", "-s", "demo", "STAMP=/dev/null"], cwd=repo,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    after = planned.split("--wait", 1)[1]
    for step in (". .venv/bin/activate", "docs/quickstart.md", "docs/measure.md"):
        assert step in after, planned
    assert ". .venv/bin/activate" in (repo / "README.md").read_text()
