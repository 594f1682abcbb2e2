"""Job states read from recorded answers of the real commands (tests/unit/recorded/, whose
README.md says where each one comes from), for every state each batch system prints.

Stand-in ``squeue``/``sacct``/``qstat``/``qacct`` programs first on PATH print the recorded files,
so the tests go through ``hpcbench.jobs.schedulers.get(name).statuses([...])`` and its subprocesses as
on a cluster.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hpcbench.jobs import schedulers

RECORDED = Path(__file__).parent / "recorded"
SLURM_VERSIONS = ["22.05", "23.02", "23.11", "24.05", "24.11"]


def fake(bindir: Path, name: str, body: str) -> None:
    """A stand-in program: logs its arguments to <name>.calls, then runs ``body`` (sh)."""
    path = bindir / name
    path.write_text(f'#!/bin/sh\necho "$*" >> "{bindir}/{name}.calls"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def calls(bindir: Path, name: str) -> list[str]:
    path = bindir / f"{name}.calls"
    return path.read_text().splitlines() if path.exists() else []


def play(*parts: str) -> str:
    """Shell that prints a recorded file."""
    return f'cat "{RECORDED.joinpath(*parts)}"'


@pytest.fixture
def bindir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SGE_ROOT", raising=False)
    return d


def states(found: dict) -> dict[str, tuple[str, int | None]]:
    return {job: (st.state, st.exit_code) for job, st in found.items()}


# ------------------------------------------------------------------------------------- SLURM

SQUEUE_ARGV = (
    "--noheader --states=all --jobs={ids} --array --Format=JobArrayID:|,State:|,Reason:|,exit_code"
)
NO_ACCOUNTING = 'cat "{}" >&2; exit 1'.format(
    RECORDED / "slurm" / "22.05" / "sacct-no-accounting.txt"
)
INVALID_JOB_ID = 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1'


@pytest.mark.parametrize("version", SLURM_VERSIONS)
def test_slurm_squeue_every_base_state(bindir, version):
    fake(bindir, "squeue", play("slurm", version, "squeue-states.txt"))
    fake(bindir, "sacct", NO_ACCOUNTING)
    ids = [str(n) for n in range(101, 114)]
    found = states(schedulers.get("slurm").statuses(ids))
    assert found == {
        "101": ("RUNNING", None),
        "102": ("PENDING", None),
        "103": ("RUNNING", None),  # COMPLETING
        "104": ("COMPLETED", 0),
        "105": ("FAILED", 1),  # wait status 256: exit 1
        "106": ("CANCELLED", 143),  # wait status 15: SIGTERM
        "107": ("TIMEOUT", 143),
        "108": ("FAILED", 0),  # NODE_FAIL
        "109": ("FAILED", 0),  # OUT_OF_MEMORY
        "110": ("PENDING", None),  # REQUEUE_HOLD
        "111": ("RUNNING", None),  # SUSPENDED
        "112": ("PREEMPTED", 143),  # ended for a job of higher priority: not the user's cancel
        "113": ("TIMEOUT", 0),  # DEADLINE
    }
    assert calls(bindir, "squeue") == [SQUEUE_ARGV.format(ids=",".join(ids))]
    assert calls(bindir, "sacct") == []  # every job was listed: no accounting call
    preempted = schedulers.get("slurm").statuses(["112"])["112"]
    assert preempted.finished and "higher priority" in preempted.reason, preempted


@pytest.mark.parametrize("version", SLURM_VERSIONS)
def test_slurm_squeue_flag_states(bindir, version):
    fake(bindir, "squeue", play("slurm", version, "squeue-flag-states.txt"))
    fake(bindir, "sacct", NO_ACCOUNTING)
    found = states(schedulers.get("slurm").statuses([str(n) for n in range(120, 126)]))
    assert found == {
        "120": ("PENDING", None),
        "121": ("PENDING", None),
        "122": ("RUNNING", None),
        "123": ("RUNNING", None),
        "124": ("RUNNING", None),
        "125": ("PENDING", None),
    }


def test_slurm_2205_recorded_live(bindir):
    """squeue 22.05 as it answered on the test cluster: exit 3, a batch script killed by
    SIGKILL (wait status 9), a scancel (15), a held and a pending job."""
    fake(bindir, "squeue", play("slurm", "22.05", "squeue.txt"))
    fake(bindir, "sacct", NO_ACCOUNTING)
    found = schedulers.get("slurm").statuses(["2", "3", "4", "5", "6", "7", "8"])
    assert states(found) == {
        "2": ("COMPLETED", 0),
        "3": ("FAILED", 3),
        "4": ("FAILED", 137),
        "5": ("CANCELLED", 143),
        "6": ("RUNNING", None),
        "7": ("PENDING", None),
        "8": ("PENDING", None),
    }
    assert found["7"].reason == "JobHeldUser" and found["3"].reason == "NonZeroExitCode"


@pytest.mark.parametrize("version", SLURM_VERSIONS)
def test_slurm_sacct_for_jobs_squeue_forgot(bindir, version):
    fake(bindir, "squeue", INVALID_JOB_ID)
    fake(bindir, "sacct", play("slurm", version, "sacct.txt"))
    ids = [str(n) for n in range(130, 136)]
    found = schedulers.get("slurm").statuses(ids)
    assert {j: st.state for j, st in found.items()} == {
        "130": "COMPLETED",
        "131": "FAILED",
        "132": "CANCELLED",  # "CANCELLED by 1000"
        "133": "TIMEOUT",
        "134": "FAILED",
        "135": "FAILED",
    }
    assert (found["130"].exit_code, found["131"].exit_code) == (0, 2)
    assert calls(bindir, "sacct") == [
        f"--noheader --parsable2 --allocations --jobs={','.join(ids)} --format=JobID,State,ExitCode"
    ]


def test_slurm_sacct_signal_part_of_exit_code(bindir):
    fake(bindir, "squeue", INVALID_JOB_ID)
    fake(bindir, "sacct", play("slurm", "24.11", "sacct.txt"))
    found = schedulers.get("slurm").statuses(["132"])
    assert (found["132"].state, found["132"].exit_code) == ("CANCELLED", 143)


def test_slurm_array_task(bindir):
    fake(
        bindir,
        "squeue",
        'case "$*" in\n  *JobArrayID*) printf "8_1|RUNNING|None|0\\n8_2|RUNNING|None|0\\n" ;;\n'
        f"  *) {play('slurm', '22.05', 'squeue-array.txt')} ;;\nesac",
    )
    fake(bindir, "sacct", NO_ACCOUNTING)
    found = schedulers.get("slurm").statuses(["8_1", "8_2"])
    assert states(found) == {"8_1": ("RUNNING", None), "8_2": ("RUNNING", None)}


def test_slurm_forgotten_job_is_unknown(bindir):
    fake(bindir, "squeue", INVALID_JOB_ID)
    fake(bindir, "sacct", NO_ACCOUNTING)
    found = schedulers.get("slurm").statuses(["99999"])
    assert found["99999"].state == "UNKNOWN"
    assert "no accounting" in found["99999"].reason


# -------------------------------------------------------------------------------- Grid Engine

QACCT = f"""case "$2" in
  1) {play("sge", "qacct-j-1.txt")} ;;
  2) {play("sge", "qacct-j-2.txt")} ;;
  25) {play("sge", "qacct-j-25-array.txt")} ;;
  27) {play("sge", "qacct-j-27-qdel.txt")} ;;
  *) echo "error: job id $2 not found" >&2; exit 1 ;;
