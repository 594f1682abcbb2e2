"""Hostile values in every user-settable string field come out inert.

Each rendered script is run for real with bash. The commands it would hand the values to on a
cluster (srun, mpiexec, scontrol, module, conda, apptainer, python) cannot run here, so they are
replaced on PATH by a recorder that writes down the argv and environment it was given: the test
proves both that nothing the values hold was executed and that each value arrived intact.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from hpcbench.jobs.launchers import launcher_classes
from hpcbench.jobs.render import RenderError, directive, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import build_spec

CANARY = "PWNED"
HOSTILE = [
    "a b 'c' \"d\"",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"x; touch {CANARY}",
    f"x && touch {CANARY} #",
    f"' ; touch {CANARY}; '",
    f'" ; touch {CANARY}; "',
    "$HOME ${PATH} * ?",
    f"--flag=$(touch {CANARY})\\",
]
MULTILINE = [f"x\ntouch {CANARY}", f"x\n#SBATCH --wrap=touch {CANARY}\n"]
# Every scheduler found by the registry is tested; the commands its scripts run to start one
# agent per node (srun, mpiexec, blaunch…) are recorded like the launchers.
SCHEDULERS = list(SCHEDULER_CLASSES)
_TWO_NODES = build_spec({"resources": {"nodes": 2}})
AGENTS = {
    str(words[0]) for cls in SCHEDULER_CLASSES.values() if (words := cls.node_agents(_TWO_NODES))
}
RECORDED = tuple(
    sorted({"srun", "mpiexec", "scontrol", "module", "conda", "apptainer", "python"} | AGENTS)
)
# Each stub records its name, its arguments and two variables, NUL-separated (no argument can
# hold a NUL), in a file of its own (stubs run at once on two nodes), named by the time: in bash,
# because the scripts start a thousand of them, and a Python one costs 25 ms of CPU
RECORDER = r"""#!/bin/bash
name=${0##*/}
if [ "$name" = scontrol ] && [ "$1 $2" = "show config" ]; then  # a site's: srun binds
  echo "TaskPlugin              = task/affinity,task/cgroup"
elif [ "$name" = scontrol ]; then echo node1; echo node2; fi
{
  printf '%s\0%s\0' "$name" "$#"
  if [ $# -gt 0 ]; then printf '%s\0' "$@"; fi
  if [ -n "${HOSTILE+set}" ]; then printf '1%s\0' "$HOSTILE"; else printf '0\0'; fi
  if [ -n "${HPCB_ACTIVATED+set}" ]; then printf '1%s\0' "$HPCB_ACTIVATED"; else printf '0\0'; fi
} >"$HPCB_RECORD/${EPOCHREALTIME/[.,]/}-$$"
"""


def read_record(record: Path) -> list[dict]:
    """The stubs' calls in the order they were made: name, argv, and the two variables (None
    when unset)."""
    calls = []
    for call in sorted(record.iterdir(), key=lambda p: [int(x) for x in p.name.split("-")]):
        fields = [f.decode("utf-8", "surrogateescape") for f in call.read_bytes().split(b"\0")]
        name, argc, *rest = fields[:-1]
        argv, flags = rest[: int(argc)], rest[int(argc) :]
        env = {
            k: v[1:] if v.startswith("1") else None for k, v in zip(ENV_KEYS, flags, strict=True)
        }
        calls.append({"name": name, "argv": argv, "env": env})
    return calls


ENV_KEYS = ("HOSTILE", "HPCB_ACTIVATED")


def as_path(value: str) -> str:
    """The value as a path field accepts it: one starting with '-' is refused (it would be read as
    an option), so the test gives it as ./VALUE, as the error message tells a user to."""
    return f"./{value}" if value.startswith("-") else value


def as_output_dir(value: str) -> str:
    """The value without '$', ':' and '\\', which output_dir refuses (scheduler path
    patterns)."""
    return as_path(value).replace("$", "S").replace("\\", "B").replace(":", "C")


def quotes_directives(scheduler: str) -> bool:
    """Whether the scheduler's directives can hold '"' and '\\' (sbatch unescapes them; the
    others' qsub and bsub do not, and the renderer refuses them there)."""
    try:
        directive('a"b\\c d', scheduler)
    except RenderError:
        return False
    return True


def as_qsub_word(value: str) -> str:
    """The value without '"' and '\\', which PBS's and Grid Engine's directives cannot quote
    (the renderer refuses them there)."""
    return value.replace('"', "Q").replace("\\", "B")


def hostile_spec(
    value: str, scheduler: str, launcher: str, program: str, tmp: Path, line_value: str
) -> dict:
    venv = tmp / "venvs" / value.replace("/", "_")
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "activate").write_text("export HPCB_ACTIVATED=yes\n")
    qsub_value = line_value if quotes_directives(scheduler) else as_qsub_word(line_value)
    one = launcher_classes()[launcher].one_process  # the program itself, once: no launcher args
    resources = {
        "nodes": 1 if one else 2,
        "tasks_per_node": 1 if one else 2,
        "job_name": line_value,
        "output_dir": as_output_dir(qsub_value),
    }
    if scheduler != "local":
        resources["partition"] = qsub_value
        resources["account"] = qsub_value
    if scheduler == "slurm":
        resources.update(qos=line_value, constraint=line_value)
    prog = {"script": as_path(value)} if program == "script" else {"command": [value, "arg"]}
    return {
        "resources": resources,
        "environment": {
            "modules": [as_path(value)],
            "venv": str(venv),
            "conda_env": as_path(value),
            "container": {"image": as_path(value), "binds": [as_path(value)], "options": [value]},
            "variables": {"HOSTILE": value},
        },
        "launcher": {
            "kind": launcher,
            "args": [] if one else [value],
            **({"srun_mpi": line_value} if launcher == "srun" else {}),
        },
        "program": {**prog, "args": [value, "--x"]},
        "scheduler": {
            "directives": [f"--comment={line_value}"],
            "sge_pe": qsub_value,  # read by Grid Engine's template only
        },
    }


