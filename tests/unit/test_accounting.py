"""The scheduler's accounting of a finished job (hpcbench.jobs.accounting), read from recorded
answers of the real commands (tests/unit/recorded/README.md says where each comes from).

Stand-in ``sacct``/``qacct``/``qstat``/``bacct`` programs first on PATH print the recorded files,
so each reader runs its command as on a cluster. The real SLURM accounting (slurmdbd and
MariaDB) is read in tests/cluster/test_accounting_slurm.py; PBS and LSF cannot run here.
"""

from __future__ import annotations

import json
import time

import pytest

from hpcbench.jobs.accounting import fields, reading, records, text
from tests.unit import test_scheduler_parsing as answers
from tests.unit.test_scheduler_parsing import RECORDED, calls, fake, play

bindir = answers.bindir  # the stand-in programs' directory, first on PATH


def _local(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


# --------------------------------------------------------------------------------- fields


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("123456K", "", 123456 * 1024),
        ("1.630GB", "", int(round(1.630 * (1 << 30)))),
        ("2048kb", "", 2048 * 1024),
        ("219 Mbytes", "", 219 << 20),
        ("4000Mn", "", 4000 << 20),
        ("512", "k", 512 * 1024),
        ("0", "", 0),
        ("", "", None),
        ("n/a", "", None),
    ],
)
def test_sizes_as_the_schedulers_print_them(text, unit, expected):
    assert fields.size_bytes(text, unit) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1-02:03:04", 93784.0),
        ("02:03:04", 7384.0),
        ("03:04.123", 184.123),
        ("00:00:00", 0.0),
        ("5.790s", 5.79),
        ("65", 65.0),
        ("Unknown", None),
        ("", None),
    ],
)
def test_durations(text, expected):
    assert (
        fields.duration_s(text) == pytest.approx(expected)
        if expected is not None
        else (fields.duration_s(text) is None)
    )


def test_dates_of_every_scheduler():
    assert fields.iso_time("2026-11-26T16:22:59") == _local("2026-11-26T16:22:59")
    assert fields.iso_time("Unknown") is None and fields.iso_time("None") is None
    assert fields.ctime_time("Thu Nov 26 15:59:56 2026") == _local("2026-11-26T15:59:56")
    # LSF without a year: the year given, else this year unless that is in the future
    assert fields.ctime_time("Thu Nov 26 15:59:56", 2026) == _local("2026-11-26T15:59:56")
    assert fields.epoch_time("1764172799") == 1764172799.0
    assert fields.tres("cpu=2,mem=1G,node=1,gres/gpu=2") == {
        "cpu": "2", "mem": "1G", "node": "1", "gres/gpu": "2"
    }  # fmt: skip


# ----------------------------------------------------------------------------- Grid Engine


def test_grid_engine_qacct_of_an_array_task(bindir):
    fake(bindir, "qacct", play("sge", "qacct-j-52-t-1.txt"))
    record = reading.read_accounting("sge", "52.1")
    assert calls(bindir, "qacct") == ["-j 52 -t 1"]
    job = record["job"]
    assert record["available"] and record["source"].startswith("qacct")
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    assert job["submit"] == "2026-11-26T15:59:56" and job["end"] == "2026-11-26T16:00:02"
    assert job["queue_wait_s"] == 0.0 and job["elapsed_s"] == 6.0
    assert job["cpu_time_s"] == pytest.approx(5.79)
    assert job["cpu_efficiency"] == pytest.approx(5.79 / 6.0)
    assert job["max_vmsize_bytes"] == int(round(1.630 * (1 << 30)))
    assert job["max_rss_bytes"] is None  # qacct's ru_maxrss is printed in the wrong unit
    assert job["energy_j"] is None and record["energy_reason"] == "Grid Engine gathers no energy"


def test_grid_engine_parallel_job_that_asked_to_run_again(bindir):
    fake(bindir, "qacct", play("sge", "qacct-j-55-smp.txt"))
    job = reading.read_accounting("sge", "55")["job"]
    assert job["cpus"] == 2 and job["exit_code"] == 99
    assert job["state"] == "FAILED (25 : rescheduling)"
    assert job["cpu_efficiency"] == pytest.approx(14.845 / (10 * 2))