esac"""


def test_sge_qstat_and_qacct(bindir):
    fake(bindir, "qstat", play("sge", "qstat.txt"))
    fake(bindir, "qacct", QACCT)
    found = schedulers.get("sge").statuses(["21", "22", "23", "1", "2", "27", "99999"])
    assert states(found) == {
        "21": ("RUNNING", None),
        "22": ("PENDING", None),
        "23": ("FAILED", None),  # Eqw: pending in error
        "1": ("COMPLETED", 0),
        "2": ("FAILED", 1),
        "27": ("FAILED", 137),  # deleted by someone else than hpcbench cancel
        "99999": ("UNKNOWN", None),
    }
    assert calls(bindir, "qstat") == ["-u *"]
    assert sorted(calls(bindir, "qacct")) == ["-j 1", "-j 2", "-j 27", "-j 99999"]


def test_sge_array_tasks(bindir):
    fake(bindir, "qstat", play("sge", "qstat.txt"))
    fake(bindir, "qacct", QACCT)
    found = schedulers.get("sge").statuses(["25.1", "25.2", "25.3"])
    assert states(found) == {
        "25.1": ("RUNNING", None),
        "25.2": ("RUNNING", None),
        "25.3": ("PENDING", None),
    }


# ---------------------------------------------------------------------------------------- PBS


def pbs_qstat(bindir: Path, flavour: str, listing: str, version_to: str = "") -> None:
    """qstat of OpenPBS or Torque: --version from the recording, the listing for the rest."""
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) {play("pbs", flavour, "qstat--version.txt")} {version_to} ;;
  *) {play("pbs", flavour, listing)} ;;
esac""",
    )


