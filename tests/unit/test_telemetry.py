"""Per-rank telemetry, stragglers and ``hpcbench watch`` from records written here: the file
stays bounded for a run of days, a merged record keeps the totals, a broken directory never
raises into the loop, the straggler rule names a slow rank and not noise, and watch's plain
lines and its reading of hostile directories."""

from __future__ import annotations

import io
import json
import os
import warnings
from pathlib import Path

import pytest

from hpcbench.measure import stragglers
from hpcbench.measure import telemetry as tm
from hpcbench.measure.telemetry_files import all_records, latest_records, rank_file
from hpcbench.watch import Watcher, WatchError, resolve, watch
from hpcbench.watch.view import lines


def rec(rank: int, step: int, compute: float, steps: int = 10, t: float = 0.0) -> dict:
    return {"v": 1, "rank": rank, "host": f"n{rank}", "world": 4, "t": t, "epoch": 0,
            "step": step, "of": 100, "epochs": 1, "samples": step * 8, "steps": steps,
            "wall_s": steps * (compute + 0.01), "compute_s": compute, "data_s": 0.001,
            "comm_s": 0.01, "loss": 1.0}  # fmt: skip


def write(run_dir: Path, records: list[dict]) -> None:
    for r in records:
        path = rank_file(run_dir, r["rank"])
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(r) + "\n")


def test_records_stay_bounded_and_merged_pairs_keep_the_totals(tmp_path, monkeypatch):
    monkeypatch.setattr(tm, "MAX_RECORDS", 8)
    t = tm.Telemetry(tmp_path, rank=0, world_size=1, host="h", interval=0.0, total_steps=1000)
    for i in range(40):
        t.add(2, 16, 0.02 * (1 + i % 2), 0.002, 0.004, loss=float(i))
    records = all_records(tmp_path)[0]
    assert len(records) <= 8  # 20 records written, pairs merged twice
    assert sum(r["steps"] for r in records) == 80 and records[-1]["step"] == 80
    mean = sum(r["compute_s"] * r["steps"] for r in records) / 80
    assert mean == pytest.approx(0.015)  # 0.02 then 0.04 s for two steps each
    assert records[-1]["loss"] == 39.0 and records[-1]["samples"] == 640


def test_merge_weights_per_step_means_by_steps():
    a, b = rec(0, 10, 0.1, steps=10), rec(0, 40, 0.2, steps=30)
    m = tm.merge(a, b)
    assert m["steps"] == 40 and m["step"] == 40
    assert m["compute_s"] == pytest.approx((0.1 * 10 + 0.2 * 30) / 40)


def test_a_directory_that_cannot_be_written_stops_telemetry_with_one_warning(tmp_path):
    blocker = tmp_path / "run"
    blocker.write_text("a file, not a directory")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = tm.Telemetry(blocker, rank=0, world_size=1, host="h", interval=0.0)
        for _ in range(5):
            t.add(1, 8, 0.01)
    assert t.broken and len(caught) == 1 and "telemetry stopped" in str(caught[0].message)


def test_the_rule_names_a_slow_rank_once_and_not_the_noise():
    watch = stragglers.StragglerWatch()
    said = []
    for k in range(1, 6):
        step = 10 * k
        latest = {r: rec(r, step, 0.050 * (1 + 0.1 * (r % 2))) for r in range(4)}
        latest[2] = rec(2, step, 0.100)
        said += watch.update(latest)
    assert len(said) == 1 and said[0].startswith("straggler: rank 2 on n2 is 1.8x slower")
    assert "since step 0" in said[0]
    # the same records again say nothing; back to normal: it is said once
    assert watch.update(latest) == []
    back = {r: rec(r, 70, 0.05) for r in range(4)}
    assert watch.update(back) == ["rank 2 (n2) is no longer a straggler at step 70"]


def test_a_short_slow_spell_and_tiny_differences_are_not_stragglers():
    watch = stragglers.StragglerWatch()
    said = watch.update({r: rec(r, 10, 0.05 if r else 0.2) for r in range(3)})  # one record
    said += watch.update({r: rec(r, 20, 0.05) for r in range(3)})
    said += watch.update({r: rec(r, 30, 0.0001 if r else 0.001) for r in range(3)})  # < FLOOR
    said += watch.update({r: rec(r, 40, 0.0001 if r else 0.001) for r in range(3)})
    assert said == []