@pytest.fixture
def sandbox(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in RECORDED:
        path = bindir / name
        path.write_text(RECORDER)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    env = {
        "PATH": f"{bindir}{os.pathsep}/usr/bin:/bin",
        "HPCB_RECORD": str(tmp_path / "record"),
        "HOME": str(tmp_path),
    }
    for cls in SCHEDULER_CLASSES.values():  # what each scheduler sets in its jobs
        env.update(cls.job_environment("123", ["node1", "node2"], tmp_path))
    (tmp_path / "work").mkdir()
    return tmp_path, env


def run_script(tmp: Path, env: dict, text: str) -> list[dict]:
    record = Path(env["HPCB_RECORD"])
    shutil.rmtree(record, ignore_errors=True)
    record.mkdir()
    script = tmp / "job.sh"
    script.write_text(text)
    result = subprocess.run(
        ["bash", str(script)], cwd=tmp / "work", env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr + text
    return read_record(record)


def launches(scheduler: str, launcher: str) -> bool:
    """Whether the scheduler's scripts can start ranks with this launcher (srun: SLURM's)."""
    try:
        render_script(build_spec({"launcher": {"kind": launcher}}), scheduler)
    except RenderError:
        return False
    return True


CASES = [
    (s, launcher, program)
    for s in SCHEDULERS
    for launcher in launcher_classes()  # every launcher the registry finds, a new one included
    if launches(s, launcher)
    for program in ("script", "command")
]


@pytest.mark.parametrize("scheduler, launcher, program", CASES)
def test_hostile_values_are_inert_and_arrive_intact(sandbox, scheduler, launcher, program):
    tmp, env = sandbox
    for value in HOSTILE:
        spec = build_spec(hostile_spec(value, scheduler, launcher, program, tmp, value))
        calls = run_script(tmp, env, render_script(spec, scheduler))
        assert not list(tmp.rglob(CANARY)), f"{value!r} executed something"
        by_name = {c["name"]: c for c in calls}
        assert by_name["module"]["argv"] == ["load", as_path(value)]
        assert ["activate", as_path(value)] in [c["argv"] for c in calls if c["name"] == "conda"]
        launch = [c for c in calls if c["argv"][-2:] == [value, "--x"]]
        assert launch, f"no launch call ended with the program args: {calls}"
        for call in launch:
            assert call["env"] == {"HOSTILE": value, "HPCB_ACTIVATED": "yes"}
            assert value in call["argv"][:-2]  # container image, binds and launcher args too
        # The job's run directory was made under the literal output_dir.
        plain = value if quotes_directives(scheduler) else as_qsub_word(value)
        assert (tmp / "work" / as_output_dir(plain)).is_dir()


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("value", MULTILINE)
def test_multiline_values_are_inert_in_the_body(sandbox, scheduler, value):
    # Only data for the program may hold a newline: its arguments, command and environment values.
    tmp, env = sandbox
    data = {
        "resources": {"nodes": 2, "tasks_per_node": 2},
        "environment": {"variables": {"HOSTILE": value}},
        "launcher": {"kind": "mpiexec"},
        "program": {"command": ["python", value], "args": [value, "--x"]},
        "scheduler": {"sge_pe": "mpi"},  # read by Grid Engine's template only
    }
    text = render_script(build_spec(data), scheduler)
    assert value not in text, "a raw newline from a value reached the script text"
    calls = run_script(tmp, env, text)
    assert not list(tmp.rglob(CANARY))
    launch = [c for c in calls if c["argv"][-2:] == [value, "--x"]]
    assert launch and all(c["argv"][-3] == value for c in launch), calls
    assert all(c["env"]["HOSTILE"] == value for c in launch)


@pytest.mark.parametrize(
    "field", ["job_name", "output_dir", "partition", "account", "qos", "constraint"]
)
@pytest.mark.parametrize("value", MULTILINE)
def test_newlines_cannot_reach_a_directive_line(field, value):
    # A newline would end the '#SBATCH' comment and start a line of code: such values are refused.
    with pytest.raises(SpecError, match=f"resources.{field}: must be a single line"):
        build_spec({"resources": {field: value}})
    with pytest.raises(SpecError, match="scheduler.directives: entry 1 must be a single line"):
        build_spec({"scheduler": {"directives": [value]}})


def test_every_directive_stays_one_comment_line():
    for value in HOSTILE:
        data = {
            "resources": {
                "job_name": value,
                "partition": value,
                "account": value,
                "qos": value,
                "constraint": value,
                "output_dir": as_output_dir(value),
            }
        }
        text = render_script(build_spec(data), "slurm")
        header = text.split("\n#\n", 1)[0].splitlines()[1:]
        assert header and all(line.startswith("#SBATCH --") for line in header), header
