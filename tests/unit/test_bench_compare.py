"""Configurations compared with each other and for the same work: a user's script with a fixed
batch per rank (ddp 64 against single 32: weak scaling) is flagged next to its speedup and in the
summary; every configuration is compared with every other (the ratio of median total times, its
interval and significance, by the statistics of the baseline's comparisons); the summary leads
with what is significant; curves that lie on each other stay visible in the accuracy figure.

The results directories are written in the layout ``hpcbench bench`` writes, by
tests/unit/test_bench_analysis.py's helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.bench import stats
from hpcbench.bench.analysing.analysis import analyse
from hpcbench.bench.reading.results_reader import load_results
from hpcbench.bench.reporting import report
from hpcbench.bench.reporting.document import to_markdown
from tests.unit.test_bench_analysis import BASE, SPREAD, Matrix, _config, _scaled

ONE = BASE  # train 100 s
TWO = {**BASE, "train": 52.0}  # clearly faster: significant
TWO_SAME = {**BASE, "train": 99.9}  # within the noise of ONE


def _results(root: Path, *, ddp_batch: int, second: dict[str, float] = TWO) -> Path:
    """single (global batch 32) and ddp-2 (``ddp_batch``) and ddp-4 (the same as ddp-2), six
    timing runs each, as a user's script measured by hpcbench.measure records them."""
    configs = [_config("single", 1, strategy="single"), _config("ddp-2", 2), _config("ddp-4", 4)]
    m = Matrix(root, configs, cpu=None, one="single")
    for f in SPREAD[2:8]:
        m.add("single", "timing", _scaled(ONE, f), global_batch=32)
        m.add("ddp-2", "timing", _scaled(second, f), world=2, global_batch=ddp_batch)
        m.add("ddp-4", "timing", _scaled(TWO_SAME, f), world=4, global_batch=ddp_batch)
    return m.write()


def _markdown(root: Path, out: Path) -> str:
    results = load_results(root)
    return to_markdown(report.build_blocks(results, analyse(results), (), (), out))


def _section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n")[1].split("\n## ")[0]


def test_a_different_global_batch_is_flagged_next_to_the_speedup_and_in_the_summary(tmp_path):
    root = _results(tmp_path / "weak", ddp_batch=64)
    analysis = analyse(load_results(root))
    by_name = {c["name"]: c for c in analysis["configs"]}
    assert by_name["single"]["global_batch"] == 32 and by_name["ddp-2"]["global_batch"] == 64
    assert analysis["batches"] == {
        "reference": "single", "global_batch": 32, "different": {"ddp-2": 64, "ddp-4": 64}
    }  # fmt: skip
    said = next(s for s in analysis["sentences"] if s.startswith("ddp-2: 1.72× faster"))
    assert "global batch 64 against 32 of single" in said and "weak scaling" in said, said

    text = _markdown(root, tmp_path / "out")
    summary = _section(text, "Summary")
    assert "Different work: the configurations trained different global batches" in summary
    assert "ddp-2 64, ddp-4 64, against 32 of single" in summary
    row = next(r for r in _section(text, "Scaling").splitlines() if r.startswith("| ddp-2 "))
    assert "| 64 |" in row and "(weak scaling)" in row, row


def test_the_same_global_batch_is_no_warning(tmp_path):
    root = _results(tmp_path / "strong", ddp_batch=32)
    analysis = analyse(load_results(root))
    assert analysis["batches"]["different"] == {}
    assert not any("weak scaling" in s for s in analysis["sentences"])
    text = _markdown(root, tmp_path / "out")
    assert "Different work" not in text and "(weak scaling)" not in _section(text, "Scaling")