def test_grid_engine_unknown_job_is_one_line(bindir):
    fake(bindir, "qacct", f"{play('sge', 'qacct-j-unknown.txt')} >&2; exit 1")
    record = reading.read_accounting("sge", "99999")
    assert not record["available"]
    assert record["reason"] == "error: job id 99999 not found"


# ------------------------------------------------------------------------------------- PBS


def test_openpbs_finished_job_from_the_history(bindir):
    fake(bindir, "qstat", f'[ "$1" = --version ] && {{ {play("pbs", "openpbs", "qstat--version.txt")}; exit 0; }}\n'
         f'{play("pbs", "openpbs", "qstat-x-f-finished.txt")}')  # fmt: skip
    record = reading.read_accounting("pbs", "4711.pbs1")
    assert calls(bindir, "qstat")[-1] == "-x -f 4711.pbs1"
    job = record["job"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    assert job["queue_wait_s"] == 90.0 and job["eligible_wait_s"] == 80.0
    assert job["elapsed_s"] == 60.0 and job["cpus"] == 4
    assert job["cpu_time_s"] == 224.0 and job["cpu_efficiency"] == pytest.approx(224 / 240)
    assert job["nodes"] == 2 and job["nodelist"] == "n001,n002"
    assert job["memory_used_bytes"] == 2457600 * 1024
    assert job["memory_efficiency"] == pytest.approx(2457600 / (8 << 20))
    assert job["max_rss_bytes"] is None  # PBS has no per-rank figure


def test_torque_completed_job(bindir):
    fake(bindir, "qstat", f'[ "$1" = --version ] && {{ {play("pbs", "torque", "qstat--version.txt")}; exit 0; }}\n'
         f'{play("pbs", "torque", "qstat-f-completed.txt")}')  # fmt: skip
    job = reading.read_accounting("pbs", "522.torque1.example.org")["job"]
    assert calls(bindir, "qstat")[-1] == "-f 522.torque1.example.org"
    assert job["start"] == "2026-11-26T04:27:38" and job["end"] == "2026-11-26T04:28:05"
    assert job["queue_wait_s"] == 1.0 and job["elapsed_s"] == 27.0
    assert job["memory_used_bytes"] == 348800 * 1024


def test_pbs_job_no_longer_in_the_history(bindir):
    fake(bindir, "qstat", f'[ "$1" = --version ] && {{ {play("pbs", "openpbs", "qstat--version.txt")}; exit 0; }}\n'
         f'{play("pbs", "openpbs", "qstat-unknown.stderr.txt")} >&2; exit 153')  # fmt: skip
    record = reading.read_accounting("pbs", "299.pbs1")
    assert not record["available"]
    assert record["reason"] == "qstat: Unknown Job Id 299.pbs1"


# ------------------------------------------------------------------------------------- LSF


def test_lsf_bacct_of_a_finished_job(bindir):
    fake(bindir, "bacct", play("lsf", "bacct-l.txt"))
    record = reading.read_accounting("lsf", "3329613")
    assert calls(bindir, "bacct") == ["-l 3329613"]
    job = record["job"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    assert job["queue_wait_s"] == 50.0 and job["elapsed_s"] == 67.0  # turnaround - wait
    assert job["nodelist"] == "a3201" and job["cpus"] == 1
    assert job["cpu_efficiency"] == pytest.approx(60.08 / 67.0)
    assert job["memory_used_bytes"] == 512 << 20
    assert job["start"].endswith("T17:08:44")  # no year printed: this year's


def test_lsf_10_bacct_with_tasks_on_two_hosts(bindir):
    fake(bindir, "bacct", play("lsf", "bacct-l-10.txt"))
    job = reading.read_accounting("lsf", "8812")["job"]
    assert job["state"] == "FAILED" and job["exit_code"] == 1
    assert job["cpus"] == 4 and job["nodes"] == 2 and job["nodelist"] == "n001,n002"
    assert job["cpu_efficiency"] == pytest.approx(400 / (120 * 4))


def test_lsf_unknown_job(bindir):
    fake(bindir, "bacct", f"{play('lsf', 'bacct-unknown.txt')}; exit 0")
    record = reading.read_accounting("lsf", "1")
    assert not record["available"] and record["reason"] == "No matching job found"


# ----------------------------------------------------------------------- none, kept, said


def test_no_accounting_paths_are_one_line_and_never_raise(bindir, tmp_path, monkeypatch):
    no_dbd = f"{play('slurm', '22.05', 'sacct-no-accounting.txt')} >&2; exit 1"
    fake(bindir, "sacct", no_dbd)
    record = reading.read_accounting("slurm", "12")
    assert not record["available"]
    assert record["reason"] == "Slurm accounting storage is disabled"
    assert text.describe(record) == [
        "accounting: none (from sacct (SLURM accounting)): Slurm accounting storage is disabled"
    ]
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    record = reading.read_accounting("slurm", "12")  # sacct not installed at all
    assert not record["available"] and "sacct not found" in record["reason"]
    local = reading.read_accounting("local", "local-3")
    assert not local["available"] and "keeps no accounting" in local["reason"]


def test_the_record_is_read_once_and_kept_in_the_run_directory(bindir, tmp_path):
    fake(bindir, "qacct", play("sge", "qacct-j-52-t-1.txt"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = reading.account_finished("sge", "52.1", run_dir)
    again = reading.account_finished("sge", "52.1", run_dir)
    assert calls(bindir, "qacct") == ["-j 52 -t 1"]  # once
    assert first == again
    kept = json.loads((run_dir / "accounting.json").read_text())
    assert kept["format"] == "hpcbench-accounting/1" and kept["job"]["elapsed_s"] == 6.0
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]  # no temporary left
    # a run directory that is not there: the record is returned, nothing is written
    assert reading.account_finished("sge", "52.1", tmp_path / "gone")["available"]
    assert not (tmp_path / "gone").exists()
    (run_dir / "accounting.json").write_text("{not json")
    assert records.load(run_dir) is None  # a damaged record is as good as none


def test_lsf_lines_wrapped_under_dates_with_years(bindir):
    text = (RECORDED / "lsf" / "bacct-l-10.txt").read_text()
    with_years = (
        text.replace("Thu Nov 26 11:14:09:", "Thu Nov 26 11:14:09 2026:")
        .replace("\n                     ed 4 Slot", "\n                          ed 4 Slot")
        .replace("\n                     EQ <", "\n                          EQ <")
    )
    fake(bindir, "bacct", f"cat <<'EOT'\n{with_years}EOT")
    job = reading.read_accounting("lsf", "8812")["job"]
    assert job["cpus"] == 4 and job["nodelist"] == "n001,n002"
    assert job["start"] == "2026-11-26T11:14:09"


def test_a_record_without_the_jobs_end_is_asked_for_again(bindir, tmp_path):
    """slurmdbd down a moment, or the job not yet in it: kept (the report says why), and read
    again next time rather than trusted."""
    fake(bindir, "sacct", "echo 'sacct: error: slurmdbd: Connection refused' >&2; exit 1")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = reading.account_finished("slurm", "12", run_dir)
    assert not first["available"] and "Connection refused" in first["reason"]
    assert records.load(run_dir)["reason"] == first["reason"]
    reading.account_finished("slurm", "12", run_dir)
    assert len(calls(bindir, "sacct")) == 2


def test_an_empty_state_or_odd_lines_never_raise(bindir):
    from hpcbench.jobs.schedulers.slurm import accounting as slurm

    fields_ = "|".join([""] * (len(slurm.FIELDS) - 1))
    fake(bindir, "sacct", f"echo '12|{fields_}'; echo 'garbage'")
    fake(bindir, "scontrol", "echo 'AcctGatherEnergyType   = acct_gather_energy/none'")

    record = slurm.read("12", attempts=2, pause=0.0)
    assert record["available"] and record["job"]["state"] is None


# ----------------------------------------------------------------------------------- SLURM


def test_slurm_sacct_of_a_two_node_job_and_its_steps(bindir):
    """sacct-accounting.txt was recorded on the test cluster's slurmdbd: a two-node job whose
    srun step held about 133 MiB in its largest task, then a one-node job asking --mem=100M."""
    fake(bindir, "sacct", play("slurm", "22.05", "sacct-accounting.txt"))
    fake(bindir, "scontrol", play("slurm", "22.05", "scontrol-show-config-energy.txt"))
    record = reading.read_accounting("slurm", "51870000")
    [argv] = calls(bindir, "sacct")
    assert argv.startswith("--noheader --parsable2 --noconvert --jobs=51870000 --format=JobID,")
    job = record["job"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    assert job["submit"] == "2026-11-26T17:03:20" and job["queue_wait_s"] == 0.0
    assert job["elapsed_s"] == 4.0 and job["nodes"] == 2 and job["nodelist"] == "node[1-2]"
    assert job["cpus"] == 2 and job["cpu_time_s"] == pytest.approx(0.033 + 0.517)
    assert job["cpu_efficiency"] == pytest.approx(0.55 / (4 * 2))  # seff's arithmetic
    # --noconvert: MaxRSS and TRESUsageInTot's mem in bytes
    assert job["max_rss_bytes"] == 139563008 and job["max_vmsize_bytes"] == 363167744
    assert job["memory_used_bytes"] == 279093248  # both tasks' peaks of step 0
    # ReqMem is the job's total since SLURM 21.08 (two nodes of 19,284 MiB), never doubled
    assert job["memory_allocated_bytes"] == 38568 << 20
    assert job["energy_j"] is None
    assert record["energy_reason"] == (
        "this cluster gathers no energy (AcctGatherEnergyType = acct_gather_energy/none)"
    )
    assert record["energy_source"] == "SLURM's ConsumedEnergy"  # what the report calls it
    steps = {s["step"]: s for s in record["steps"]}
    assert steps["0"]["max_rss_task"] == 1 and steps["0"]["max_rss_node"] == "node2"
    assert steps["0"]["tasks"] == 2 and steps["batch"]["max_rss_bytes"] == 12644352
    lines = text.describe(record)
    assert lines[0] == (
        "accounting (from sacct (SLURM accounting)): COMPLETED exit 0; queued 0 s, ran 4 s on "
        "node[1-2]"
    )
    assert "high-water 133 MiB per rank (MaxRSS)" in lines[2]
    assert lines[-1] == "  step 0: COMPLETED, 4 s, 2 task(s), MaxRSS 133 MiB (task 1)"


def test_slurm_job_too_short_to_be_sampled(bindir):
    fake(bindir, "sacct", play("slurm", "22.05", "sacct-accounting.txt"))
    fake(bindir, "scontrol", play("slurm", "22.05", "scontrol-show-config-energy.txt"))
    job = reading.read_accounting("slurm", "51870001")["job"]
    assert job["memory_allocated_bytes"] == 100 << 20 and job["max_rss_bytes"] is None
    assert job["memory_efficiency"] is None


def test_slurm_asks_again_while_slurmdbd_has_not_the_end(bindir, tmp_path):
    """The first answer shows the job RUNNING (slurmctld has not yet told slurmdbd), the
    second its end."""
    recorded = (RECORDED / "slurm" / "22.05" / "sacct-accounting.txt").read_text()
    running = recorded.replace("51870000|acct-demo|COMPLETED", "51870000|acct-demo|RUNNING")
    (tmp_path / "running.txt").write_text(running)
    counter = tmp_path / "n"
    fake(bindir, "sacct", f'if [ -e "{counter}" ]; then {play("slurm", "22.05", "sacct-accounting.txt")}; '
         f'else touch "{counter}"; cat "{tmp_path / "running.txt"}"; fi')  # fmt: skip
    fake(bindir, "scontrol", play("slurm", "22.05", "scontrol-show-config-energy.txt"))
    from hpcbench.jobs.schedulers.slurm import accounting as slurm

    record = slurm.read("51870000", pause=0.0)
    assert record["job"]["state"] == "COMPLETED" and len(calls(bindir, "sacct")) == 2


def test_a_garbled_kept_record_is_unknown_figures_not_a_crash(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = records.empty_record("slurm", "7", "sacct (SLURM accounting)")
    record["available"] = True
    record["job"].update(state="COMPLETED", queue_wait_s="soon", elapsed_s=float("nan"), cpus=4)
    record["steps"] = [{"step": "0", "max_rss_bytes": [1], "tasks": True}]
    (run_dir / "accounting.json").write_text(json.dumps(record))
    kept = records.load(run_dir)
    assert kept["job"]["queue_wait_s"] is None and kept["job"]["elapsed_s"] is None
    assert kept["job"]["cpus"] == 4 and kept["job"]["state"] == "COMPLETED"
    assert kept["steps"][0]["max_rss_bytes"] is None and kept["steps"][0]["tasks"] is None
    lines = text.describe(kept)
    assert lines[0].endswith("COMPLETED; queued ?, ran ?")


def test_a_job_sacct_never_heard_of_is_not_waited_for(bindir):
    fake(bindir, "sacct", "exit 0")  # sacct answers, without the job
    from hpcbench.jobs.schedulers.slurm import accounting as slurm

    record = slurm.read("424242", pause=0.0)
    assert not record["available"] and record["reason"] == "sacct does not know job 424242 (yet)"
    assert len(calls(bindir, "sacct")) == 4  # 2 s at the reader's pace, not 10


# ------------------------------------------------------------------------ absurd figures

ABSURD = ["9" * 5000, "1e400", "-1e400", "-inf", "nan", "99999999999999999999-23:59:59",
          "1e300", "-1e300", "3000000000000000000", "9999-12-31T23:59:59", "99999999999999"]  # fmt: skip


@pytest.mark.parametrize("value", ABSURD)
def test_every_field_reader_gives_a_number_or_none_for_absurd_text(value):
    import math

    for reader in (fields.size_bytes, fields.duration_s, fields.iso_time, fields.ctime_time,
                   fields.epoch_time, fields.number, fields.whole):  # fmt: skip
        got = reader(value)
        assert got is None or (isinstance(got, (int, float)) and math.isfinite(got)), reader
    stamp = fields.epoch_time(value)
    assert fields.iso(stamp) is None or fields.iso(stamp)[:1].isdigit()
    assert fields.times(fields.number(value), fields.number(value), None)


@pytest.mark.parametrize("value", ABSURD)
def test_an_accounting_answer_with_absurd_figures_is_unknown_figures_never_a_crash(
    bindir, value, monkeypatch
):
    """Fuzzed sacct and bacct answers: a number over 1e308 or of 5,000 digits, a date beyond
    time_t, LSF's TURNAROUND-WAIT giving -inf. The record is read (those figures unknown) and
    described; status -v, submit --wait and bench never end in a traceback."""
    import math

    from hpcbench.jobs.schedulers.slurm import accounting as slurm

    # an end time that is no time reads as "not written yet": sacct is asked again, at once here
    monkeypatch.setattr(slurm, "PAUSE_S", 0.0)

    line = "|".join(["12", "train", "COMPLETED", "0:0", *[value] * (len(slurm.FIELDS) - 4)])
    fake(bindir, "sacct", f"printf '%s\\n' '{line}' '12.batch|batch|COMPLETED|0:0|{value}'")
    fake(bindir, "scontrol", "echo 'AcctGatherEnergyType   = acct_gather_energy/none'")
    lsf = play("lsf", "bacct-l.txt")
    table = f"{value}  {value}  -{value}  done  0.51  512M  0M"
    fake(bindir, "bacct", f"{lsf} | sed 's/^ *60.08 .*$/     {table}/'")
    for scheduler, job_id in (("slurm", "12"), ("lsf", "3329613")):
        record = reading.read_accounting(scheduler, job_id)
        for key, figure in record["job"].items():
            if isinstance(figure, float):
                assert math.isfinite(figure), (scheduler, key, figure)
        assert text.describe(record)


def test_slurm_reqmem_per_node_and_per_cpu_before_21_08_and_the_total_since():
    from hpcbench.jobs.schedulers.slurm.accounting import _requested

    assert _requested("4000Mn", 8, 2) == 2 * 4000 << 20
    assert _requested("4000Mc", 8, 2) == 8 * 4000 << 20
    assert _requested("38568M", 2, 2) == 38568 << 20  # 21.08 on: the job's total already


# What a job used of what it asked for, from each batch system's recorded answer.
USAGE_CASES = {
    "slurm": (("sacct", ("slurm", "22.05", "sacct-accounting.txt")), "51870000"),
    "sge": (("qacct", ("sge", "qacct-j-55-smp.txt")), "55"),
    "lsf": (("bacct", ("lsf", "bacct-l.txt")), "3329613"),
}


@pytest.mark.parametrize("scheduler", [*USAGE_CASES, "pbs"])
def test_what_a_job_used_of_what_it_asked_for_from_every_batch_system(bindir, scheduler):
    from hpcbench.jobs.accounting.usage import cpus_used

    if scheduler == "pbs":
        fake(bindir, "qstat", f'[ "$1" = --version ] && {{ {play("pbs", "openpbs", "qstat--version.txt")}; exit 0; }}\n'
             f'{play("pbs", "openpbs", "qstat-x-f-finished.txt")}')  # fmt: skip
        job_id = "4711.pbs1"
    else:
        (command, recorded), job_id = USAGE_CASES[scheduler]
        fake(bindir, command, play(*recorded))
        if scheduler == "slurm":
            fake(bindir, "scontrol", play("slurm", "22.05", "scontrol-show-config-energy.txt"))
    record = reading.read_accounting(scheduler, job_id)
    job = record["job"]
    used = cpus_used(job)
    assert used == pytest.approx(job["cpu_time_s"] / job["elapsed_s"])
    lines = text.describe(record)
    said = [line for line in lines if line.startswith(("  used:", "  hint:"))]
    assert said == USAGE_SAID[scheduler]


USAGE_SAID = {
    "slurm": [  # two nodes' 37.7 GiB asked for, 266 MiB held: the job gets a hint
        "  used: asked for 2 CPUs, used 0.1 on average (7 %)",
        "  used: asked for 37.7 GiB of memory, the ranks held 266 MiB at their peak (1 %)",
        "  hint: its ranks held 266 MiB of the 37.7 GiB asked for: ask for less memory (--mem), "
        "leaving the rest to other jobs",
    ],
    "sge": ["  used: asked for 2 CPUs, used 1.5 on average (74 %)"],  # no memory figure asked
    "lsf": ["  used: asked for 1 CPUs, used 0.9 on average (90 %)"],
    "pbs": [
        "  used: asked for 4 CPUs, used 3.7 on average (93 %)",
        "  used: asked for 8.0 GiB of memory, the ranks held 2.3 GiB at their peak (29 %)",
    ],
}


def test_a_job_that_keeps_few_of_many_cpus_busy_gets_a_hint_and_a_small_one_none():
    from hpcbench.jobs.accounting.usage import hints

    idle = {"cpus": 8, "cpu_time_s": 152.0, "elapsed_s": 80.0}  # 1.9 of 8 busy
    assert hints(idle) == [
        "it kept 1.9 of its 8 CPUs busy: ask for fewer (--cpus-per-task), or give each rank "
        "the threads it was given (OMP_NUM_THREADS, the trainer's --threads)"
    ]
    assert hints({"cpus": 2, "cpu_time_s": 1.0, "elapsed_s": 80.0}) == []  # too small to say
    assert hints({"cpus": 8, "cpu_time_s": 600.0, "elapsed_s": 80.0}) == []  # 7.5 of 8
    assert hints({"cpus": 8, "elapsed_s": 0.0, "cpu_time_s": 1.0}) == []  # nothing to divide
