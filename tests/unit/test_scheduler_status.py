"""Reading job states from each batch system's own answers.

No PBS, SLURM or Grid Engine server can run on the test machines (the SLURM and Grid Engine ones
in tests/cluster need root), so stand-in ``qstat``/``qsub``/``squeue``/``sacct``/``qacct``
programs are put first on PATH: small shell scripts that print answers recorded in the formats
those systems print (OpenPBS ``qstat -x -f`` text, Torque ``qstat -f`` text and Torque's
``qstat -x`` XML, ``squeue --Format`` and ``sacct --parsable2``, Grid Engine's ``qstat`` table
and ``qacct -j``) and log how they were called. The schedulers run them as real subprocesses.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hpcbench.jobs.schedulers import JobIdError, SchedulerError
from hpcbench.jobs.schedulers.base import JobRecord
from hpcbench.jobs.schedulers.local.scheduler import LocalScheduler
from hpcbench.jobs.schedulers.pbs.scheduler import OPENPBS, TORQUE, PbsScheduler, pbs_flavour
from hpcbench.jobs.schedulers.sge.scheduler import SgeScheduler
from hpcbench.jobs.schedulers.slurm.scheduler import SlurmScheduler
from tests.conftest import hpcbench

OPENPBS_VERSION = "pbs_version = 22.05.11\n"
TORQUE_VERSION = "Version: 6.1.3\nCommit: 6c4b9d1e2f0a\n"

OPENPBS_FULL = """Job Id: 101.pbs1
    Job_Name = hpcbench
    Job_Owner = alice@login1
    resources_used.cput = 00:00:01
    job_state = F
    queue = workq
    server = pbs1
    Error_Path = login1:/home/alice/runs/hpcbench.e101
    exec_host = node1/0
    Exit_status = 0
    Resource_List.ncpus = 1
    Variable_List = PBS_O_HOME=/home/alice,PBS_O_LANG=C.UTF-8,PBS_O_LOGNAME=alice,
\tPBS_O_PATH=/usr/bin:/bin,PBS_O_SHELL=/bin/bash,job_state=R
    comment = Job run at Tue Mar 05 at 10:00 on (node1:ncpus=1) and finished
    run_count = 1

Job Id: 102.pbs1
    Job_Name = hpcbench
    job_state = R
    queue = workq

Job Id: 103.pbs1
    Job_Name = hpcbench
    job_state = F
    Exit_status = 3

"""

TORQUE_FULL = """Job Id: 7.torque-server.example.org
    Job_Name = hpcbench
    Job_Owner = alice@login1.example.org
    resources_used.cput = 00:00:00
    resources_used.mem = 0kb
    job_state = C
    queue = batch
    server = torque-server.example.org
    Checkpoint = u
    ctime = Tue Mar  5 10:00:00 2024
    exec_host = node01/0
    Resource_List.nodes = 1:ppn=1
    exit_status = 0
    comp_time = 1709632801

Job Id: 8.torque-server.example.org
    Job_Name = hpcbench
    job_state = C
    queue = batch
    exit_status = 2
"""

TORQUE_XML = (
    "<Data><Job><Job_Id>7.torque-server.example.org</Job_Id><Job_Name>hpcbench</Job_Name>"
    "<Job_Owner>alice@login1.example.org</Job_Owner><resources_used><cput>00:00:00</cput>"
    "<mem>0kb</mem></resources_used><job_state>C</job_state><queue>batch</queue>"
    "<exit_status>0</exit_status></Job><Job><Job_Id>8.torque-server.example.org</Job_Id>"
    "<job_state>R</job_state><queue>batch</queue></Job></Data>"
)


def fake(bindir: Path, name: str, body: str) -> None:
    """A stand-in program: logs its arguments to <name>.calls, then runs ``body`` (sh)."""
    path = bindir / name
    path.write_text(f'#!/bin/sh\necho "$*" >> "{bindir}/{name}.calls"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def answer(bindir: Path, name: str, text: str) -> str:
    """Shell that prints ``text`` (kept in a file next to the program)."""
    data = bindir / f"{name}.answer"
    data.write_text(text)
    return f'cat "{data}"'


def calls(bindir: Path, name: str) -> list[str]:
    path = bindir / f"{name}.calls"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def bindir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    return d


# --------------------------------------------------------------------------------------- PBS


def test_flavour_from_version_text():
    assert pbs_flavour(OPENPBS_VERSION) == OPENPBS
    assert pbs_flavour(TORQUE_VERSION) == TORQUE
    assert pbs_flavour("qstat: invalid option -- '-'") is None


def test_openpbs_full_listing_with_finished_and_unknown_jobs(bindir):
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) printf '{OPENPBS_VERSION}' ;;
  *) {answer(bindir, "qstat", OPENPBS_FULL)}
     echo "qstat: Unknown Job Id 104.pbs1" >&2; exit 35 ;;
esac""",
    )
    found = PbsScheduler().statuses(["101.pbs1", "102", "103.pbs1", "104.pbs1"])
    assert (found["101.pbs1"].state, found["101.pbs1"].exit_code) == ("COMPLETED", 0)
    assert found["102"].state == "RUNNING"
    assert (found["103.pbs1"].state, found["103.pbs1"].exit_code) == ("FAILED", 3)
    assert found["104.pbs1"].state == "UNKNOWN"
    assert "Unknown Job Id 104.pbs1" in found["104.pbs1"].reason
    assert calls(bindir, "qstat")[-1] == "-x -f 101.pbs1 102 103.pbs1 104.pbs1"


