"""How a measured run's records are combined into the trainer's documents
(:mod:`hpcbench.measure.documents`), and what one rank records (:mod:`hpcbench.measure.recorder`),
in-process; the launches are in tests/integration/test_measure.py."""

from __future__ import annotations

import pytest

from hpcbench.measure.documents import epoch_rows, phase_seconds
from hpcbench.measure.recorder import Measurement, MeasureWarning


def record(rank: int, totals: dict, epochs: list, elapsed: float = 10.0) -> dict:
    return {"rank": rank, "totals": totals, "epochs": epochs, "elapsed_s": elapsed, "warnings": []}


def epoch(seconds: dict, samples: int, **values: float) -> dict:
    return {"seconds": seconds, "steps": 3, "samples": samples, "values": values}


def test_a_phase_is_the_slowest_rank_s_and_compute_is_split_only_where_timed():
    warn: list[str] = []
    two = [record(0, {"train": 4.0, "val": 1.0}, []), record(1, {"train": 5.0, "val": 0.5}, [])]
    seconds = phase_seconds(two, warn)
    assert seconds["train_s"] == 5.0 and seconds["val_s"] == 1.0 and seconds["setup_s"] == 0.0
    assert seconds["data_s"] is None and seconds["comm_s"] is None and seconds["compute_s"] is None
    assert warn == []
    timed = [record(0, {"train": 4.0, "data": 1.0}, []), record(1, {"train": 3.0, "comm": 0.5}, [])]
    split = phase_seconds(timed, warn)
    assert (split["data_s"], split["comm_s"], split["compute_s"]) == (1.0, 0.5, 2.5)


def test_a_run_without_a_train_phase_counts_its_time_outside_the_others_and_says_so():
    warn: list[str] = []
    seconds = phase_seconds([record(0, {"setup": 2.0, "test": 1.0}, [], elapsed=10.0)], warn)
    assert seconds["train_s"] == pytest.approx(7.0)
    assert warn == ["no train phase timed: the run's time outside set-up, val and test counted"]


def test_epochs_take_the_slowest_rank_s_times_the_sum_of_samples_and_rank_0_s_values():
    rank0 = [epoch({"train": 2.0, "val": 1.0}, 40, loss=0.9, val_accuracy=0.5, tokens=7)]
    rank1 = [epoch({"train": 4.0, "val": 0.5}, 40, loss=5.0, val_accuracy=0.1)]
    [row] = epoch_rows([record(0, {}, rank0), record(1, {}, rank1)])
    assert row["epoch"] == 1 and row["train_time_s"] == 4.0 and row["val_time_s"] == 1.0
    assert row["samples_per_s"] == 80 / 4.0
    assert row["train_loss"] == 0.9 and row["val_accuracy"] == 0.5 and row["tokens"] == 7
    assert row["data_time_s"] is None and row["compute_time_s"] is None


def test_nested_phases_count_in_their_own_total_and_only_the_outer_one_is_a_window(tmp_path):
    m = Measurement(tmp_path / "run").start()
    with m.phase("train"):
        with m.phase("data"):
            pass
        m.step(samples=5)
    m.begin("validate")
    m.end()
    assert set(m.totals) == {"train", "data", "val"}
    assert [w["phase"] for w in m.windows] == ["train", "val"]
    assert (m.steps, m.samples, m.first_batch, m.warnings) == (1, 5, 5, [])
    m.abandon()


def test_a_rank_file_left_by_an_earlier_run_is_not_taken_as_this_runs(tmp_path):
    import json
    import time

    from hpcbench.measure.exchange import SAME_RUN_S, gather, make_token
    from hpcbench.this_rank import LaunchInfo

    folder = tmp_path / ".measure"
    token = make_token(tmp_path)
    stale = {"rank": 1, "began_at": time.time() - SAME_RUN_S - 60, "totals": {"train": 999.0},
             "token": token}  # fmt: skip
    (folder / "rank-1.json").write_text(json.dumps(stale))
    mine = {"rank": 0, "began_at": time.time(), "warnings": [], "token": token}
    place = LaunchInfo(0, 2, 0, 2, 0, "openmpi", "h")
    records = gather(mine, place, tmp_path, timeout=0.3)
    assert [r["rank"] for r in records] == [0]  # the earlier run's rank 1 is left out
    assert mine["warnings"] == ["finish: no record from rank(s) 1 within 0.3 s: left out"]
    assert (folder / "rank-1.json").exists()  # not this run's: not removed either
    fresh = {**stale, "began_at": time.time()}
    (tmp_path / "elsewhere.json").write_text(json.dumps(fresh))
    (folder / "rank-1.json").unlink()
    (folder / "rank-1.json").symlink_to(tmp_path / "elsewhere.json")  # a link is never read
    again = {**mine, "warnings": [], "token": token}
    assert [r["rank"] for r in gather(again, place, tmp_path, 0.3)] == [0]
    (folder / "rank-1.json").unlink()
    (folder / "rank-1.json").write_text(json.dumps(fresh))  # this run's, a regular file: taken
    again = {**mine, "warnings": [], "token": token}
    assert [r["rank"] for r in gather(again, place, tmp_path, 0.3)] == [0, 1]
    assert not folder.exists()  # what was taken and the token removed