def test_analyse_finds_the_slowest_rank_and_the_time_the_others_waited(tmp_path):
    records = {r: [rec(r, 10 * k, 0.1 if r == 1 else 0.05, t=k) for k in range(1, 5)]
               for r in range(3)}  # fmt: skip
    a = stragglers.analyse(records)
    assert a["slowest"] == {"rank": 1, "host": "n1", "ratio": pytest.approx(2.0)}
    assert a["others_waited_s"] == pytest.approx(2 * 40 * 0.05)
    assert set(a["named"]) == {1}
    assert stragglers.analyse({0: records[0]}) is None  # one rank: nothing to compare


def test_latest_records_skip_links_garbage_and_other_ranks_lines(tmp_path):
    write(tmp_path, [rec(0, 10, 0.05), rec(1, 10, 0.05)])
    with rank_file(tmp_path, 1).open("a") as f:
        f.write('{"half a line')
    os.symlink("/etc/passwd", rank_file(tmp_path, 2))
    rank_file(tmp_path, 3).write_text(json.dumps(rec(0, 99, 0.1)) + "\n")  # rank 0's in 3's file
    latest = latest_records(tmp_path)
    assert sorted(latest) == [0, 1] and latest[1]["step"] == 10


def test_watch_of_a_run_directory_in_plain_lines(tmp_path):
    run = tmp_path / "run"
    write(run, [rec(r, 50, 0.05 if r != 3 else 0.2) for r in range(4)])
    target = resolve(str(run))
    watcher = Watcher(target)
    snap = watcher.look()
    text = "\n".join(lines(snap))
    assert "run: running" in text and "epoch 1/1" in text and "step 50/100 (50%)" in text
    assert "ETA" in text and "rank 3 n3: step 50  compute 200.0 ms" in text
    assert watcher.queries == 0  # no job: no scheduler asked
    (run / "metrics.json").write_text("{}")
    out = io.StringIO()
    assert watch(target, interval=0.2, out=out) == 0
    assert out.getvalue().rstrip().endswith("run " + str(run) + ": 1 completed")


def test_watch_names_what_it_cannot_follow(tmp_path):
    with pytest.raises(WatchError, match="neither a directory"):
        resolve(str(tmp_path / "absent"))


def test_a_matrix_run_directory_outside_its_results_is_not_followed(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "runs.json").write_text(json.dumps({"format": "x", "runs": [
        {"config": "a", "kind": "timing", "rep": 1, "status": "running", "run_dir": "../../etc"},
        {"config": "b", "kind": "timing", "rep": 1, "status": "completed", "run_dir": "runs/b"},
    ]}))  # fmt: skip
    items = resolve(str(results)).items()
    assert [i.run_dir for i in items] == [None, results / "runs" / "b"]


def test_a_rank_names_its_node_as_the_batch_system_does():
    from hpcbench.this_rank import node_name

    assert node_name({"SLURMD_NODENAME": "gpu017"}) == "gpu017"
    host = node_name({})
    assert host and node_name({"HPCBENCH_NODE": "1"}) == f"{host}:node1"  # the local scheduler's


class StandInEvent:
    """A stand-in for torch.cuda.Event (no GPU here): ``at`` milliseconds on the device's
    clock once the device has passed it, None before."""

    def __init__(self, at: float | None) -> None:
        self.at = at

    def query(self) -> bool:
        return self.at is not None

    def elapsed_time(self, end: StandInEvent) -> float:
        assert self.at is not None and end.at is not None, "read before the device passed it"
        return end.at - self.at


def test_device_timed_steps_are_read_once_passed_and_never_waited_for(tmp_path):
    t = tm.Telemetry(tmp_path, rank=0, world_size=2, host="h", interval=3600)
    t.add(1, 8, (StandInEvent(0.0), StandInEvent(40.0)), 0.001, 0.002)
    t.add(1, 8, (StandInEvent(50.0), StandInEvent(110.0)), 0.001, 0.002)
    late_end = StandInEvent(None)  # the device has not reached this step's end yet
    t.add(1, 8, (StandInEvent(120.0), late_end), 0.001, 0.002)
    t.flush()
    first = all_records(tmp_path)[0][-1]
    assert first["steps"] == 3 and first["compute_s"] == pytest.approx(0.050)  # (40 + 60) / 2
    late_end.at = 150.0
    t.add(1, 8, (StandInEvent(160.0), StandInEvent(170.0)), 0.001, 0.002)
    t.flush()
    assert all_records(tmp_path)[0][-1]["compute_s"] == pytest.approx(0.020)  # (30 + 10) / 2