def test_torque_text_listing_is_asked_without_x(bindir):
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) printf '{TORQUE_VERSION}' >&2 ;;
  -x) echo '<Data></Data>' ;;
  *) {answer(bindir, "qstat", TORQUE_FULL)} ;;
esac""",
    )
    found = PbsScheduler().statuses(["7.torque-server.example.org", "8"])
    assert (found["7.torque-server.example.org"].state, found["8"].state) == ("COMPLETED", "FAILED")
    assert found["8"].exit_code == 2
    assert calls(bindir, "qstat")[-1] == "-f 7.torque-server.example.org 8"


def test_torque_xml_is_read_when_the_version_does_not_say(bindir):
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) echo "qstat: unrecognized option" >&2; exit 2 ;;
  -x) {answer(bindir, "qstat", TORQUE_XML)} ;;
esac""",
    )
    found = PbsScheduler().statuses(["7", "8.torque-server.example.org"])
    assert (found["7"].state, found["7"].exit_code) == ("COMPLETED", 0)
    assert found["8.torque-server.example.org"].state == "RUNNING"


def test_submit_wait_on_torque_ends(bindir, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    fake(bindir, "qsub", "echo 7.torque-server.example.org")
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) printf '{TORQUE_VERSION}' >&2 ;;
  -x) echo '<Data></Data>' ;;
  *) {answer(bindir, "qstat", TORQUE_FULL)} ;;
esac""",
    )
    result = hpcbench(
        *("submit", "--scheduler", "pbs", "--launcher", "mpiexec", "--program", "true", "--wait"),
        cwd=work,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "job 7.torque-server.example.org completed" in result.stdout


def test_wait_gives_up_on_a_job_unknown_for_many_polls(bindir, tmp_path):
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) printf '{OPENPBS_VERSION}' ;;
  *) echo "qstat: Unknown Job Id $3" >&2; exit 35 ;;
esac""",
    )
    sched = PbsScheduler()
    sched.poll_start = sched.poll_ceiling = 0.01  # the count matters here, not the pace
    job = JobRecord("9.pbs1", "pbs", tmp_path / "s", tmp_path / "o", tmp_path / "e", tmp_path)
    with pytest.raises(SchedulerError, match=r"job 9\.pbs1: state unknown .* 10 polls in a row"):
        sched.wait([job])
    assert len([c for c in calls(bindir, "qstat") if c.startswith("-x")]) == 10


def test_local_wait_on_a_job_with_no_record_ends(bindir, tmp_path):
    job = JobRecord("local-99", "local", tmp_path / "s", tmp_path / "o", tmp_path / "e", tmp_path)
    with pytest.raises(SchedulerError, match="no such local job"):
        LocalScheduler().wait([job])


@pytest.mark.parametrize(
    "sched, good, bad",
    [
        (SlurmScheduler(), ["1234", "1234_5", "77+1"], ["1234;x", "-1", "../1", "1 2"]),
        (PbsScheduler(), ["1234.server", "12[].pbs1.example.org", "5"], ["5.-x", "a.b", "5/6"]),
        (SgeScheduler(), ["1234", "1234.5"], ["1234.x", "x1234"]),
        (LocalScheduler(), ["local-1", "local-123"], ["local-", "local-1/../2", "1", "local-x"]),
    ],
)
def test_job_id_forms(sched, good, bad):
    sched.check_ids(good)
    for job_id in bad:
        with pytest.raises(JobIdError, match=f"not a {sched.name} job id"):
            sched.check_ids([job_id])


# ------------------------------------------------------------------------------ SLURM and SGE