def test_wrong_calls_keep_what_is_right_stay_bounded_and_never_raise(tmp_path):
    import warnings
    from pathlib import Path

    m = Measurement(tmp_path / "run", config={"data": Path("/d"), "lr": 0.1}).start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a loop run with warnings as errors: still no raise
        m.step(samples="x")
        for _ in range(500):
            m.begin("Forward Pass")
    m.step(samples=4)
    with pytest.warns(MeasureWarning, match="'low' is not a number"):
        m.epoch(val_accuracy=None, train_loss="low", epoch=0, lr=0.1)  # one epoch, lr kept
    assert len(m.epochs) == 1 and m.epochs[0]["values"] == {"lr": 0.1}
    assert len(m.warnings) == 101 and m.warnings[-1].startswith("more warnings left out")
    assert m.meta["config"] == {"data": "/d", "lr": 0.1}  # JSON, a path as its text
    m.abandon()
    fresh = Measurement(tmp_path / "run2").start()
    with pytest.warns(MeasureWarning, match="'epoch' is hpcbench's own"):
        fresh.epoch(epoch=0, samples_per_s=5.0)
    assert fresh.epochs[0]["values"] == {}  # hpcbench's own names are left out
    with pytest.warns(MeasureWarning, match="train - data - comm"):
        fresh.begin("compute")
    assert not fresh.is_open("compute") and any("train - data - comm" in w for w in fresh.warnings)
    fresh.abandon()


def strict_json(path):
    import json

    def refuse(constant: str):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_non_finite_values_and_bad_sample_counts_are_null_with_a_warning(tmp_path):
    import math

    m = Measurement(tmp_path / "run", telemetry=0).start()
    with m.phase("train"):
        m.step(samples=4)
        with pytest.warns(MeasureWarning, match="-4"):
            m.step(samples=-4)  # refused at the call: the step counts, its samples unknown
    with pytest.warns(MeasureWarning, match="not a finite number"):
        m.epoch(train_loss=math.nan, val_accuracy=math.inf, lr=0.1)
    m.final(test_accuracy=-math.inf, test_loss=0.5, test_samples=math.nan)
    path = m.finish()
    metrics = strict_json(path)  # valid JSON: no NaN, no Infinity
    [row] = metrics["epochs"]
    assert row["train_loss"] is None and row["val_accuracy"] is None and row["lr"] == 0.1
    assert metrics["test"]["accuracy"] is None and metrics["test"]["loss"] == 0.5
    assert metrics["ranks"][0]["steps"] == 2 and metrics["ranks"][0]["samples"] is None
    assert metrics["throughput"]["train_samples_per_s"] is None and row["samples_per_s"] is None
    assert any("samples must be a whole number from 0" in w for w in metrics["warnings"])
    assert any("1 step(s) of unknown samples" in w for w in metrics["warnings"])


def test_a_bad_config_value_or_a_huge_count_keeps_the_rest_of_metrics_json(tmp_path):
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    cycle: dict = {"lr": 0.1}
    cycle["self"] = cycle
    config = {"cycle": cycle, "odd": Unprintable(), "nan": float("nan"), "batch": 32,
              "big": 10**5000}  # fmt: skip
    with pytest.warns(MeasureWarning, match="config"):
        m = Measurement(tmp_path / "run", config=config, telemetry=0).start()
    with m.phase("train"):
        m.step(samples=8)
        with pytest.warns(MeasureWarning, match="samples"):
            m.step(samples=10**400)
    path = m.finish()
    assert path is not None
    metrics = strict_json(path)
    got = metrics["config"]
    assert got["batch"] == 32 and got["cycle"]["lr"] == 0.1 and got["nan"] is None
    assert isinstance(got["cycle"]["self"], str) and "cycle" in got["cycle"]["self"]
    assert isinstance(got["odd"], str) and "Unprintable" in got["odd"]
    assert isinstance(got["big"], str)
    assert metrics["ranks"][0]["steps"] == 2 and metrics["phases"]["train_s"] > 0


def test_a_run_by_hand_says_where_it_wrote_and_watch_shows_unmarked_parts(tmp_path, capsys):
    from hpcbench.watch import Watcher, resolve
    from hpcbench.watch.view import lines

    run = tmp_path / "run"
    m = Measurement(run, telemetry=3600).start()
    with m.phase("train"):
        for _ in range(3):
            m.step(samples=4)
    m._live.record(m)  # the record an interval's end writes
    text = "\n".join(lines(Watcher(resolve(str(run))).look()))
    assert "step 3  compute" in text and "data not measured  comm not measured" in text
    path = m.finish()
    assert path == run / "metrics.json"
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == f"hpcbench.measure: wrote {path}"