def test_a_rank_is_named_only_after_records_above_the_threshold():
    watch = stragglers.StragglerWatch()
    said = []
    for k, slow in enumerate((1.35, 1.2, 1.2, 1.2), start=1):
        latest = {r: rec(r, 10 * k, 0.05) for r in range(4)}
        latest[2] = rec(2, 10 * k, 0.05 * slow)
        said += watch.update(latest)
    assert said == []  # one record above 1.3, then under it: below the bar, never named


def test_a_damaged_or_foreign_line_is_left_out(tmp_path):
    good = rec(0, 10, 0.05)
    bad = [{**good, "steps": "a"}, {**good, "wall_s": "x"}, {**good, "of": "[/y]"},
           {**good, "t": "x"}, {**good, "compute_s": float("nan")}, {**good, "host": 5},
           {**good, "rank": "0"}]  # fmt: skip
    path = rank_file(tmp_path, 0)
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in [*bad, good]).replace("NaN", "1e999"))
    records = all_records(tmp_path)[0]
    assert records == [good]
    assert lines(Watcher(resolve(str(tmp_path))).look())  # and watch shows it


def test_a_compaction_that_cannot_read_the_file_leaves_it_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(tm, "MAX_RECORDS", 4)
    t = tm.Telemetry(tmp_path, rank=0, world_size=1, host="h", interval=0.0)
    for _ in range(4):
        t.add(1, 8, 0.01)
    before = rank_file(tmp_path, 0).read_text()

    def stale(*args, **kwargs):
        raise OSError(116, "Stale file handle")

    monkeypatch.setattr(tm.RankFile, "read_whole", stale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.add(1, 8, 0.01)
    assert t.broken and rank_file(tmp_path, 0).read_text() == before


def test_a_line_a_killed_run_left_unended_is_ended_before_the_next(tmp_path):
    path = rank_file(tmp_path, 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec(0, 10, 0.05)) + "\n" + '{"rank": 0, "st')
    t = tm.Telemetry(tmp_path, rank=0, world_size=1, host="h", interval=0.0)
    t.add(1, 8, 0.01)
    assert [r["steps"] for r in all_records(tmp_path)[0]] == [10, 1]


HOSTILE = {"config": "c[/x]", "kind": "timing", "rep": 1, "status": "pend\x1b]0;owned\x07ing",
           "job_id": "\x1b[2J[link=http://evil]x[/link]", "run_dir": "runs/c"}  # fmt: skip


def test_watch_shows_hostile_names_as_text_in_lines_and_in_tables(tmp_path):
    from rich.console import Console

    from hpcbench.watch.view import tables

    results = tmp_path / "results"
    results.mkdir()
    (results / "runs.json").write_text(json.dumps({"format": "x", "runs": [HOSTILE]}))
    write(results / "runs" / "c", [{**rec(0, 5, 0.05), "host": "[bold]n\x1b[31m"},
                                   {**rec(1, 5, 0.05), "host": "n1"}])  # fmt: skip
    snap = Watcher(resolve(str(results))).look()
    text = "\n".join(lines(snap))
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;owned" in text
    out = io.StringIO()
    Console(file=out, width=250, color_system=None, force_terminal=False).print(tables(snap))
    drawn = out.getvalue()
    assert "\x1b" not in drawn and "[/x]" in drawn and "[link=http://evil]" in drawn
    assert "[bold]n\\x1b[31m" in drawn  # the host as it is, escaped, not a style


def test_a_sweep_watched_before_anything_was_submitted_is_not_over(tmp_path):
    results = tmp_path / "sweep"
    results.mkdir()
    (results / "sweep.json").write_text(json.dumps({"tasks": [{"index": 1, "run": "a=1"}]}))
    (results / "submissions.json").write_text(json.dumps({"submissions": []}))
    snap = Watcher(resolve(str(results))).look()
    assert [r.state for r in snap.items] == ["to do"] and not snap.done


