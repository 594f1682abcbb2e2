"""A run directory someone else can write: the telemetry writer, the measurement's exchange of
records (``.measure/``) and the step tracer never write, truncate or delete through a link
planted there, and rank 0 takes only the records this run's ranks wrote."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

from hpcbench.measure import telemetry as tm
from hpcbench.measure.recorder import Measurement, MeasureWarning
from hpcbench.measure.telemetry_files import rank_file
from hpcbench.safe_write import RunSubdir, UnsafePath
from hpcbench.this_rank import LaunchInfo

SECRET = "the victim's file\n"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim" / "bashrc"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def stopped(caught: list) -> list[str]:
    return [str(w.message) for w in caught if "telemetry stopped" in str(w.message)]


def test_a_planted_link_for_a_rank_file_is_never_appended_to(tmp_path):
    target = victim(tmp_path)
    run = tmp_path / "run"
    rank_file(run, 0).parent.mkdir(parents=True)
    rank_file(run, 0).symlink_to(target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = tm.Telemetry(run, rank=0, world_size=1, host="h", interval=0.0)
        t.add(1, 8, 0.01)
    assert target.read_text() == SECRET
    assert t.broken and "symbolic link" in " ".join(stopped(caught))


def test_a_hard_link_for_a_rank_file_is_never_appended_to(tmp_path):
    target = victim(tmp_path)
    run = tmp_path / "run"
    rank_file(run, 0).parent.mkdir(parents=True)
    os.link(target, rank_file(run, 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = tm.Telemetry(run, rank=0, world_size=1, host="h", interval=0.0)
        t.add(1, 8, 0.01)
    assert target.read_text() == SECRET
    assert t.broken and "hard links" in " ".join(stopped(caught))


def test_the_compaction_never_writes_through_a_predictable_temporary_name(tmp_path, monkeypatch):
    monkeypatch.setattr(tm, "MAX_RECORDS", 4)
    target = victim(tmp_path)
    run = tmp_path / "run"
    rank_file(run, 0).parent.mkdir(parents=True)
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # the names a guess would plant
        (run / "telemetry" / f".rank-0.jsonl.{pid}.tmp").symlink_to(target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no telemetry warning either: it all worked
        t = tm.Telemetry(run, rank=0, world_size=1, host="h", interval=0.0)
        for _ in range(12):
            t.add(1, 8, 0.01)
    assert target.read_text() == SECRET
    assert not t.broken and t.records <= 4
    left = sorted(p.name for p in (run / "telemetry").iterdir())
    assert [n for n in left if not n.endswith(".tmp")] == ["rank-0.jsonl"]  # no temporary left


def test_a_linked_telemetry_directory_turns_telemetry_off_with_one_warning(tmp_path):
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "telemetry").symlink_to(elsewhere, target_is_directory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = tm.Telemetry(run, rank=0, world_size=1, host="h", interval=0.0)
        for _ in range(3):
            t.add(1, 8, 0.01)
    assert list(elsewhere.iterdir()) == []
    said = stopped(caught)
    assert t.broken and len(said) == 1 and f"{run / 'telemetry'}: a symbolic link" in said[0]


def test_the_exchange_never_deletes_or_writes_through_a_linked_measure_directory(tmp_path):
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    theirs = {"rank": 1, "began_at": time.time(), "totals": {}, "warnings": []}
    (elsewhere / "rank-1.json").write_text(json.dumps(theirs))
    run = tmp_path / "run"
    run.mkdir()
    (run / ".measure").symlink_to(elsewhere, target_is_directory=True)
    one = Measurement(run, timeout=0.2, telemetry=0).start(LaunchInfo(1, 2, 1, 2, 0, "x", "h"))
    with pytest.warns(MeasureWarning, match="symbolic link"):
        zero = Measurement(run, timeout=0.2, telemetry=0).start(LaunchInfo(0, 2, 0, 2, 0, "x", "h"))
    one.step(4)
    one.finish()
    zero.step(4)
    zero.finish()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["rank-1.json"]  # nothing added
    assert json.loads((elsewhere / "rank-1.json").read_text()) == theirs  # nor taken, nor deleted
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["ranks"][0]["samples"] == 4 and len(metrics["ranks"]) == 1


def test_a_forged_rank_record_is_ignored_with_a_warning_naming_it(tmp_path):
    run = tmp_path / "run"
    place = [LaunchInfo(r, 3, r, 3, 0, "x", "h") for r in range(3)]
    zero = Measurement(run, timeout=0.3, telemetry=0).start(place[0])
    one = Measurement(run, timeout=0.3, telemetry=0).start(place[1])
    forged = {"rank": 2, "host": "h", "began_at": time.time(), "totals": {"train": 0.001},
              "windows": [], "steps": 1, "samples": 10**9, "first_batch": 10**9, "epochs": [],
              "finals": {}, "elapsed_s": 0.001, "warnings": [], "energy_node": None,
              "token": "0" * 32}  # fmt: skip
    (run / ".measure").mkdir(parents=True, exist_ok=True)
    (run / ".measure" / "rank-2.json").write_text(json.dumps(forged))
    for m in (one, zero):
        with m.phase("train"):
            m.step(4)
    one.finish()
    with pytest.warns(MeasureWarning, match="rank-2.json"):
        zero.finish()
    metrics = json.loads((run / "metrics.json").read_text())
    assert [r["rank"] for r in metrics["ranks"]] == [0, 1]
    assert sum(r["samples"] for r in metrics["ranks"]) == 8
    said = [w for w in metrics["warnings"] if "rank-2.json" in w]
    assert said and "not this run's token" in said[0]
    assert all("token" not in r for r in metrics["ranks"])


def test_the_helper_refuses_links_other_kinds_and_keeps_rewrites_private(tmp_path):
    target = victim(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "linked").symlink_to(target.parent, target_is_directory=True)
    with pytest.raises(UnsafePath, match="linked: a symbolic link: not written through"):
        RunSubdir(tmp_path / "run", "linked")
    with RunSubdir(tmp_path / "run", "own") as own:
        os.mkfifo(own.path / "fifo")
        with pytest.raises(UnsafePath, match="not a regular file"):
            own.open_append("fifo")
        (own.path / "link").symlink_to(target)
        own.write_atomically("link", b"new\n")  # the link is replaced, never written through
        assert target.read_text() == SECRET and (own.path / "link").read_text() == "new\n"
        assert not (own.path / "link").is_symlink()
        own.unlink("link")
    assert target.read_text() == SECRET
