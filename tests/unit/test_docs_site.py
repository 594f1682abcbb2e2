"""The documentation site builds with warnings as errors (``make docs``): every page of docs/
is in a table of contents, every link between pages and to a heading resolves, every code block
parses in its language, and the API reference is generated from the docstrings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, need_module

need_module("sphinx")
need_module("myst_parser")
need_module("furo")


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(REPO / "docs"),
            str(out),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    pages = sorted(p.stem for p in (REPO / "docs").glob("*.md"))
    missing = [page for page in pages if not (out / f"{page}.html").is_file()]
    assert missing == []
    api = (out / "api.html").read_text(encoding="utf-8")
    for documented in (
        "hpcbench.api.submit",
        "hpcbench.jobs.spec_load.load_spec",
        "hpcbench.data.reader.ShardedDataset",
        "hpcbench.data_prep.convert",
        "hpcbench.train.entry.run_training",
        "hpcbench.train.config.TrainConfig",
        "hpcbench.predict.run_prediction",
        "hpcbench.bench.reporting.report.build_report",
        "hpcbench.scaling.predictions.predictions",
    ):
        assert f'id="{documented}"' in api, f"{documented} is missing from the API reference"
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "furo" in index  # the theme
