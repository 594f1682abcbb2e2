"""Per-rank step traces (hpcbench.measure.traces): a tiny model trained in-process with the real
torch profiler, no fakes; the files it writes, the window's edge cases, and reading summaries
from a run directory that may hold links and garbage."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import warnings

import pytest

from hpcbench.measure.traces import (
    StepTracer,
    TraceWarning,
    parse_steps,
    read_summaries,
    trace_files,
)
from tests.conftest import REPO, need_module

torch = need_module("torch")


def train(tracer: StepTracer, first: int, last: int, close: bool = True) -> None:
    """Steps ``first``..``last`` of a Linear model, the data wait and a stand-in for
    communication marked as the trainer marks them."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(first, last + 1):
        tracer.before_step(step)
        with tracer.part("data"):
            time.sleep(0.002)
            x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        with tracer.part("comm"):
            time.sleep(0.001)
        opt.step()
        tracer.after_step(step)
    if close:
        tracer.close()


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_a_window_writes_a_chrome_trace_and_a_summary(tmp_path):
    tracer = StepTracer(tmp_path, rank=0, world_size=1, steps=(2, 3), host="node7")
    train(tracer, 0, 5)
    traces = tmp_path / "traces"
    assert sorted(p.name for p in traces.iterdir()) == [
        "rank-0.pt.trace.json",
        "rank-0.summary.json",
    ]  # no temporary file left behind
    trace = load(traces / "rank-0.pt.trace.json")
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    assert trace["hpcbench"] == {"rank": 0, "world_size": 1, "host": "node7", "steps": [2, 3]}
    assert trace["distributedInfo"]["rank"] == 0
    names = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert {"rank 0"} == {e["args"]["name"] for e in names if e["pid"] == os.getpid()}
    assert all(e["args"]["name"].startswith("rank 0") for e in names)
    assert len(names) == len({e["pid"] for e in names})  # torch's "python" replaced, not doubled
    assert trace["traceName"] == str(traces / "rank-0.pt.trace.json")  # not the temporary name
    data_ranges = [e for e in events if e.get("name") == "hpcbench::data"]
    assert len(data_ranges) == 2  # steps 2 and 3, not the others

    summary = load(traces / "rank-0.summary.json")
    assert summary["format"] == 1 and summary["steps"] == [2, 3] and summary["host"] == "node7"
    seconds = summary["seconds"]
    assert seconds["total"] > 0 and seconds["data"] >= 0.004 and seconds["comm"] >= 0.002
    assert seconds["compute"] == pytest.approx(
        max(0.0, seconds["total"] - seconds["comm"] - seconds["data"]), abs=2e-6
    )  # each rounded to the microsecond
    ops = summary["top_ops"]
    assert 0 < len(ops) <= 10
    assert all(op["name"] and op["calls"] >= 1 and op["self_s"] > 0 for op in ops)
    assert not any(op["name"].startswith("hpcbench::") for op in ops)
    assert [op["self_s"] for op in ops] == sorted((op["self_s"] for op in ops), reverse=True)
    assert summary["cost_note"]
    assert read_summaries(tmp_path) == [summary]
    assert trace_files(tmp_path) == [traces / "rank-0.pt.trace.json"]


def test_parts_are_free_outside_the_window(tmp_path):
    tracer = StepTracer(tmp_path, rank=0, world_size=1, steps=(2, 2))
    assert isinstance(tracer.part("data"), contextlib.nullcontext)
    tracer.before_step(1)
    assert not tracer.active
    tracer.close()
    tracer.before_step(2)  # closed: never starts again
    assert not tracer.active and not (tmp_path / "traces").exists()


def test_a_run_resumed_inside_the_window_still_traces(tmp_path):
    tracer = StepTracer(tmp_path, rank=3, world_size=4, steps=(2, 4))
    train(tracer, 3, 6)
    (summary,) = read_summaries(tmp_path)
    assert summary["rank"] == 3 and summary["world_size"] == 4
    assert summary["steps"] == [3, 4]  # the steps traced: it resumed at 3
    trace = load(tmp_path / "traces" / "rank-3.pt.trace.json")
    assert len([e for e in trace["traceEvents"] if e.get("name") == "hpcbench::data"]) == 2
    assert any(e.get("args", {}).get("name") == "rank 3" for e in trace["traceEvents"])


