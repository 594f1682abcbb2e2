"""Schedulers are classes found by the registry: each declares its template, suffix, directive
prefix, detection, node agents and the one definition of where logs and run directories go.

LSF cannot run here, so its ``bsub``/``bjobs``/``bkill`` are stand-ins on PATH that print output
recorded from LSF 10.1's documented formats; the rendering, quoting and parsing are hpcbench's.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hpcbench import api
from hpcbench.jobs import job_store
from hpcbench.jobs import schedulers as schedulers_package
from hpcbench.jobs.render import builtin_template_dir, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES as SCHEDULERS
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES, detect, get
from hpcbench.jobs.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobRecord,
)
from hpcbench.jobs.schedulers.lsf.scheduler import LsfScheduler, parse_bjobs
from hpcbench.jobs.script_check import reading_rules
from hpcbench.jobs.spec_load import build_spec
from tests.conftest import hpcbench


def test_the_registry_finds_every_scheduler_package_and_the_spec_knows_them():
    packages = {
        p.parent.name for p in Path(schedulers_package.__file__).parent.glob("*/__init__.py")
    }
    assert set(SCHEDULER_CLASSES) == packages
    assert SCHEDULERS == ("auto", *SCHEDULER_CLASSES)
    assert list(SCHEDULER_CLASSES)[-1] == "local"  # asked last: it recognises every machine


@pytest.mark.parametrize("name", list(SCHEDULER_CLASSES))
def test_each_scheduler_declares_a_template_suffix_and_prefix(name):
    cls = SCHEDULER_CLASSES[name]
    assert (builtin_template_dir() / cls.template).is_file()
    assert cls.script_suffix.startswith(".")
    if cls.directive_prefix:
        assert reading_rules()[name] == cls.directive_prefix
        header = render_script(build_spec({"scheduler": {"sge_pe": "mpi"}}), name)
        assert f"\n{cls.directive_prefix} " in header


def fake_tools(tmp_path: Path, monkeypatch, tools: dict[str, str]) -> Path:
    """Executables named after scheduler commands, first on PATH, running ``tools[name]`` (sh);
    each logs its argv and standard input to ``calls``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    for name, body in tools.items():
        path = bindir / name
        path.write_text(
            f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n'
            f'if [ ! -t 0 ]; then cat >> "{calls}.stdin"; fi\n{body}\n'
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_detection_asks_each_class_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert detect()[0] == "local"
    fake_tools(tmp_path, monkeypatch, {"bsub": "exit 0"})
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert detect() == ("lsf", f"bsub found at {tmp_path / 'bin' / 'bsub'}")


# --------------------------------------------------------- one definition of where files go


def submitted_paths(text: str, prefix: str) -> tuple[str, str]:
    out = next(line for line in text.splitlines() if line.startswith(f"{prefix} -o"))
    return out.split(" ", 2)[2], next(
        line for line in text.splitlines() if line.startswith("run_dir=")
    )


@pytest.mark.parametrize("name", [n for n, c in SCHEDULER_CLASSES.items() if c.log_id_token])
def test_the_log_path_the_script_writes_is_the_one_python_reads(name, monkeypatch, tmp_path):
    """Change the pattern in one place (the class) and the script and hpcbench logs follow."""
    cls = SCHEDULER_CLASSES[name]
    monkeypatch.setattr(cls, "log_names", ("logs-{name}/{id}.stdout", "logs-{name}/{id}.stderr"))
    monkeypatch.setattr(cls, "run_dir_name", "work-{id}-{name}")
    spec = build_spec({"resources": {"job_name": "exp1", "output_dir": "out"}})
    text = render_script(spec, name)
    token = cls.log_id_token
    directives = [line for line in text.splitlines() if line.startswith(cls.directive_prefix)]
    assert any(line.endswith(f"out/logs-exp1/{token}.stdout") for line in directives), directives
    assert any(line.endswith(f"out/logs-exp1/{token}.stderr") for line in directives), directives
    assert 'run_dir=out/work-"$job_id"-exp1\n' in text
    out, err = get(name).log_paths(spec, "42", tmp_path)
    assert (out, err) == (
        tmp_path / "out/logs-exp1/42.stdout",
        tmp_path / "out/logs-exp1/42.stderr",
    )
    assert get(name).run_dir(spec, "42", tmp_path) == tmp_path / "out/work-42-exp1"


@pytest.mark.parametrize(
    "name", [n for n, c in SCHEDULER_CLASSES.items() if c.log_id_token is None]
)
def test_schedulers_that_name_logs_themselves_get_the_directory(name, tmp_path):
    cls = SCHEDULER_CLASSES[name]
    spec = build_spec({"resources": {"job_name": "exp1", "output_dir": "out"}})
    text = render_script(spec, name)
    if cls.directive_prefix:
        assert f"{cls.directive_prefix} -o out/\n" in text
    out, _ = get(name).log_paths(spec, "42.server", tmp_path)
    assert out.parent == tmp_path / "out"


def test_slurm_log_paths_double_a_percent_in_the_directory(tmp_path):
    spec = build_spec({"resources": {"output_dir": "runs/100%"}})
    text = render_script(spec, "slurm")
    assert "#SBATCH --output=runs/100%%/hpcbench-%j.out\n" in text
    assert get("slurm").log_paths(spec, "7", tmp_path)[0] == tmp_path / "runs/100%/hpcbench-7.out"


# ------------------------------------------------------------------------------------ LSF

# bjobs -a -noheader -o "jobid stat exit_code exit_reason delimiter='|'" as LSF 10.1 prints it
BJOBS = """\
101|PEND|-|-
102|RUN|-|-
103|DONE|-|-
104|EXIT|3|-
105|EXIT|140|TERM_RUNLIMIT: job killed after reaching LSF run time limit
106|EXIT|130|TERM_OWNER: job killed by owner
107|SSUSP|-|-
108[2]|DONE|-|-
"""


def test_bjobs_states_exit_codes_and_reasons():
    ids = ["101", "102", "103", "104", "105", "106", "107", "108[2]"]
    found = parse_bjobs(BJOBS, ids)
    assert {j: (s.state, s.exit_code) for j, s in found.items()} == {
        "101": (PENDING, None),
        "102": (RUNNING, None),
        "103": (COMPLETED, 0),
        "104": (FAILED, 3),
        "105": (TIMEOUT, 140),
        "106": (CANCELLED, 130),
        "107": (RUNNING, None),
        "108[2]": (COMPLETED, 0),
    }


def test_lsf_submit_pipes_the_script_and_reads_the_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    calls = fake_tools(
        tmp_path,
        monkeypatch,
        {
            "bsub": "echo 'Job <4242> is submitted to default queue <normal>.'",
            "bjobs": f"cat <<'EOF'\n{BJOBS}EOF\necho 'Job <999> is not found' >&2; exit 255",
            "bkill": "echo 'Job <102> is being terminated'",
        },
    )
    script = tmp_path / "job.lsf"
    script.write_text("#!/bin/bash\n#BSUB -J x\ntrue\n")
    sched = LsfScheduler()
    assert sched.submit(script, build_spec(), tmp_path) == "4242"
    assert Path(f"{calls}.stdin").read_text() == script.read_text()  # bsub reads #BSUB on stdin
    found = sched.statuses(["104", "999"])
    assert found["104"].state == FAILED and found["999"].state == UNKNOWN
    sched.cancel(["102"])
    assert "bkill 102" in calls.read_text()


def test_an_lsf_job_killed_by_hpcbench_reads_cancelled(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    fake_tools(tmp_path, monkeypatch, {"bkill": "true", "bjobs": "echo '104|EXIT|130|-'"})
    sched = LsfScheduler()
    assert sched.statuses(["104"])["104"].state == FAILED
    sched.cancel(["104"])
    assert sched.statuses(["104"])["104"].state == CANCELLED


# ------------------------------------------------------------- status finds the scheduler


def test_status_and_cancel_take_the_scheduler_from_the_job_record(tmp_path, monkeypatch):
    """This machine has sbatch (SLURM is detected), yet a job recorded as LSF's is asked of LSF."""
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    calls = fake_tools(
        tmp_path,
        monkeypatch,
        {"sbatch": "exit 1", "squeue": "exit 1", "bjobs": "echo '4242|RUN|-|-'", "bkill": "true"},
    )
    out = tmp_path / "runs"
    job_store.record(
        JobRecord("4242", "lsf", out / "s.lsf", out / "a.out", out / "a.err", out / "r")
    )
    env = {"HPCBENCH_STATE_DIR": str(tmp_path / "state"), "PATH": os.environ["PATH"]}
    status = hpcbench("status", "4242", cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stderr
    assert status.stdout == "4242\tRUNNING\n"
    cancel = hpcbench("cancel", "4242", cwd=tmp_path, env=env)
    assert cancel.returncode == 0 and "cancelled 4242 (lsf)" in cancel.stdout
    assert "squeue" not in calls.read_text() and "bkill 4242" in calls.read_text()


def test_a_job_handle_reads_rank_0_metrics_or_says_why_not(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    fake_tools(tmp_path, monkeypatch, {"bjobs": "echo '7|DONE|-|-'; echo '8|EXIT|1|-'"})
    run = tmp_path / "run7"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"test": {"accuracy": 0.5}}))
    (tmp_path / "8.err").write_text(
        'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad input\n'
    )
    done = api.Job(
        JobRecord("7", "lsf", tmp_path / "s", tmp_path / "7.out", tmp_path / "7.err", run)
    )
    assert done.done() and done.result() == {"test": {"accuracy": 0.5}}
    assert done.results() == [done.result()]
    failed = api.Job(
        JobRecord("8", "lsf", tmp_path / "s", tmp_path / "8.out", tmp_path / "8.err", tmp_path)
    )
    with pytest.raises(api.JobFailed, match=r"(?s)job 8 failed with exit code 1.*ValueError: bad"):
        failed.result()
