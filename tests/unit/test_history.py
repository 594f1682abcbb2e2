"""The results history (hpcbench.history): a real SQLite file, recorded from real results
directories (the layout hpcbench bench writes, built by tests/unit/test_bench_analysis.py's
helpers), listed, compared against, checked with references, and written by several processes
at once."""

from __future__ import annotations

import json
import multiprocessing
import re
import sqlite3
from pathlib import Path

import pytest

from hpcbench import cli
from hpcbench.bench.analysing.comparison import compare
from hpcbench.bench.analysing.references import ReferenceError, check, check_references
from hpcbench.history import History, HistoryError, compare_against, find, record_results
from hpcbench.history import store as store_module
from tests.unit.test_bench_analysis import BASE, Matrix, _config, _small


@pytest.fixture
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "data" / "history.sqlite"
    monkeypatch.setenv("HPCBENCH_HISTORY", str(path))
    return path


def _with_reference(root: Path, reference: dict) -> Path:
    bench = json.loads((root / "bench.json").read_text())
    bench["matrix"]["reference"] = reference
    (root / "bench.json").write_text(json.dumps(bench))
    return root


def test_record_list_and_show(history, tmp_path, capsys):
    a = _small(tmp_path / "a", two_train=52.0)
    rid, new = record_results(a)
    assert (rid, new) == (1, True)
    assert record_results(a) == (1, False)  # the same results twice: one record
    assert oct(history.stat().st_mode & 0o777) == "0o600"
    with History() as store:
        [entry] = store.entries()
    assert entry.name == "test" and entry.kind == "bench" and entry.directory == str(a.resolve())
    assert entry.versions["torch"] == "2.3.0"
    two = entry.figures["2dev-ddp"]
    assert two["train_s"]["median"] == pytest.approx(52.0)
    assert two["train_s"]["n"] == 6 and len(two["train_s"]["ci95"]) == 2
    assert set(two) >= {"samples_per_s", "total_s", "train_s", "test_accuracy", "speedup"}

    assert cli.main(["history"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("id\trecorded") and out[1].startswith("1\t") and "\ttest\t" in out[1]
    assert cli.main(["history", "1"]) == 0
    shown = capsys.readouterr().out
    assert "2dev-ddp:" in shown and "train_s: 52 s" in shown
    assert cli.main(["history", "--name", "other"]) == 0
    assert "no recorded results match" in capsys.readouterr().out
    assert cli.main(["history", "--json", "--since", "2000-01-01"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["figures"]["1dev"]["total_s"]["n"] == 6
    with pytest.raises(SystemExit) as bad:
        cli.main(["history", "--since", "last week"])
    assert bad.value.code == 2
    assert "--since: expected YYYY-MM-DD[THH:MM], got 'last week'" in capsys.readouterr().err
    assert cli.main(["history", "7"]) == 2
    assert capsys.readouterr().err.strip() == f"hpcbench: error: no record #7 in {history}"


def test_compare_against_last_date_id_and_name_uses_compares_rules(history, tmp_path):
    old = _small(tmp_path / "old", two_train=52.0)
    record_results(old)
    new = _small(tmp_path / "new", two_train=60.0, torch="2.4.0", extra=True)
    entry, findings = compare_against(new, "last")
    assert entry.id == 1
    assert findings == compare(old, new)  # the same findings as comparing the directories
    assert any(f.startswith("2dev-ddp train time: 52 s → 60 s") for f in findings)
    assert compare_against(new, "#1")[0].id == 1
    assert compare_against(new, "test")[0].id == 1
    today = entry.recorded_at[:10]
    assert compare_against(new, today)[0].id == 1
    with pytest.raises(HistoryError, match="no result of matrix 'test' recorded on or before"):
        compare_against(new, "2000-01-01")
    with pytest.raises(HistoryError, match="no recorded bench result #5"):
        compare_against(new, "5")
    # the results directory never compares against its own record
    record_results(new)
    with History() as store:
        assert find(store, "last", "test", new).id == 1


def test_compare_cli_against(history, tmp_path, capsys):
    old = _small(tmp_path / "old", two_train=52.0)
    record_results(old)
    new = _small(tmp_path / "new", two_train=60.0)
    assert cli.main(["compare", str(new), "--against", "last"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("against #1 test (") and "2dev-ddp train time: 52 s → 60 s" in out
    assert cli.main(["compare", str(new)]) == 2
    assert "give RESULTS_B or --against" in capsys.readouterr().err
    assert cli.main(["compare", str(new), "--against", "nothing-like-it"]) == 1
    assert "no recorded result of a matrix named 'nothing-like-it'" in capsys.readouterr().err


def test_references_and_check_exit_codes(history, tmp_path, capsys):
    root = _small(tmp_path / "r", two_train=52.0)
    # 2dev-ddp trains at 14,769 samples/s (median) in these results
    _with_reference(
        root,
        {
            "2dev-ddp": {"samples_per_s": [14000, -0.05, "inf"], "train_s": [52.0, -0.01, 0.01]},
            "*": {"test_accuracy": [0.8, -0.02, 0.02]},
        },
    )
    assert cli.main(["check", str(root)]) == 0
    assert "4 of 4 figure(s) within tolerance" in capsys.readouterr().err

    _with_reference(root, {"2dev-ddp": {"samples_per_s": [16000, -0.05, 0.10]}})
    assert cli.main(["check", str(root)]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "2dev-ddp samples_per_s: 14,769 samples/s out of tolerance: [15,200, 17,600] "
        "(reference 16,000, -7.7% from the reference; 2dev-ddp)"
    ]
    assert "0 of 1 figure(s) within tolerance" in out.err

    # a system's own reference wins over the general one; other systems' are not used
    refs = tmp_path / "refs.toml"
    refs.write_text(
        '[reference]\n"2dev-ddp" = { samples_per_s = [16000, -0.05, 0.10] }\n'
        '"hydra:2dev-ddp" = { samples_per_s = [14500, -0.05, 0.10] }\n'
        '"other:*" = { train_s = [1, 0, 0] }\n'
    )
    assert cli.main(["check", str(root), "--references", str(refs), "--profile", "hydra"]) == 0
    assert cli.main(["check", str(root), "--references", str(refs)]) == 1
    capsys.readouterr()

    # a configuration the results do not have fails, never passes silently
    _with_reference(root, {"8dev-ddp": {"samples_per_s": [1, -1, "inf"]}})
    assert cli.main(["check", str(root)]) == 1
    assert "8dev-ddp samples_per_s: not measured" in capsys.readouterr().out

    # bad references: one line naming the file and key, exit 2
    refs.write_text('[reference]\n"1dev" = { samples_per_s = [100, 0.05, 0.1] }\n')
    assert cli.main(["check", str(root), "--references", str(refs)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"hpcbench: error: {refs}: reference.1dev.samples_per_s: lower must be a number <= 0 "
        "(or -inf), got 0.05"
    )
    no_refs = _small(tmp_path / "none", two_train=52.0)
    assert cli.main(["check", str(no_refs)]) == 2
    assert "no reference values" in capsys.readouterr().err


def _with_failed_runs(root: Path, config: str, failed: int) -> Path:
    """Mark the first ``failed`` timing runs of ``config`` failed, as bench records a run whose
    job failed (its metrics.json never written)."""
    doc = json.loads((root / "runs.json").read_text())
    for run in [r for r in doc["runs"] if r["config"] == config][:failed]:
        run.update(status="failed", error="rank 1: out of memory")
        (root / run["run_dir"] / "metrics.json").unlink()
    (root / "runs.json").write_text(json.dumps(doc))
    return root


@pytest.mark.parametrize("config,failed", [("2dev-ddp", 5), ("1dev", 6), ("1dev", 1)])
def test_check_fails_when_runs_failed_unless_allowed_and_names_them(
    history, tmp_path, capsys, config, failed
):
    """check is for CI: a failed run is a failure whether or not its configuration is
    referenced, named in the output; --allow-failed lets the figures alone decide."""
    root = _small(tmp_path / "r", two_train=52.0)
    _with_reference(root, {"2dev-ddp": {"samples_per_s": [14000, -0.05, "inf"]}})
    _with_failed_runs(root, config, failed)
    assert cli.main(["check", str(root)]) == 1
    out = capsys.readouterr()
    assert f"{config}: {failed} of 6 timing run(s) failed (rank 1: out of memory)" in out.out
    assert "--allow-failed" in out.err
    assert cli.main(["check", str(root), "--allow-failed"]) == 0
    out = capsys.readouterr()
    assert f"{config}: {failed} of 6 timing run(s) failed" in out.err  # still said
    assert "1 of 1 figure(s) within tolerance" in out.err


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"a": {"speed": [1, -0.1, 0.1]}}, "reference.a.speed: unknown figure"),
        ({"a": {"samples_per_s": [1, -0.1]}}, "expected [reference, lower, upper]"),
        ({"a": {"samples_per_s": ["x", -0.1, 0.1]}}, "the reference must be a finite number"),
        ({"a": {"samples_per_s": [1, -0.1, -0.2]}}, "upper must be a number >= 0"),
        ({":a": {"samples_per_s": [1, -0.1, 0.1]}}, "expected CONFIG, *, PROFILE:CONFIG"),
        ({"a": {}}, "expected a table of figures"),
    ],
)
def test_malformed_references_are_one_line(table, message):
    with pytest.raises(ReferenceError, match=re.escape(message)):
        check_references(table, "m.toml")


def test_tolerances_follow_reframe_and_open_sides():
    analysis = {
        "configs": [{"name": "c", "throughput": {"median": 95.0, "ci95": [94, 96], "n": 3}}]
    }
    refs = check_references({"c": {"samples_per_s": [100, -0.05, "inf"]}}, "m")
    [outcome] = check(analysis, refs)
    assert outcome.ok and outcome.low == 95.0 and outcome.high == float("inf")
    refs = check_references({"c": {"samples_per_s": [0, "-inf", 0.5]}}, "m")
    assert check(analysis, refs)[0].high == 0.0 and not check(analysis, refs)[0].ok


def _writer(path: str, worker: int, count: int) -> None:
    from hpcbench.history.store import History

    with History(path) as store:
        for i in range(count):
            store.record(
                kind="bench",
                name=f"w{worker}",
                directory=f"/results/{worker}/{i}",
                fingerprint=f"{worker}-{i}",
                provenance={"torch": "2.3.0"},
                matrix={"name": f"w{worker}"},
                analysis={"configs": []},
                figures={"c": {"total_s": {"median": float(i), "ci95": [i, i], "n": 1}}},
                hosts=["n1"],
            )


def test_concurrent_writers_never_corrupt_the_store(tmp_path):
    path = tmp_path / "shared" / "history.sqlite"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(str(path), w, 25)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM results").fetchone()[0] == 100
    assert db.execute("SELECT count(*) FROM figures").fetchone()[0] == 100
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # a local filesystem


def test_a_network_filesystem_gets_the_rollback_journal(tmp_path, monkeypatch):
    # No NFS here: the filesystem's type is what /proc/self/mounts would say on a shared home.
    monkeypatch.setattr(store_module, "filesystem_type", lambda path: "nfs4")
    with History(tmp_path / "h.sqlite") as store:
        store.entries()
        assert store.journal == "delete"
    assert store_module.filesystem_type(tmp_path) not in (None, "")


def test_a_file_that_is_not_a_history_is_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("my notes\n" * 100)
    with pytest.raises(HistoryError, match="not an hpcbench history"):
        History(text).entries()
    assert text.read_text() == "my notes\n" * 100
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE mine (x)")
    db.commit()
    db.close()
    before = other.read_bytes()
    with pytest.raises(HistoryError, match=r"tables: mine\)"):
        History(other).entries()
    assert other.read_bytes() == before


def test_an_sqlite_file_with_a_table_named_meta_is_still_someone_elses(tmp_path):
    other = tmp_path / "browser.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('version', '3')")
    db.commit()
    db.close()
    before = other.read_bytes()
    with pytest.raises(HistoryError, match="not an hpcbench history"):
        History(other).entries()
    assert other.read_bytes() == before  # not even the journal mode changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["browser.sqlite"]


ESC = "\x1b[2J\x1b]0;owned\x07"  # clears the screen, retitles the terminal


def test_names_from_files_are_printed_with_their_escapes_inert(history, tmp_path, capsys):
    """A matrix name, a reference's configuration, a profile's name, a sweep's job path: text
    from files someone else may have written, printed by history, check, profile list and
    sweep --plan with control characters escaped (as the reports already do)."""
    root = _small(tmp_path / "r", two_train=52.0)
    bench = json.loads((root / "bench.json").read_text())
    bench["matrix"]["name"] = f"nightly{ESC}"
    (root / "bench.json").write_text(json.dumps(bench))
    _with_reference(root, {f"8dev{ESC}": {"samples_per_s": [1, -1, "inf"]}})
    record_results(root)
    assert cli.main(["history"]) == 0
    assert cli.main(["history", "1"]) == 0
    assert cli.main(["check", str(root)]) == 1
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err and "\\x1b[2J" in out.out
    assert "nightly\\x1b[2J" in out.out and "8dev\\x1b[2J" in out.out

    site = tmp_path / "site.toml"
    site.write_text(f'[profiles.{json.dumps("c" + ESC)}]\npartition = "p"\n')
    os_env = {"HPCBENCH_SITE_CONFIG": str(site), "XDG_CONFIG_HOME": str(tmp_path / "none")}
    from tests.conftest import hpcbench

    listed = hpcbench("profile", "list", cwd=tmp_path, env=os_env)
    assert listed.returncode == 0 and "\x1b" not in listed.stdout, listed.stdout
    assert listed.stdout.startswith("c\\x1b[2J"), listed.stdout
    sweep = tmp_path / "s.toml"
    sweep.write_text(f"job = {json.dumps(f'jobs/{ESC}.toml')}\n[axes]\nlr = [0.1]\n")
    plan = hpcbench("sweep", str(sweep), "--plan", cwd=tmp_path)
    assert "\x1b" not in plan.stdout + plan.stderr, plan.stdout + plan.stderr


def test_a_tampered_cost_factor_or_history_figure_is_one_line_not_a_traceback(
    history, tmp_path, capsys
):
    """bench.json and the history are data someone may edit: a cost factor made text fails
    check, report and compare alike (one line naming the file and the key, exit 2), and a
    figure made text in the history store fails ``history ID`` in one line."""
    root = _small(tmp_path / "r", two_train=52.0)
    _with_reference(root, {"2dev-ddp": {"samples_per_s": [14000, -0.05, "inf"]}})
    bench = json.loads((root / "bench.json").read_text())
    bench["estimates"] = {"values": {"pue": "x"}, "sources": {"pue": "the matrix's [estimates]"}}
    (root / "bench.json").write_text(json.dumps(bench))
    for args in (["check", str(root)], ["report", str(root), "--output", str(tmp_path / "o")],
                 ["compare", str(root), str(root)]):  # fmt: skip
        assert cli.main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.endswith("bench.json: estimates.pue: expected a number from 1 to 10, got 'x'")
        assert "\n" not in err and "Traceback" not in err, err

    good = _small(tmp_path / "g", two_train=52.0)
    rid, _ = record_results(good)
    with sqlite3.connect(history) as db:
        db.execute("UPDATE figures SET median = 'many' WHERE metric = 'samples_per_s'")
    assert cli.main(["history", str(rid)]) == 2
    err = capsys.readouterr().err.strip()
    assert "samples_per_s: 'many' is not a number (the history was edited by hand)" in err
    assert "\n" not in err


def test_against_last_compares_with_a_result_that_measured_these_configurations(
    history, tmp_path, capsys
):
    """Every --configs matrix is named "bench": --against last takes the newest that measured
    the same configurations (else some of them), says which it took and what it measured, and
    a figure of one run each is shown before and after, said to be not judged."""
    same = _small(tmp_path / "same", two_train=52.0)
    record_results(same)
    other = tmp_path / "other"
    m = Matrix(other, [_config("4gpu", 4)], cpu=None, one=None)
    m.add("4gpu", "timing", BASE, world=4)
    record_results(m.write())  # newer, same name "test", measured something else
    new = _small(tmp_path / "new", two_train=60.0)
    assert cli.main(["compare", str(new), "--against", "last"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("against #1 test (") and "which measured 1dev, 2dev-ddp:" in out, out
    lone = tmp_path / "lone"
    m = Matrix(lone, [_config("8gpu", 8)], cpu=None, one=None)
    m.add("8gpu", "timing", BASE, world=8)
    m.write()
    assert cli.main(["compare", str(lone), "--against", "last"]) == 1
    err = capsys.readouterr().err
    assert "that measured 8gpu" in err and "--against 2 compares with it all the same" in err
    one = tmp_path / "one"
    m = Matrix(one, [_config("4gpu", 4)], cpu=None, one=None)
    m.add("4gpu", "timing", {**BASE, "train": BASE["train"] * 2}, world=4)
    m.write()
    assert cli.main(["compare", str(one), "--against", "2"]) == 0
    out = capsys.readouterr().out
    assert "4gpu train time:" in out and "one run each: not judged" in out, out


def test_a_run_of_another_metrics_layout_is_refused_in_one_line(tmp_path):
    from hpcbench.history import HistoryError, record_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text('{"format": "hpcbench-metrics/2", "phases": {}}')
    with pytest.raises(HistoryError, match="format is 'hpcbench-metrics/2'") as err:
        record_run(run, History(tmp_path / "h.sqlite"))
    assert "\n" not in str(err.value)