def test_a_run_resumed_past_the_window_writes_nothing(tmp_path):
    train(StepTracer(tmp_path, rank=0, world_size=1, steps=(2, 4)), 5, 6)
    assert not (tmp_path / "traces").exists()


def test_a_run_that_ends_inside_the_window_writes_at_close(tmp_path):
    tracer = StepTracer(tmp_path, rank=0, world_size=1, steps=(2, 100))
    train(tracer, 0, 4, close=False)
    assert tracer.active and not (tmp_path / "traces").exists()
    tracer.close()
    written = (tmp_path / "traces" / "rank-0.summary.json").stat().st_mtime_ns
    tracer.close()  # idempotent
    assert (tmp_path / "traces" / "rank-0.summary.json").stat().st_mtime_ns == written
    assert read_summaries(tmp_path)[0]["steps"] == [2, 4]  # traced until the run ended


def test_a_failure_to_write_is_one_warning_and_training_goes_on(tmp_path):
    not_a_directory = tmp_path / "run"
    not_a_directory.write_text("a file where the run directory should be")
    tracer = StepTracer(not_a_directory, rank=0, world_size=1, steps=(1, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(tracer, 0, 4)
    assert [w.category for w in caught] == [TraceWarning]
    assert "rank 0" in str(caught[0].message) and str(not_a_directory) in str(caught[0].message)
    assert not tracer.active and tracer.done


@pytest.mark.parametrize("text, expected", [("0:0", (0, 0)), ("10:14", (10, 14))])
def test_parse_steps_accepts_a_window(text, expected):
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text", ["5:2", "a:b", "3", "-1:2", "1:2:3", "", "0:200", "٣:٤"])
def test_parse_steps_names_the_bad_value(text):
    with pytest.raises(ValueError) as err:
        parse_steps(text)
    message = str(err.value)
    assert repr(text) in message and "FIRST:LAST" in message and "\n" not in message


def test_read_summaries_skips_links_garbage_and_oversized_files(tmp_path):
    train(StepTracer(tmp_path, rank=0, world_size=2, steps=(1, 1)), 0, 2)
    traces = tmp_path / "traces"
    summary = load(traces / "rank-0.summary.json")
    (traces / "rank-10.summary.json").write_text(json.dumps({**summary, "rank": 10}))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({**summary, "rank": 1}))
    (traces / "rank-1.summary.json").symlink_to(elsewhere)
    (traces / "rank-2.summary.json").write_text("{not json")
    (traces / "rank-3.summary.json").write_text(json.dumps({"format": 1, "rank": 3}))
    limit = max(p.stat().st_size for p in traces.glob("rank-*.summary.json"))
    (traces / "rank-4.summary.json").write_text(json.dumps({**summary, "rank": 4}) + " " * limit)
    (traces / "rank-5.summary.json").mkdir()
    (traces / "rank-1.pt.trace.json").symlink_to(elsewhere)
    assert [s["rank"] for s in read_summaries(tmp_path, max_bytes=limit)] == [0, 10]
    assert [s["rank"] for s in read_summaries(tmp_path)] == [0, 4, 10]
    assert trace_files(tmp_path) == [traces / "rank-0.pt.trace.json"]
    assert read_summaries(tmp_path / "missing") == [] and trace_files(tmp_path / "missing") == []


def test_the_module_imports_without_torch():
    code = "import sys, hpcbench.measure.traces; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_a_linked_traces_directory_is_never_written_through(tmp_path):
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "traces").symlink_to(elsewhere, target_is_directory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(StepTracer(run, rank=0, world_size=1, steps=(1, 1)), 0, 2)
    assert list(elsewhere.iterdir()) == []
    assert [w.category for w in caught] == [TraceWarning]
    assert f"{run / 'traces'}: a symbolic link" in str(caught[0].message)