def test_every_configuration_is_compared_with_every_other_by_the_baselines_statistics(tmp_path):
    root = _results(tmp_path / "r", ddp_batch=32)
    analysis = analyse(load_results(root))
    pairs = {(d["a"], d["b"]): d for d in analysis["pairwise"]}
    names = ["single", "ddp-2", "ddp-4"]
    assert set(pairs) == {(a, b) for a in names for b in names if a != b}
    by_name = {c["name"]: c for c in analysis["configs"]}
    totals = {n: by_name[n]["time"]["total"] for n in names}
    for (a, b), d in pairs.items():
        assert d["metric"] == "total" and d["n"] == [6, 6]
        assert d["ratio"] == stats.ratio_of_medians(totals[a]["values"], totals[b]["values"])
        assert d["significant"] == stats.significantly_different(totals[a], totals[b])
    # ddp-2 against ddp-4: neither is the baseline, and the difference is real
    assert pairs[("ddp-2", "ddp-4")]["significant"] and pairs[("ddp-2", "ddp-4")]["ratio"][
        "value"
    ] == pytest.approx(67.0 / 114.9)
    assert not pairs[("ddp-4", "single")]["significant"]

    table = _section(_markdown(root, tmp_path / "out"), "Configurations against each other")
    header = next(line for line in table.splitlines() if line.startswith("| time of"))
    assert header.split("|")[2:5] == [" single ", " ddp-2 ", " ddp-4 "], header
    row = next(line for line in table.splitlines() if line.startswith("| ddp-2 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "1" and cells[3].startswith("0.583 ×") and cells[3].endswith("significant")
    row = next(line for line in table.splitlines() if line.startswith("| ddp-4 "))
    assert row.rstrip("| ").endswith("n.s.") or "n.s." in row.split("|")[2], row


def test_the_summary_leads_with_what_is_significant(tmp_path):
    root = _results(tmp_path / "r", ddp_batch=32)
    summary = _section(_markdown(root, tmp_path / "out"), "Summary").strip().splitlines()
    assert summary[0].startswith("Significant (the 95 % intervals of the total times do not")
    assert summary[2].startswith("- ddp-2 is 1.72× faster than single (total time 0.583×")
    lead = summary[: summary.index("", 2)]
    assert any(line.startswith("- ddp-2 is 1.71× faster than ddp-4") for line in lead), lead
    assert not any("ddp-4 is" in line and "than single" in line for line in lead), lead


def test_a_summary_with_nothing_significant_says_so_first(tmp_path):
    root = _results(tmp_path / "r", ddp_batch=32, second=TWO_SAME)
    summary = _section(_markdown(root, tmp_path / "out"), "Summary").strip()
    assert summary.removeprefix("> ").startswith(
        "No difference of total time between configurations is significant"
    )


def test_curves_that_lie_on_each_other_stay_visible(tmp_path, monkeypatch):
    """Three configurations with the same validation accuracy per epoch: each curve has a line
    style and a marker of its own, its markers hollow, so that one drawn over another still
    shows the one below."""
    pytest.importorskip("matplotlib")
    from hpcbench.bench.reporting import figures

    drawn = []
    real_save = figures.save
    monkeypatch.setattr(figures, "save", lambda fig, out, key: drawn.append(fig) or real_save(
        fig, out, key))  # fmt: skip
    plot = figures.accuracy(analyse(load_results(_results(tmp_path / "r", ddp_batch=32))), tmp_path)
    assert plot.path is not None and len(drawn) == 1
    lines = [ln for ln in drawn[0].axes[0].get_lines() if not ln.get_label().startswith("_")]
    assert [ln.get_label() for ln in lines] == ["single", "ddp-2", "ddp-4"]
    assert len({ln.get_linestyle() for ln in lines}) == 3, [ln.get_linestyle() for ln in lines]
    assert len({ln.get_marker() for ln in lines}) == 3
    assert all(ln.get_markerfacecolor() == "none" for ln in lines)
    assert len({ln.get_markersize() for ln in lines}) == 3  # nested where they coincide


def test_the_report_names_a_measured_programs_command_and_arguments(tmp_path):
    """A matrix of a user's script: the provenance names the script and its arguments (not
    the trainer's flags, which it has none of), the configurations their own arguments."""
    import json

    root = _results(tmp_path / "r", ddp_batch=64)
    bench = json.loads((root / "bench.json").read_text())
    bench["matrix"].update(program={"script": "train.py"}, program_args=["--batch-size", "32"])
    bench["matrix"].pop("trainer_args")
    bench["matrix"]["configs"][1]["program_args"] = ["--backend", "gloo"]
    (root / "bench.json").write_text(json.dumps(bench))
    text = _markdown(root, tmp_path / "out")
    assert "| program | python train.py --batch-size 32 |" in _section(text, "Provenance")
    assert "common trainer flags" not in text
    row = next(r for r in _section(text, "Configurations").splitlines() if r.startswith("| ddp-2"))
    assert "--backend gloo" in row, row