def test_slurm_squeue_then_sacct_for_forgotten_jobs(bindir):
    fake(
        bindir,
        "squeue",
        answer(
            bindir,
            "squeue",
            "11|RUNNING|None|0\n12|FAILED|NonZeroExitCode|256\n13|CANCELLED by 1000|None|15\n",
        ),
    )
    fake(bindir, "sacct", answer(bindir, "sacct", "14|COMPLETED|0:0\n15|TIMEOUT|0:1\n"))
    found = SlurmScheduler().statuses(["11", "12", "13", "14", "15"])
    assert found["11"].state == "RUNNING"
    assert (found["12"].state, found["12"].exit_code) == ("FAILED", 1)
    assert (found["13"].state, found["13"].exit_code) == ("CANCELLED", 143)
    assert (found["14"].state, found["14"].exit_code) == ("COMPLETED", 0)
    assert found["15"].state == "TIMEOUT"
    assert calls(bindir, "sacct")[-1].endswith("--jobs=14,15 --format=JobID,State,ExitCode")


SGE_QSTAT = """job-ID  prior   name       user         state submit/start at     queue                          slots ja-task-ID
-----------------------------------------------------------------------------------------------------------------
     21 0.55500 hpcbench   alice        r     03/05/2024 10:00:01 all.q@node1                        2
     22 0.00000 hpcbench   alice        qw    03/05/2024 10:00:02                                    1
     23 0.00000 hpcbench   alice        Eqw   03/05/2024 10:00:03                                    1
"""
SGE_QACCT = """==============================================================
qname        all.q
hostname     node1
jobname      hpcbench
jobnumber    24
failed       0
exit_status  5
"""


def test_sge_qstat_then_qacct(bindir):
    fake(bindir, "qstat", answer(bindir, "qstat", SGE_QSTAT))
    fake(bindir, "qacct", answer(bindir, "qacct", SGE_QACCT))
    found = SgeScheduler().statuses(["21", "22", "23", "24"])
    assert [found[j].state for j in ("21", "22", "23")] == ["RUNNING", "PENDING", "FAILED"]
    assert (found["24"].state, found["24"].exit_code) == ("FAILED", 5)
    assert calls(bindir, "qacct") == ["-j 24"]


@pytest.mark.parametrize(
    "value,ceiling", [("", 10.0), ("1", 1.0), ("2.5", 2.5), ("60", 10.0), ("0.5", 0.5)]
)
def test_the_poll_ceiling_is_the_schedulers_or_a_shorter_one_from_the_environment(
    value, ceiling, monkeypatch
):
    from hpcbench.jobs.schedulers.polling import POLL_CEILING_VARIABLE, poll_ceiling

    monkeypatch.setenv(POLL_CEILING_VARIABLE, value)
    assert poll_ceiling(10.0) == ceiling


@pytest.mark.parametrize("value", ["0", "-1", "x", "nan", "601", "1e9"])
def test_a_bad_poll_ceiling_is_one_line_naming_the_variable(value, monkeypatch):
    from hpcbench.jobs.schedulers.polling import POLL_CEILING_VARIABLE, poll_ceiling

    monkeypatch.setenv(POLL_CEILING_VARIABLE, value)
    with pytest.raises(SchedulerError, match=rf"^{POLL_CEILING_VARIABLE}=.*: must be seconds"):
        poll_ceiling(10.0)


def test_submit_wait_with_a_bad_poll_ceiling_submits_nothing(tmp_path, monkeypatch):
    from hpcbench.cli import main

    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HPCBENCH_POLL_CEILING", "soon")
    monkeypatch.chdir(tmp_path)
    assert main(["submit", "--scheduler", "local", "--program", "true", "--wait"]) == 1
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()


def test_status_without_ids_lists_the_newest_first_whatever_their_schedulers(
    bindir, tmp_path, capsys
):
    """Jobs submitted from here to PBS (a stand-in qstat) and the local scheduler, one after the
    other: ``hpcbench status`` lists them newest first, not grouped by scheduler."""
    import time

    from hpcbench import cli
    from hpcbench.jobs import job_store

    fake(bindir, "qstat", f"""case "$1" in
  --version) printf '{OPENPBS_VERSION}' ;;
  *) {answer(bindir, "qstat", OPENPBS_FULL)} ;;
esac""")  # fmt: skip
    for i, (sched, job) in enumerate([("pbs", "101.pbs1"), ("local", "local-1"),
                                      ("pbs", "103.pbs1")]):  # fmt: skip
        job_store.record(JobRecord(job, sched, tmp_path / "s", tmp_path / "o", tmp_path / "e",
                                  tmp_path / f"run{i}"))  # fmt: skip
        path = job_store.state_dir() / "jobs" / sched / f"{job}.json"
        os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
    assert cli.main(["status"]) == 0
    listed = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == ["103.pbs1", "local-1", "101.pbs1"], listed