def test_a_matrix_has_an_eta_for_the_whole(tmp_path):
    results = tmp_path / "results"
    runs = [{"config": "a", "kind": "timing", "rep": 1, "status": "completed", "run_dir": "runs/a",
             "started": 1000.0, "ended": 1100.0},
            {"config": "b", "kind": "timing", "rep": 1, "status": "running", "run_dir": "runs/b"},
            {"config": "c", "kind": "timing", "rep": 1, "status": "pending", "run_dir": None},
            {"config": "d", "kind": "timing", "rep": 1, "status": "pending", "run_dir": None}]  # fmt: skip
    results.mkdir()
    (results / "runs.json").write_text(json.dumps({"format": "x", "runs": runs}))
    write(results / "runs" / "b", [rec(0, 50, 0.05)])  # 50 of 100 steps, 10 steps in 0.6 s
    snap = Watcher(resolve(str(results))).look()
    assert snap.eta_s == pytest.approx(50 * 0.06 + 2 * 100)
    assert "ETA 3m23s for the whole" in lines(snap)[0]


#: lines of someone else's (or damaged): none of them a record, none may stop a reader
HOSTILE_LINES = [
    "not json at all",
    "[1, 2, 3]",
    json.dumps({**rec(0, 11, 0.05), "step": "eleven"}),
    json.dumps({**rec(0, 12, 0.05), "step": 10**400}),  # a float's range overflows
    json.dumps({**rec(0, 13, 0.05), "compute_s": float("nan")}),
    "[" * 5000 + "]" * 5000,  # deeper than the JSON reader's recursion
    json.dumps({**rec(0, 14, 0.05), "samples_per_s": 1e308}),
]


def hostile_run(run: Path) -> None:
    write(run, [rec(0, 10, 0.05), rec(1, 10, 0.05)])
    with rank_file(run, 0).open("a") as f:
        f.write("\n".join(HOSTILE_LINES) + "\n")
    with rank_file(run, 1).open("a") as f:  # an ETA beyond any float
        f.write(json.dumps({**rec(1, 15, 0.05), "of": 10**308, "wall_s": 1e300}) + "\n")
    write(run, [rec(0, 20, 0.05)])


def test_hostile_lines_are_skipped_counted_and_named_and_watch_goes_on(tmp_path):
    run = tmp_path / "run"
    hostile_run(run)
    text = "\n".join(lines(Watcher(resolve(str(run))).look()))
    assert "rank 0 n0: step 20" in text and "rank 1 n1: step 10" in text
    assert "telemetry/rank-0.jsonl: 7 lines skipped (not a telemetry record)" in text
    assert "telemetry/rank-1.jsonl: 1 line skipped (not a telemetry record)" in text
    skipped: dict = {}
    records = all_records(run, skipped=skipped)
    assert [r["step"] for r in records[0]] == [10, 20] and [r["step"] for r in records[1]] == [10]
    assert skipped == {rank_file(run, 0): 7, rank_file(run, 1): 1}


def test_the_report_s_reader_skips_hostile_lines_and_names_the_file(tmp_path, capsys):
    from hpcbench.bench.reading.results_reader import load_results
    from hpcbench.bench.reporting.report_ranks import rank_blocks
    from tests.unit.test_bench_analysis import Matrix

    matrix = Matrix(tmp_path / "results", [{"name": "c", "devices": 2}], None, None)
    matrix.add("c", "timing", {"setup": 1.0, "train": 10.0, "val": 1.0, "test": 1.0})
    root = matrix.write()
    hostile_run(root / matrix.runs[0]["run_dir"])
    results = load_results(root)
    [run] = results.runs
    assert run.stragglers is not None and set(run.stragglers["ranks"]) == {0, 1}
    said = capsys.readouterr().err.splitlines()
    assert any(line.endswith("telemetry/rank-0.jsonl: 7 lines skipped (not a telemetry record)")
               for line in said)  # fmt: skip
    notes = [b.text for b in rank_blocks(results, tmp_path / "report") if hasattr(b, "text")]
    assert any("rank-0.jsonl: 7 lines skipped" in n for n in notes)
