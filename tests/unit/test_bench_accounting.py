"""The scheduler's accounting and the carbon and cost estimates in the bench analysis and
report: each run's accounting.json (the record hpcbench.jobs.accounting keeps, here as the SLURM
reader makes it from a recorded sacct answer) summarised per configuration, beside hpcbench's own
energy, with its source; the estimates from the configured factors, null where energy is."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hpcbench.bench.analysing.analysis import analyse
from hpcbench.bench.reading.results_reader import load_results
from hpcbench.bench.reporting.report import build_report
from hpcbench.jobs.accounting.records import empty_record, unavailable
from tests.unit.test_bench_analysis import BASE, Matrix, _by_name, _config, _device, _scaled


def _record(queue: float, elapsed: float, rss_mib: int, energy: float | None) -> dict:
    record = empty_record("slurm", "1", "sacct (SLURM accounting)", "SLURM's ConsumedEnergy")
    record["available"] = True
    record["job"].update(
        state="COMPLETED",
        exit_code=0,
        queue_wait_s=queue,
        elapsed_s=elapsed,
        cpus=4,
        cpu_time_s=elapsed * 3,
        cpu_efficiency=0.75,
        max_rss_bytes=rss_mib << 20,
        memory_used_bytes=(2 * rss_mib) << 20,
        energy_j=energy,
    )
    if energy is None:
        record["energy_reason"] = (
            "this cluster gathers no energy (AcctGatherEnergyType = acct_gather_energy/none)"
        )
    return record


def _results(root: Path, estimates: dict | None, with_energy: bool = True) -> Path:
    m = Matrix(root, [_config("1dev", 1), _config("2dev-ddp", 2)], cpu=None, one="1dev")
    for f in (0.99, 1.0, 1.01):
        m.add("1dev", "timing", _scaled(BASE, f))
        m.add("2dev-ddp", "timing", _scaled({**BASE, "train": 52.0}, f), world=2)
    if with_energy:
        m.add("1dev", "energy", BASE, devices=[_device("gpu0", 36000.0, True, BASE)])
        two = {**BASE, "train": 52.0}
        m.add(
            "2dev-ddp",
            "energy",
            two,
            devices=[_device("gpu0", 20000.0, True, two), _device("gpu1", 20000.0, True, two)],
            world=2,
        )
    root = m.write()
    bench = json.loads((root / "bench.json").read_text())
    bench["matrix"]["energy_repetitions"] = 1 if with_energy else 0
    if estimates is not None:
        bench["estimates"] = {
            "values": estimates,
            "sources": dict.fromkeys(estimates, "user profile hydra (/home/u/profiles.toml)"),
        }
    (root / "bench.json").write_text(json.dumps(bench))
    for run in json.loads((root / "runs.json").read_text())["runs"]:
        queue = 30.0 if run["config"] == "1dev" else 90.0
        energy = 50000.0 if run["kind"] == "energy" and run["config"] == "1dev" else None
        rec = _record(queue, 130.0, 800 if run["config"] == "1dev" else 1200, energy)
        if run["config"] == "2dev-ddp":  # asked for 16 GiB, its ranks held 2.3 GiB
            rec["job"]["memory_allocated_bytes"] = 16 << 30
        (root / run["run_dir"] / "accounting.json").write_text(json.dumps(rec))
    return root


def test_accounting_per_configuration_with_its_source(tmp_path):
    root = _results(tmp_path / "r", None)
    c = _by_name(analyse(load_results(root)))
    one, two = c["1dev"]["accounting"], c["2dev-ddp"]["accounting"]
    assert one["available"] and one["runs"] == 4 and one["source"] == "sacct (SLURM accounting)"
    assert one["queue_wait_s"]["median"] == 30.0 and two["queue_wait_s"]["median"] == 90.0
    assert two["max_rss_bytes"]["median"] == 1200 << 20
    assert one["cpu_efficiency"]["median"] == 0.75
    # SLURM's energy for the one energy run that has it, beside hpcbench's 36 kJ of that run
    assert one["scheduler_energy_j"]["median"] == 50000.0
    assert one["energy_ratio"] == pytest.approx(50000.0 / 36000.0)
    assert two["scheduler_energy_j"] is None
    assert "AcctGatherEnergyType" in two["energy_reason"]
    sentences = analyse(load_results(root))["sentences"]
    # (4 runs × 30 s + 4 × 90 s) queued, 8 × 130 s ran
    assert (
        "the matrix's jobs waited 480 s in the queue in all, 32 % of their time in the cluster "
        "(the scheduler's accounting)" in sentences
    )


def test_no_accounting_is_one_line_and_fails_nothing(tmp_path):
    root = _results(tmp_path / "r", None)
    for path in root.glob("runs/*/*/accounting.json"):
        path.write_text(
            json.dumps(unavailable("slurm", "1", "sacct", "Slurm accounting storage is disabled"))
        )
    c = _by_name(analyse(load_results(root)))
    assert c["1dev"]["accounting"] == {
        "available": False,
        "runs": 0,
        "source": "sacct",
        "reason": "Slurm accounting storage is disabled",
    }
    pytest.importorskip("matplotlib")
    paths = build_report(root)
    text = paths[0].read_text()
    assert "1dev, 2dev-ddp: no scheduler accounting: Slurm accounting storage is disabled" in text
    for path in root.glob("runs/*/*/accounting.json"):
        path.unlink()  # results from before accounting was kept
    assert (
        "no accounting was recorded for these runs"
        in _by_name(analyse(load_results(root)))["1dev"]["accounting"]["reason"]
    )


def test_estimates_from_the_factors_null_where_energy_is(tmp_path):
    factors = {
        "carbon_intensity": 250.0,
        "pue": 1.2,
        "price_per_kwh": 0.3,
        "price_per_gpu_hour": 2.0,
        "currency": "EUR",
    }
    root = _results(tmp_path / "r", factors)
    c = _by_name(analyse(load_results(root)))
    est = c["2dev-ddp"]["estimates"]
    kwh = 40000.0 * 1.2 / 3.6e6  # the devices' joules × PUE
    assert est["per_run"]["facility_kwh"] == pytest.approx(kwh)
    assert est["per_run"]["co2e_g"] == pytest.approx(kwh * 250)
    assert est["per_run"]["energy_cost"] == pytest.approx(kwh * 0.3)
    # 2 GPUs for the scheduler's elapsed 130 s at 2 EUR per GPU-hour
    assert est["per_run"]["allocation_cost"] == pytest.approx(2 * 2.0 * 130 / 3600)
    assert est["runs"] == 4 and est["per_config"]["co2e_g"] == pytest.approx(4 * kwh * 250)
    assert est["sources"]["pue"] == "user profile hydra (/home/u/profiles.toml)"

    without = _by_name(analyse(load_results(_results(tmp_path / "n", factors, with_energy=False))))
    est = without["1dev"]["estimates"]
    assert est["per_run"]["co2e_g"] is None and est["per_run"]["energy_cost"] is None
    assert est["per_run"]["allocation_cost"] == pytest.approx(2.0 * 130 / 3600)

    assert (
        _by_name(analyse(load_results(_results(tmp_path / "x", None))))["1dev"]["estimates"] is None
    )


def test_the_report_shows_accounting_and_estimates_with_their_sources(tmp_path):
    pytest.importorskip("matplotlib")
    root = _results(tmp_path / "r", {"carbon_intensity": 250.0, "currency": "EUR"})
    paths = build_report(root)
    md = paths[0].read_text()
    assert "## What the scheduler recorded" in md and "sacct (SLURM accounting)" in md
    # what the scheduler's energy is comes from its reader, in its own words
    assert "recorded for the job's nodes (SLURM's ConsumedEnergy)" in " ".join(md.split())
    # what the jobs used of what they asked for: 3 of 4 CPUs busy; the memory over-asked
    assert "| 3.0 of 4 |" in md
    assert "2dev-ddp: hint: its ranks held 2.3 GiB of the 16.0 GiB asked for" in md
    assert "1dev: hint" not in md
    assert "## Carbon and cost (estimates)" in md
    assert "Estimates, not measurements" in md
    assert "carbon intensity 250 gCO2e/kWh (from user profile hydra" in md
    assert (
        "2dev-ddp: no scheduler energy: this cluster gathers no energy (AcctGatherEnergyType = "
        "acct_gather_energy/none)" in md
    )
    rows = {r["config"]: r for r in csv.DictReader((root / "report/tables/accounting.csv").open())}
    assert float(rows["2dev-ddp"]["queue_wait_s_median"]) == 90.0
    assert rows["1dev"]["source"] == "sacct (SLURM accounting)"
    est = {r["config"]: r for r in csv.DictReader((root / "report/tables/estimates.csv").open())}
    assert float(est["1dev"]["co2e_g_per_run"]) == pytest.approx(36000 / 3.6e6 * 250)
    assert est["1dev"]["energy_cost_per_run"] == ""  # no price per kWh set


def test_the_report_shows_each_runs_preflight_and_what_the_doctor_named(tmp_path):
    pytest.importorskip("matplotlib")
    root = _results(tmp_path / "r", None, with_energy=False)
    recorded = json.loads(
        (Path(__file__).parent / "recorded" / "doctor" / "two-nodes.json").read_text()
    )
    runs = json.loads((root / "runs.json").read_text())["runs"]
    (root / runs[0]["run_dir"] / "doctor.json").write_text(json.dumps(recorded))
    slow = {
        **recorded,
        "healthy": False,
        "findings": ["compute: node vm:node1 is slow: 9.4 GFLOP/s"],
    }
    (root / runs[1]["run_dir"] / "doctor.json").write_text(json.dumps(slow))
    (root / runs[2]["run_dir"] / "doctor.json").write_text("{not json")  # said, never fatal
    md = build_report(root)[0].read_text()
    assert "### Preflight (hpcbench doctor)" in md
    assert "The doctor named 1 finding(s):" in md
    assert f"{runs[1]['config']}, timing run {runs[1]['rep']}: compute: node vm:node1 is slow" in md
    assert "| healthy | 52.5 | 0.61 | 660 |" in " ".join(md.split())