def test_openpbs_every_state_and_exit_status(bindir):
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) {play("pbs", "openpbs", "qstat--version.txt")} ;;
  *) {play("pbs", "openpbs", "qstat-x-f.txt")}
     {play("pbs", "openpbs", "qstat-unknown.stderr.txt")} >&2; exit 153 ;;
esac""",
    )
    ids = [f"{n}.pbs1" for n in range(201, 212)] + ["299.pbs1"]
    found = schedulers.get("pbs").statuses(ids)
    assert states(found) == {
        "201.pbs1": ("PENDING", None),
        "202.pbs1": ("RUNNING", None),
        "203.pbs1": ("PENDING", None),  # held
        "204.pbs1": ("COMPLETED", 0),
        "205.pbs1": ("FAILED", 3),
        "206.pbs1": ("FAILED", -1),  # JOB_EXEC_FAIL1: could not start
        "207.pbs1": ("FAILED", -3),  # JOB_EXEC_RETRY
        "208.pbs1": ("TIMEOUT", -29),  # JOB_EXEC_KILL_WALLTIME
        "209.pbs1": ("CANCELLED", 143),  # 256 + SIGTERM: qdel
        "210.pbs1": ("CANCELLED", 137),  # 256 + SIGKILL
        "211.pbs1": ("RUNNING", None),  # exiting
        "299.pbs1": ("UNKNOWN", None),
    }
    assert "JOB_EXEC" in found["206.pbs1"].reason
    assert "signal 15" in found["209.pbs1"].reason
    assert "Unknown Job Id 299.pbs1" in found["299.pbs1"].reason
    assert calls(bindir, "qstat") == ["--version", "-x -f " + " ".join(ids)]


def test_torque_every_state_and_exit_status(bindir):
    pbs_qstat(bindir, "torque", "qstat-f.txt", ">&2")
    ids = [f"{n}.torque1.example.org" for n in range(301, 308)] + ["308"]
    found = schedulers.get("pbs").statuses(ids)
    assert states(found) == {
        "301.torque1.example.org": ("PENDING", None),
        "302.torque1.example.org": ("RUNNING", None),
        "303.torque1.example.org": ("COMPLETED", 0),
        "304.torque1.example.org": ("FAILED", 2),
        "305.torque1.example.org": ("FAILED", -1),  # JOB_EXEC_FAIL1
        "306.torque1.example.org": ("TIMEOUT", -11),  # JOB_EXEC_OVERLIMIT_WT
        "307.torque1.example.org": ("CANCELLED", 143),  # 256 + SIGTERM
        "308": ("RUNNING", None),  # exiting
    }
    assert calls(bindir, "qstat")[-1] == "-f " + " ".join(ids)


def test_torque_xml(bindir):
    """Torque's -x is XML; read when qstat --version names neither family."""
    fake(
        bindir,
        "qstat",
        f"""case "$1" in
  --version) echo "qstat: unrecognized option '--version'" >&2; exit 2 ;;
  -x) {play("pbs", "torque", "qstat-x.xml")} ;;
esac""",
    )
    ids = ["303", "304", "307.torque1.example.org", "302"]
    found = schedulers.get("pbs").statuses(ids)
    assert states(found) == {
        "303": ("COMPLETED", 0),
        "304": ("FAILED", 2),
        "307.torque1.example.org": ("CANCELLED", 143),
        "302": ("RUNNING", None),
    }


SLURM_TORQUE_QSTAT = f"""case "$1" in
  --version) {play("pbs", "slurm-wlm-torque", "qstat--version.txt")} >&2; exit 2 ;;
  -x) {play("pbs", "slurm-wlm-torque", "qstat-x-f.txt")} >&2; exit 2 ;;
  -f) shift
      case "$*" in
        *9999*) exit 153 ;;
        *) {play("pbs", "slurm-wlm-torque", "qstat-f.txt")} ;;
      esac ;;
esac"""


def test_slurm_torque_wrapper_qstat(bindir):
    """slurm-wlm-torque's qstat: no --version, no -x, attributes indented with a tab, no
    exit status; recorded on the test cluster."""
    fake(bindir, "qstat", SLURM_TORQUE_QSTAT)
    sched = schedulers.get("pbs")
    found = sched.statuses(["1", "2", "3"])
    assert states(found) == {
        "1": ("COMPLETED", None),
        "2": ("RUNNING", None),
        "3": ("RUNNING", None),
    }
    assert "no exit status" in found["1"].reason
    gone = sched.statuses(["9999"])["9999"]
    assert gone.state == "UNKNOWN"
    # -x refused once: the same scheduler asks with -f alone from then on
    assert calls(bindir, "qstat") == ["--version", "-x -f 1 2 3", "-f 1 2 3", "-f 9999"]
