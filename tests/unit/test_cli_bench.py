"""The CLI of ``bench``, ``report`` and ``compare``: usage errors are one line, exit 2, and
nothing is created."""

from __future__ import annotations

import pytest

from tests.conftest import hpcbench


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("bench",),
            "hpcbench: error: give a matrix file or --configs (e.g. --configs single,ddp:2,mpi:2)",
        ),
        (
            ("bench", "m.toml", "--configs", "single"),
            "hpcbench: error: give a matrix file or --configs, not both",
        ),
        (
            ("bench", "--configs", "single,horovod:2"),
            "hpcbench: error: --configs: 'horovod:2' is not STRATEGY",
        ),
        (("bench", "nope.toml"), "hpcbench: error: nope.toml: no such file"),
        (
            ("bench", "--configs", "single", "--", "--output-dir", "x"),
            "hpcbench: error: command line: trainer_args: --output-dir is set by the matrix",
        ),
        (("report", "missing-dir"), "hpcbench: error: missing-dir"),
        (("compare", "a", "b"), "hpcbench: error: a"),
    ],
)
def test_usage_errors_are_one_line(workdir, args, message):
    r = hpcbench(*args, cwd=workdir)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr
    assert not (workdir / "runs").exists()


def test_plan_prints_the_runs_in_order_and_runs_nothing(workdir):
    r = hpcbench("bench", "--configs", "single,mpi:2", "--repetitions", "2", "--plan", cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "1\tsingle\ttiming\t1",
        "2\tmpi-2\ttiming\t1",
        "3\tsingle\ttiming\t2",
        "4\tmpi-2\ttiming\t2",
    ]
    assert not (workdir / "runs").exists()


def test_results_that_are_not_a_matrixs_are_refused_untouched(workdir):
    (workdir / "mine").mkdir()
    (workdir / "mine" / "notes.txt").write_text("my own file\n")
    r = hpcbench(
        "bench", "--configs", "single", "--results", "mine", "--scheduler", "local", cwd=workdir
    )
    assert r.returncode == 1
    assert r.stderr.strip().endswith(
        "exists and is not a matrix's results directory (no bench.json); give a new directory"
    )
    assert [p.name for p in (workdir / "mine").iterdir()] == ["notes.txt"]


def test_report_output_never_replaces_files_it_did_not_write(tmp_path):
    from hpcbench.bench.reporting.report import ReportError, claim_output

    mine = tmp_path / "mydocs"
    (mine / "figures").mkdir(parents=True)
    (mine / "figures" / "power.png").write_text("precious")
    with pytest.raises(ReportError, match="holds files that hpcbench report did not write"):
        claim_output(mine)
    assert (mine / "figures" / "power.png").read_text() == "precious"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ReportError, match="is a file, not a directory"):
        claim_output(tmp_path / "afile")
    fresh = tmp_path / "fresh"
    claim_output(fresh)
    (fresh / "report.md").write_text("an earlier report")
    claim_output(fresh)  # its own directory: it may write there again


def test_flags_change_a_matrix_file(workdir):
    (workdir / "m.toml").write_text(
        'repetitions = 3\ntrainer_args = ["--epochs", "2"]\n'
        '[[config]]\nname = "a"\nstrategy = "single"\n'
    )
    r = hpcbench("bench", "m.toml", "--repetitions", "1", "--plan", cwd=workdir)
    assert r.stdout.splitlines() == ["1\ta\ttiming\t1"], r.stderr
    from hpcbench.bench.running.matrix import build_matrix, read_matrix_table
    from hpcbench.cli import build_parser
    from hpcbench.cli.bench import build_matrix_from

    args = build_parser().parse_args(
        ["bench", str(workdir / "m.toml"), "--energy-repetitions", "2"]
    )
    m = build_matrix_from(args, ["--model", "mlp"])
    assert (m.name, m.repetitions, m.energy_repetitions) == ("m", 3, 2)
    assert m.trainer_args == ["--epochs", "2", "--model", "mlp"]
    assert build_matrix(read_matrix_table(workdir / "m.toml")).trainer_args == ["--epochs", "2"]
