"""The bad-input sweep: random bad values for every input hpcbench accepts, in-process.

Each property draws one bad value for one input (a job spec field, a flag of a command, a trainer
option, a field of a dataset manifest) and asserts what docs/inputs.md promises: the project's
own error type or exit status 2, one line naming the input, no traceback, and nothing written,
submitted or executed. Hypothesis runs derandomized, so CI sees the same examples every time.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from hpcbench import api
from hpcbench.cli import main
from hpcbench.jobs.containers import runtime_names
from hpcbench.jobs.launchers import launcher_names
from hpcbench.jobs.render import RenderError
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES
from hpcbench.jobs.spec import MAX_LINE_CHARS, MAX_NAME_CHARS, MAX_TEXT_CHARS, JobSpec, SpecError
from hpcbench.jobs.spec_load import load_spec as load_spec_file
from hpcbench.jobs.spec_options import own_options, requeue_methods
from hpcbench.train.command_line import parse_args
from hpcbench.train.config import STRATEGIES, ConfigError
from tests.conftest import examples, need_module

SWEEP = settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
WIDE = settings(SWEEP, max_examples=examples(200))  # the properties over many fields or flags
SCHEDULERS = ("slurm", "pbs", "sge", "lsf", "local")
CONTROL = ["\n", "\r", "\x00", "\x1b", "\x7f", "\x0b", "\n#SBATCH --wrap=x", "\n#$ -S /bin/sh"]


# ---- helpers ----------------------------------------------------------------------------------
def one_line(message: str) -> str:
    """``message`` when it is one non-empty line (no traceback, no second message)."""
    assert message.strip() and message.strip().splitlines() == [message.strip()], message
    assert "Traceback" not in message, message
    return message.strip()


def error_line(stderr: str) -> str:
    """The one error line of a failed command. Two kinds of line may come before it: argparse's
    usage synopsis (printed with every usage error argparse itself finds) and the scheduler the
    render path chose ("hpcbench: scheduler slurm (…)"); nothing else."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    if lines[0].startswith("usage: "):
        lines = lines[-1:]  # argparse: the synopsis, then "PROG: error: MESSAGE"
    lines = [line for line in lines if not line.startswith("hpcbench: scheduler ")]
    assert len(lines) == 1 and "error:" in lines[0], stderr
    return lines[0]


def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new empty directory for one example, made the current one."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    monkeypatch.chdir(work)
    return work


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def text_with(chars: list[str]) -> st.SearchStrategy[str]:
    """Random text holding one of ``chars`` somewhere."""
    return st.builds(
        lambda a, c, b: a + c + b, st.text(max_size=6), st.sampled_from(chars), st.text(max_size=6)
    )


def not_a_number() -> st.SearchStrategy[str]:
    """Text no int() or float() reads: it holds an ASCII letter other than those of inf/nan/e."""
    return text_with(list("abcdgkloqruwyzABZ?")).filter(lambda s: s.strip() != "")


def flag_and_value(flags: dict[str, Any]) -> st.SearchStrategy[tuple[str, str]]:
    """(flag, one of its bad values); ``flags`` maps a flag to a strategy, or to a tuple whose
    first member is one."""

    def values(flag: str) -> st.SearchStrategy[tuple[str, str]]:
        strategy = flags[flag][0] if isinstance(flags[flag], tuple) else flags[flag]
        return st.tuples(st.just(flag), strategy)

    return st.sampled_from(sorted(flags)).flatmap(values)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``hpcbench ARGV`` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


# ---- job spec fields ----------------------------------------------------------------------------
def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)  # inf and -inf are TOML too
    if isinstance(value, str):
        return '"' + "".join(_toml_char(c) for c in value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    items = ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items())
    return "{" + items + "}"


def _toml_char(c: str) -> str:
    if c in '"\\':
        return "\\" + c
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\u{ord(c):04x}"
    return c


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    """``data`` as a TOML spec file: top-level values first, then one [table] each."""
    lines = [
        f"{toml_value(k)} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)
    ]
    for name, table in data.items():
        if isinstance(table, dict):
            lines.append(f"[{name}]")
            lines += [f"{toml_value(k)} = {toml_value(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def spec_fields() -> list[tuple[str, str, dict[str, Any]]]:
    """(dotted name, kind, metadata) of every field a spec file may set."""
    found = []

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            kind = f.metadata.get("kind")
            dotted = f"{prefix}.{f.metadata.get('key', f.name)}".lstrip(".")
            if kind == "table":
                found.append((dotted, kind, dict(f.metadata)))
                walk(f.metadata["cls"], dotted)
            elif kind == "own":  # the options one scheduler or launcher declares
                found.extend((o.dotted, o.kind, o.metadata) for o in own_options(prefix))
            elif kind != "internal":
                found.append((dotted, kind, dict(f.metadata)))

    walk(JobSpec, "")
    return found


FIELDS = spec_fields()
SINGLE_LINE_KINDS = {"line", "linelist", "path", "pathlist", "outdir", "module"}

BASE_SPEC: dict[str, Any] = {
    "resources": {
        "nodes": 2,
        "gpus_per_node": 1,
        "tasks_per_node": 1,
        "cpus_per_task": 2,
        "memory": "1G",
        "time": "00:10:00",
        "partition": "p",
        "account": "a",
        "qos": "q",
        "constraint": "c",
        "exclusive": False,
        "job_name": "sweep",
        "output_dir": "runs",
    },
    "environment": {
        "modules": ["gcc"],
        "venv": "venv",
        "conda_env": "env",
        "variables": {"A": "1"},
        "setup": ["true"],
        "container": {
            "image": "img.sif",
            "runtime": "apptainer",
            "binds": ["/a:/b"],
            "options": ["--cleanenv"],
        },
    },
    "launcher": {"kind": "torchrun", "port": 29500, "srun_mpi": "pmi2", "args": ["--x"]},
    "program": {"python": "python", "module": "hpcbench.train", "args": ["--epochs", "1"]},
    "scheduler": {
        "name": "slurm",
        "directives": ["--x"],
        "pbs_resources": "select",
        "sge_pe": "smp",
    },
}

WRONG_TYPES = st.one_of(
    st.booleans(),
    st.floats(),
    st.lists(st.integers(-3, 3), min_size=1, max_size=3),
    st.dictionaries(st.from_regex(r"[a-z]{1,4}", fullmatch=True), st.integers(0, 3), max_size=2),
)
NOT_STR = st.one_of(st.integers(-(10**30), 10**30), WRONG_TYPES)


def bad_string(kind: str, meta: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A string (or a value of another type) that a string field of ``kind`` refuses."""
    single = kind in SINGLE_LINE_KINDS
    limit = meta.get("max_len", MAX_LINE_CHARS if single else MAX_TEXT_CHARS)
    options = [
        NOT_STR,
        st.just(""),
        text_with(CONTROL if single else ["\x00"]),
        st.integers(1, 40).map(lambda n, limit=limit: "a" * (limit + n)),
    ]
    if kind == "module":
        options.append(st.from_regex(r"[0-9 .$;-][a-z0-9 .;]{0,8}", fullmatch=True))
    if kind in ("path", "pathlist") or meta.get("noopt"):
        options.append(st.from_regex(r"-[a-z-]{0,8}", fullmatch=True))
    if kind == "outdir":
        options.append(text_with(["\\", "$", ":"]))
    return st.one_of(*options)


def bad_value(kind: str, meta: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the field of ``kind`` refuses, whatever else the spec holds."""
    if kind in ("posint", "nonnegint", "port"):
        low = {"posint": 1, "nonnegint": 0, "port": 1024}[kind]
        high = 65535 if kind == "port" else meta["max"]
        return st.one_of(
            st.integers(max_value=low - 1, min_value=-(10**30)),
            st.integers(min_value=high + 1, max_value=10**30),
            st.text(max_size=8),
            WRONG_TYPES,
        )
    if kind == "bool":
        return st.one_of(st.integers(), st.text(max_size=8), st.floats(), st.lists(st.booleans()))
    if kind == "time":
        return st.one_of(
            st.integers(-(10**9), 0),
            st.sampled_from(["", " ", "1:2:3:4", "-1", "1-", "x", "00:00:00", "0", "1:60:00"]),
            st.sampled_from(["1-24", "10:61", "1.5", "1-1-1", "::", "1:-1"]),
            not_a_number(),
            WRONG_TYPES,
        )
    if kind == "memory":
        return st.one_of(
            st.integers(-(10**9), 0),
            st.sampled_from(["", "0G", "-1G", "1X", "G", "1.2.3G", "0.0001K", "1 GG"]),
            text_with(list("acdfhjlnopqrsuvwxyz?!")),
            WRONG_TYPES,
        )
    if kind in ("text", "line", "path", "outdir", "module"):
        return bad_string(kind, meta)
    if kind in ("textlist", "linelist", "pathlist"):
        element = {"textlist": "text", "linelist": "line", "pathlist": "path"}[kind]
        return st.one_of(
            st.text(max_size=8),
            st.integers(),
            st.lists(st.one_of(st.integers(), st.booleans(), st.floats()), min_size=1, max_size=3),
            st.lists(
                bad_string(element, meta).filter(lambda v: isinstance(v, str) and v),
                min_size=1,
                max_size=3,
            ),
            st.integers(1, 3).map(lambda n: ["x"] * (4096 + n)),
        )
    if kind == "envdict":
        return st.one_of(
            st.text(max_size=8),
            st.lists(st.text(max_size=3), min_size=1, max_size=2),
            st.integers(),
            st.builds(
                lambda k: {k: "v"}, st.from_regex(r"[0-9 .$-][A-Za-z0-9 .;-]{0,6}", fullmatch=True)
            ),
            st.builds(lambda v: {"NAME": v}, st.one_of(st.booleans(), st.lists(st.integers()))),
            st.builds(lambda v: {"NAME": v}, text_with(["\x00"])),
        )
    if kind == "jobids":
        return st.one_of(
            st.text(max_size=8),
            st.integers(),
            st.lists(
                st.sampled_from(["", "x", "1;2", "$(id)", "-1", "1 2", "local-", "1\n#$ -x"]),
                min_size=1,
                max_size=2,
            ),
        )
    if kind == "sshhost":  # what ssh could read as an option, a shell word, more than a host
        return st.one_of(
            st.sampled_from(["-oProxyCommand=x", "a b", "x;y", "@h", "", "h:22", "a@b@c"]),
            text_with(CONTROL),
            NOT_STR,
        )
    if kind in ("choice", "scheduler", "launcher", "requeue_method"):
        choices = {
            "scheduler": SCHEDULER_CHOICES,
            "launcher": launcher_names(),
            "requeue_method": requeue_methods(),
        }.get(kind, meta.get("choices", ()))
        return st.one_of(st.text(max_size=10).filter(lambda v: v not in choices), NOT_STR)
    if kind == "table":
        return st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2))
    if kind == "placement":  # neither auto nor none nor CPU lists
        return st.one_of(st.sampled_from(["", "0-x", "3-1", "0;;1", "all", "1\n2"]), NOT_STR)
    if kind == "container_runtime":
        return st.one_of(st.text(max_size=10).filter(lambda v: v not in runtime_names()), NOT_STR)
    raise AssertionError(kind)


def table_of(data: dict[str, Any], dotted: str) -> tuple[dict[str, Any], str]:
    """The table holding ``dotted`` in ``data`` and the field's key in it."""
    *parents, key = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    return node, key


@st.composite
def spec_with_one_bad_field(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """BASE_SPEC with one field given a bad value, or one unknown key added: (data, name)."""
    data = copy.deepcopy(BASE_SPEC)
    dotted, kind, meta = draw(st.sampled_from(FIELDS))
    if dotted in ("program.script", "program.command"):
        del data["program"]["module"]  # one program only
    table, key = table_of(data, dotted)
    if draw(st.integers(0, 9)) == 0:  # an unknown key beside the field
        known = {f.rsplit(".", 1)[-1] for f, _, _ in FIELDS}
        key = draw(
            st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(lambda k: k not in known)
        )
        table[key] = draw(st.one_of(st.integers(), st.text(max_size=4)))
        return data, f"{dotted.rsplit('.', 1)[0]}.{key}" if "." in dotted else key
    table[key] = draw(bad_value(kind, meta))
    return data, dotted


@WIDE
@given(case=spec_with_one_bad_field(), scheduler=st.sampled_from(SCHEDULERS))
def test_a_bad_spec_field_is_one_spec_error_naming_it_and_nothing_is_written(
    case, scheduler, tmp_path_factory
):
    data, dotted = case
    work = tmp_path_factory.mktemp("spec")
    if isinstance(data["resources"], dict) and dotted != "resources.output_dir":
        data["resources"]["output_dir"] = str(work / "out")
    spec_file = write_spec(work / "job.toml", data)
    with pytest.raises(SpecError) as raised:
        spec = load_spec_file(spec_file)
        api.render(spec, scheduler)  # not reached: the spec is refused first
    line = one_line(str(raised.value))
    assert line.startswith(f"{spec_file}: ") and dotted in line, (dotted, line)
    assert listing(work) == ["job.toml"]


HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "x; touch {marker}",
    "' ; touch {marker}; '",
    '" ; touch {marker}; "',
    "x && touch {marker} #",
    "#SBATCH --wrap='touch {marker}'",
    "#$ -S /bin/sh -b y touch {marker}",
    "#PBS -l select=1 #BSUB -J x #flux: --x",
    "$HOME ${{PATH}} * ? %j %x \\",
]
MULTILINE = ["x\ntouch {marker}", "x\n#SBATCH --wrap=touch {marker}\n", "x\r\n#$ -S /bin/sh\n"]
STRING_KINDS = {"text", "textlist", "envdict", *SINGLE_LINE_KINDS}
STRING_FIELDS = [(dotted, kind) for dotted, kind, _ in FIELDS if kind in STRING_KINDS]


@WIDE
@given(
    field=st.sampled_from(STRING_FIELDS),
    hostile=st.sampled_from(HOSTILE + MULTILINE),
    around=st.tuples(st.text(max_size=4), st.text(max_size=4)),
    scheduler=st.sampled_from(SCHEDULERS),
)
def test_hostile_values_are_refused_or_rendered_inert(
    field, hostile, around, scheduler, tmp_path_factory
):
    """Shell and directive syntax in any string field: refused on one line naming the field,
    or rendered (quoted); either way nothing runs and nothing is written."""
    dotted, kind = field
    work = tmp_path_factory.mktemp("hostile")
    marker = work / "MARKER"
    value = around[0] + hostile.format(marker=marker) + around[1]
    data: dict[str, Any] = {"resources": {"output_dir": str(work / "out")}}
    if dotted.startswith("environment.container.") and dotted != "environment.container.image":
        data["environment"] = {"container": {"image": "img.sif"}}
    table, key = table_of(data, dotted)
    if kind.endswith("list"):
        value = [value]
    elif kind == "envdict":
        value = {"HOSTILE": value}
    table[key] = value
    spec_file = write_spec(work / "job.toml", data)
    try:
        spec = load_spec_file(spec_file)
        text = api.render(spec, scheduler)
    except (SpecError, RenderError) as err:
        event(f"refused: {type(err).__name__}")
        one_line(str(err))
    else:
        event("rendered")
        assert text.startswith("#!")
    assert not marker.exists()
    assert listing(work) == ["job.toml"]


def test_an_integer_too_long_for_python_is_a_spec_error(tmp_path):
    """tomllib raises ValueError (not TOMLDecodeError) for an integer of more than 4300 digits."""
    spec_file = tmp_path / "job.toml"
    spec_file.write_text(f"[resources]\nnodes = {'9' * 5000}\n")
    with pytest.raises(SpecError, match=r"job.toml: not valid TOML") as raised:
        load_spec_file(spec_file)
    one_line(str(raised.value))


def test_a_trainer_config_with_such_an_integer_is_a_spec_error(tmp_path):
    (tmp_path / "train.toml").write_text(f"epochs = {'9' * 5000}\n")
    spec_file = tmp_path / "job.toml"
    spec_file.write_text(f'[program]\nconfig = "{tmp_path / "train.toml"}"\n')
    with pytest.raises(SpecError, match=r"program.config: .*not valid TOML") as raised:
        load_spec_file(spec_file)
    one_line(str(raised.value))


# ---- command-line flags of submit/render ---------------------------------------------------------
def count_flag(low: int, high: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-(10**6), low - 1).map(str),
        st.integers(high + 1, 10**12).map(str),
        not_a_number(),
        st.just(""),
    )


def line_flag() -> st.SearchStrategy[str]:
    return text_with(CONTROL)


JOB_FLAGS: dict[str, tuple[st.SearchStrategy[str], tuple[str, ...]]] = {
    # flag: (bad values, what the error line may name it by)
    "--nodes": (count_flag(1, 100_000), ("--nodes",)),
    "--gpus-per-node": (count_flag(0, 64), ("--gpus-per-node",)),
    "--tasks-per-node": (count_flag(1, 1024), ("--tasks-per-node",)),
    "--cpus-per-task": (count_flag(1, 8192), ("--cpus-per-task",)),
    "--mem": (st.sampled_from(["", "0", "-1G", "1X", "G", "1.2.3G", "lots"]), ("--mem",)),
    "--time": (st.sampled_from(["", "0", "-5", "1:60:00", "1-24", "soon", "1:2:3:4"]), ("--time",)),
    "--partition": (line_flag(), ("--partition",)),
    "--account": (line_flag(), ("--account",)),
    "--qos": (line_flag(), ("--qos",)),
    "--constraint": (line_flag(), ("--constraint",)),
    "--job-name": (st.one_of(line_flag(), st.just("j" * (MAX_NAME_CHARS + 1))), ("--job-name",)),
    "--output-dir": (st.one_of(line_flag(), text_with(["\\", "$", ":"])), ("--output-dir",)),
    "--load": (st.one_of(line_flag(), st.from_regex(r"-[a-z]{0,5}", fullmatch=True)), ("--load",)),
    "--venv": (st.one_of(line_flag(), st.just("-x"), st.just("~~/v")), ("--venv",)),
    "--conda-env": (st.one_of(line_flag(), st.just("-n")), ("--conda-env",)),
    "--container": (st.one_of(line_flag(), st.just("--x")), ("--container",)),
    # an ssh option, a space, a shell word: never a host ssh could read as anything else
    "--host": (
        st.one_of(line_flag(), st.sampled_from(["-oProxyCommand=x", "a b", "x;y", "@h", ""])),
        ("--host",),
    ),
    "--remote-dir": (line_flag(), ("--remote-dir",)),
    # an unknown runtime, a bad line, or a runtime without its image
    "--container-runtime": (
        st.one_of(line_flag(), st.sampled_from(["docker", "Apptainer", "pyxis"])),
        ("--container-runtime", "environment.container"),
    ),
    "--bind": (st.one_of(line_flag(), st.just("-b")), ("--bind",)),
    "--env": (
        st.one_of(
            st.from_regex(r"[A-Z]{1,4}", fullmatch=True),
            st.from_regex(r"[0-9 .$-][A-Z0-9 .;]{0,4}=v", fullmatch=True),
            text_with(["\x00"]).map(lambda v: "NAME=" + v),
        ),
        ("--env",),
    ),
    "--setup": (text_with(["\x00"]), ("--setup",)),
    "--launcher": (
        st.text(max_size=6).filter(lambda v: v not in ("torchrun", "mpiexec", "srun")),
        ("--launcher",),
    ),
    "--port": (count_flag(1024, 65535), ("--port",)),
    "--python": (st.one_of(line_flag(), st.just("-c")), ("--python",)),
    "--module": (st.from_regex(r"[0-9 .$;-][a-z0-9 .;]{0,8}", fullmatch=True), ("--module",)),
    "--script": (st.one_of(line_flag(), st.just("-c")), ("--script",)),
    "--program": (
        st.one_of(st.just(""), st.just("a 'b"), st.just('x "y'), text_with(["\x00"])),
        ("--program", "program.command"),
    ),
    "--directive": (line_flag(), ("--directive",)),
    "--after": (
        st.one_of(line_flag(), st.sampled_from(["", "x1", "-1", "1;2", "$(id)", "1 2", "local-"])),
        ("--after", "scheduler.after"),
    ),
    "--pbs-resources": (
        st.text(max_size=6).filter(lambda v: v not in ("select", "nodes")),
        ("--pbs-resources",),
    ),
    "--scheduler": (
        st.text(max_size=6).filter(lambda v: v not in SCHEDULERS + ("auto",)),
        ("--scheduler",),
    ),
    "--template-dir": (
        st.from_regex(r"no-such-[a-z]{1,6}", fullmatch=True),
        ("template directory",),
    ),
    "--exclusive": (st.sampled_from(["yes", "1", ""]), ("--exclusive",)),
    "--smoke": (st.sampled_from(["yes", "1", ""]), ("--smoke",)),
    "--requeue": (st.sampled_from(["yes", "1", ""]), ("--requeue",)),
    "--preflight": (st.sampled_from(["yes", "1", ""]), ("--preflight",)),
    "--preflight-args": (
        st.sampled_from(["--steps nope", "--step-timeout x", "'open", "--bogus 1", "--help"]),
        ("--preflight-args", "launcher.doctor_args"),
    ),
    "--placement": (
        st.sampled_from(["", "0-x", "3-1", ";", "0;;1", "all", "1\n#SBATCH -x"]),
        ("--placement", "launcher.placement"),
    ),
    "--max-requeues": (count_flag(0, 1000), ("--max-requeues",)),
    "--signal-lead": (
        st.sampled_from(["", "0", "-5", "soon", "1:60:00", "1-24"]),
        ("--signal-lead",),
    ),
    # no profile files here (tests/conftest.py): every name is one that does not exist
    "--profile": (st.text(min_size=1, max_size=10), ("profile",)),
}


def test_every_flag_of_render_and_submit_is_swept():
    from hpcbench.cli.options import job_options as _job_options

    flags = {
        next(o for o in a.option_strings if o.startswith("--"))
        for a in _job_options()._actions
        if a.option_strings
    }
    assert flags - set(JOB_FLAGS) == set(), "give each new flag bad values in JOB_FLAGS"


@WIDE
@given(
    action=st.sampled_from([["render"], ["submit", "--dry-run"]]),
    case=flag_and_value(JOB_FLAGS),
    scheduler=st.sampled_from(SCHEDULERS),
)
def test_a_bad_flag_of_render_and_submit_exits_2_with_one_line(
    action, case, scheduler, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    tmp_path = fresh(tmp_path, monkeypatch)
    monkeypatch.delenv("HPCBENCH_TEMPLATE_DIR", raising=False)
    before = listing(tmp_path)
    flag, value = case
    names = JOB_FLAGS[flag][1]
    argv = [*action, f"{flag}={value}"]
    if flag != "--scheduler":
        argv += ["--scheduler", scheduler]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (argv, out, err)
    line = error_line(err)
    assert any(name in line for name in names), (argv, line)
    assert out == "" and listing(tmp_path) == before


@SWEEP
@given(
    what=st.sampled_from(["missing", "directory", "not toml", "program args"]),
    content=st.binary(max_size=40),
)
def test_a_bad_spec_file_or_program_argument_exits_2_with_one_line(
    what, content, tmp_path, monkeypatch, capsys
):
    tmp_path = fresh(tmp_path, monkeypatch)
    (tmp_path / "adir").mkdir()
    (tmp_path / "bad.toml").write_bytes(content + b"\n= 1\n")
    argv = {
        "missing": ["render", "nothere.toml"],
        "directory": ["render", "adir"],
        "not toml": ["render", "bad.toml"],
        "program args": ["render", "--", "--epochs", content.decode("latin-1") + "\x00"],
    }[what]
    before = listing(tmp_path)
    code, out, err = run_cli([*argv[:1], "--scheduler", "slurm", *argv[1:]], capsys)
    assert code == 2, (argv, out, err)
    line = error_line(err)
    name = {"program args": "-- ARGS"}.get(what, argv[1])
    assert name in line, line
    assert out == "" and listing(tmp_path) == before


# ---- status, logs, cancel ------------------------------------------------------------------------
@SWEEP
@given(
    action=st.sampled_from(["status", "logs", "cancel"]),
    job_id=text_with([";", " ", "/", "$", "\n", "`", "*", "'", "..", "\x00"]),
    scheduler=st.sampled_from([None, *SCHEDULERS]),
)
def test_a_bad_job_id_exits_2_with_one_line_and_reaches_no_scheduler(
    action, job_id, scheduler, tmp_path, monkeypatch, capsys
):
    from hpcbench.jobs.schedulers import SCHEDULER_CLASSES

    assert not any(cls.id_pattern.fullmatch(job_id) for cls in SCHEDULER_CLASSES.values())
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", "/nonexistent")  # were a scheduler's command reached, it fails
    work = fresh(tmp_path, monkeypatch)
    job_id = "j" + job_id if job_id.startswith("-") else job_id  # else read as an option
    argv = [action, *(["--scheduler", scheduler] if scheduler else []), job_id]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (argv, out, err)
    assert "job id" in error_line(err), err
    assert out == "" and listing(work) == []


# ---- hpcbench prep --------------------------------------------------------------------------------
PREP_BASE = ["--samples=30", "--classes=3", "--size=8x8", "-q", "--workers=1"]
PREP_FLAGS: dict[str, st.SearchStrategy[str]] = {
    "--size": st.one_of(
        st.sampled_from(["0", "0x5", "5x0", "-1x4", "1x2x3", "x", "", "nan", "8xinf"]),
        not_a_number(),
    ),
    "--split": st.one_of(
        st.sampled_from(["", "0", "0/1/1", "1/-1/1", "1/1/1/1", "nan/1/1", "1/inf", "1e400/1"]),
        st.sampled_from(["inf", "1/nan", "-inf/1", "1e308/1e308", "85//13", "a/b"]),
        not_a_number(),
    ),
    "--shard-size": st.one_of(
        st.sampled_from(["", "0", "-1", "-64MB", "nan", "inf", "-inf", "1e400", "infMB", "MB"]),
        not_a_number(),
    ),
    "--shard-samples": st.one_of(st.integers(-5, 0).map(str), not_a_number()),
    "--limit": st.one_of(st.integers(-5, 0).map(str), not_a_number()),
    "--per-class": st.one_of(st.integers(-5, 0).map(str), not_a_number()),
    "--workers": st.one_of(st.integers(-5, 0).map(str), not_a_number()),
    "--seed": st.one_of(st.integers(-(10**20), -1).map(str), not_a_number()),
    "--samples": st.one_of(st.integers(-(10**6), 2).map(str), not_a_number()),
    "--classes": st.one_of(st.sampled_from(["-1", "0", "1", "17", "1000"]), not_a_number()),
    "--dtype": st.text(max_size=8).filter(lambda v: v not in ("uint8", "float16")),
}


@SWEEP
@given(case=flag_and_value(PREP_FLAGS))
@example(case=("--split", "nan/1/1"))  # were tracebacks (float NaN to integer)
@example(case=("--split", "1e308/1e308"))
@example(case=("--shard-size", "nan"))
@example(case=("--shard-size", "inf"))
def test_a_bad_flag_of_prep_exits_2_with_one_line_and_leaves_nothing(
    case, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("h5py")
    tmp_path = fresh(tmp_path, monkeypatch)
    flag, value = case
    argv = ["prep", "synthetic", "out", *PREP_BASE, f"{flag}={value}"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (argv, out, err)
    assert flag in error_line(err), (argv, err)
    assert listing(tmp_path) == []


@SWEEP
@given(
    source=st.sampled_from(["folder", "json", "csv", "arrays", "verify", "info"]),
    what=st.sampled_from(["missing", "a file", "empty dir", "garbage"]),
    content=st.binary(max_size=30),
)
@example(source="arrays", what="a file", content=b"")  # was a traceback (EOFError)
def test_a_bad_prep_source_exits_2_with_one_line_naming_it(
    source, what, content, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("h5py")
    tmp_path = fresh(tmp_path, monkeypatch)
    path = {
        "missing": "nothere",
        "a file": "afile",
        "empty dir": "adir",
        "garbage": "g/manifest.json",
    }[what]
    (tmp_path / "afile").write_bytes(content)
    (tmp_path / "adir").mkdir()
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "manifest.json").write_bytes(b"\xff" + content)
    if what == "garbage" and source in ("verify", "info"):
        path = "g"
    before = listing(tmp_path)
    argv = {
        "verify": ["prep", "verify", path],
        "info": ["prep", "info", path],
        "arrays": ["prep", "arrays", path, path, "out", "-q"],
    }.get(source, ["prep", source, path, "out", "--size=8x8", "-q"])
    code, out, err = run_cli(argv, capsys)
    assert code == (1 if source == "verify" else 2), (argv, out, err)
    assert path in error_line(err), (argv, err)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_listing_of_only_unreadable_images_is_one_line(workers, tmp_path, monkeypatch, capsys):
    """A shard whose images were all skipped used to end the conversion with a traceback."""
    pytest.importorskip("h5py")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.csv").write_text("".join(f"gone{i}.png,{i % 2}\n" for i in range(8)))
    argv = ["prep", "csv", "list.csv", "out", "--size=8x8", "-q", f"--workers={workers}"]
    code, _, err = run_cli([*argv, "--shard-samples=2"], capsys)
    assert code == 2
    assert "no readable training images" in error_line(err)
    assert listing(tmp_path) == ["list.csv"]


def test_a_dataset_too_large_for_memory_is_one_line(tmp_path, monkeypatch, capsys):
    """8 PB of labels can be allocated nowhere: MemoryError, said in one line, nothing left."""
    pytest.importorskip("h5py")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["prep", "synthetic", "out", "-q", f"--samples={10**15}"], capsys)
    assert code == 1
    assert "memory" in error_line(err)
    assert listing(tmp_path) == []


# ---- hpcbench bench / report / compare --------------------------------------------------------------
BENCH_FLAGS: dict[str, tuple[st.SearchStrategy[str], tuple[str, ...]]] = {
    "--configs": (
        st.one_of(
            st.sampled_from(["", ",", "single,", "horovod", "ddp:0", "ddp:2x0", "ddp:2@tpu"]),
            st.sampled_from(["single:2", "dp:2x2", "ddp:2000", "ddp:2x5000", "mpi:-1"]),
            st.integers(4301, 4400).map(lambda n: "ddp:" + "9" * n),
            st.from_regex(r"[A-Z0-9:@x, ]{1,12}", fullmatch=True),
        ),
        ("--configs", "config"),
    ),
    "--repetitions": (count_flag(1, 1000), ("--repetitions", "repetitions")),
    "--energy-repetitions": (count_flag(0, 1000), ("--energy-repetitions", "energy_repetitions")),
    "--cooldown": (
        st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "86401", "1e400"]), not_a_number()),
        ("--cooldown", "cooldown"),
    ),
    "--name": (
        st.one_of(
            st.from_regex(r"[._/ -][a-z/]{0,5}", fullmatch=True),
            st.just("n" * 65),
            line_flag(),
        ),
        ("--name", "name"),
    ),
    "--job": (text_with(["\n", "\r", "\x00"]), ("--job", "job")),
    "--host": JOB_FLAGS["--host"],
    "--remote-dir": JOB_FLAGS["--remote-dir"],
    "--scheduler": (
        st.text(max_size=6).filter(lambda v: v not in SCHEDULERS + ("auto",)),
        ("--scheduler",),
    ),
}


@SWEEP
@given(case=flag_and_value(BENCH_FLAGS))
@example(case=("--configs", "ddp:" + "9" * 4301))  # was exit 1, a message naming nothing
def test_a_bad_flag_of_bench_exits_2_with_one_line_and_runs_nothing(
    case, tmp_path, monkeypatch, capsys
):
    tmp_path = fresh(tmp_path, monkeypatch)
    flag, value = case
    names = BENCH_FLAGS[flag][1]
    argv = ["bench", "--plan", "--configs=single", f"{flag}={value}"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (argv, out, err)
    line = error_line(err)
    assert any(name in line for name in names), (argv, line)
    assert out == "" and listing(tmp_path) == []


@SWEEP
@given(
    content=st.one_of(
        st.binary(max_size=60),
        st.builds(
            lambda k, v: f"{k} = {toml_value(v)}\n[[config]]\nname = 'a'\nstrategy = 'single'\n",
            st.sampled_from(["name", "repetitions", "energy_repetitions", "cooldown", "job"]),
            NOT_STR | st.text(max_size=5),
        ),
        st.builds(
            lambda k, v: f"[[config]]\nname = 'a'\nstrategy = 'single'\n{k} = {toml_value(v)}\n",
            st.sampled_from(["name", "strategy", "device", "nodes", "ranks_per_node", "launcher"]),
            NOT_STR | st.text(max_size=5),
        ),
        st.integers(4301, 4400).map(lambda n: f"repetitions = {'9' * n}\n"),
    ),
    trainer_args=st.sampled_from([[], ["--", "--strategy", "ddp"], ["--", "--output-dir=x"]]),
)
@example(content=f"repetitions = {'9' * 4301}\n", trainer_args=[])  # was exit 1
def test_a_bad_matrix_file_exits_2_with_one_line_naming_it(
    content, trainer_args, tmp_path, monkeypatch, capsys
):
    tmp_path = fresh(tmp_path, monkeypatch)
    matrix = tmp_path / "m.toml"
    matrix.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = run_cli(["bench", "--plan", "m.toml", *trainer_args], capsys)
    if code == 0:  # the random content happened to be a valid matrix
        assert not trainer_args and out.startswith("1\t")
        return
    assert code == 2, (content, out, err)
    assert "m.toml" in error_line(err)
    assert listing(tmp_path) == ["m.toml"]


@SWEEP
@given(
    action=st.sampled_from(["report", "compare"]),
    what=st.sampled_from(["missing", "a file", "empty dir", "bad bench.json"]),
    content=st.one_of(
        st.binary(max_size=40),
        st.sampled_from([b"[" * 100_000, b'{"format": ' + b"9" * 5000 + b"}", b"\xff{}"]),
    ),
)
@example(action="report", what="bad bench.json", content=b"\x80")  # were exit 1 or a traceback
@example(action="report", what="bad bench.json", content=b"[" * 100_000)
@example(action="compare", what="bad bench.json", content=b'{"format": ' + b"9" * 5000 + b"}")
def test_a_bad_results_directory_exits_2_with_one_line_naming_it(
    action, what, content, tmp_path, monkeypatch, capsys
):
    tmp_path = fresh(tmp_path, monkeypatch)
    (tmp_path / "afile").write_bytes(content)
    (tmp_path / "adir").mkdir()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "bench.json").write_bytes(content)
    path = {"missing": "nothere", "a file": "afile", "empty dir": "adir", "bad bench.json": "r"}[
        what
    ]
    before = listing(tmp_path)
    argv = [action, path] if action == "report" else [action, path, path]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (argv, out, err)
    assert path in error_line(err)
    assert listing(tmp_path) == before


# ---- trainer options --------------------------------------------------------------------------------
def bad_float(low: float, high: float, low_open: bool, high_open: bool) -> st.SearchStrategy[str]:
    below = st.floats(max_value=low, exclude_max=not low_open, allow_nan=False)
    above = st.floats(min_value=high, exclude_min=not high_open, allow_nan=False)
    return st.one_of(
        below.map(repr),
        above.map(repr),
        st.sampled_from(["nan", "inf", "-inf", "1e400"]),
        not_a_number(),
    )


TRAIN_FLAGS: dict[str, st.SearchStrategy[str]] = {
    **{
        f: st.one_of(st.integers(-(10**6), 0).map(str), not_a_number(), st.just("1.5"))
        for f in (
            "--epochs",
            "--global-batch-size",
            "--batch-size-per-rank",
            "--eval-batch-size",
            "--lr-reference-batch",
            "--val-every",
            "--threads",
            "--max-steps",
            "--checkpoint-keep",
            "--resync-every",
        )
    },
    "--checkpoint-every": st.one_of(st.integers(-(10**6), -1).map(str), not_a_number()),
    "--seed": st.one_of(st.integers(-(10**6), -1).map(str), not_a_number()),
    "--lr": bad_float(0, 1e30, True, False),
    "--momentum": bad_float(0, 1, False, True),
    "--weight-decay": bad_float(0, 1e30, False, False),
    "--warmup-epochs": bad_float(0, 1e6, False, False),
    "--bucket-mb": bad_float(0, 1e6, True, False),
    "--energy-interval": bad_float(0.01, 60, False, False),
    "--hang-timeout": bad_float(0, 1e7, False, False),
    "--resume": st.sampled_from(["", " ", "\t"]),
    "--rank-weights": st.sampled_from(["0", "-1,2", "1,inf", "nan", "a,b", "1;2", "1,,x"]),
    "--model": st.sampled_from(
        ["", ":4", "small_cnn:", "small_cnn:1", "mlp:0", "rnn:x", "resnet18:4"]
    ),
    "--strategy": st.text(max_size=6).filter(lambda v: v not in STRATEGIES),
    "--optimizer": st.text(max_size=6).filter(lambda v: v not in ("sgd", "adamw")),
    "--schedule": st.text(max_size=6).filter(
        lambda v: v not in ("none", "cosine", "step", "onecycle")
    ),
    "--device": st.text(max_size=6).filter(lambda v: v not in ("auto", "cpu", "cuda")),
    "--data-order": st.text(max_size=6).filter(lambda v: v not in ("global", "shards")),
    "--lr-scaling": st.text(max_size=6).filter(lambda v: v not in ("none", "linear")),
    "--progress": st.sampled_from(["always", "", "BAR"]),
    "--energy": st.sampled_from(["yes", "1", "", "ON"]),
    "--overlap": st.sampled_from(["yes", "1", ""]),
    "--sync-bn": st.sampled_from(["no", "0"]),
    "--step-breakdown": st.sampled_from(["yes", "1", ""]),
    "--telemetry": st.sampled_from(["-1", "0.05", "3601", "nan", "inf", "x", ""]),
    "--trace-steps": st.sampled_from(["5:2", "a:b", "3", "-1:2", "0:200", ":", " "]),
    "--precision": st.sampled_from(["fp64", "FP16", "half", ""]),
    "--grad-compression": st.sampled_from(["fp8", "BF16", "yes", ""]),
    "--error-feedback": st.sampled_from(["no", "1"]),
    "--prefetch": st.sampled_from(["-1", "two", "1.5", ""]),
    "--cuda-aware-mpi": st.sampled_from(["yes", "1", "", "ON"]),
    "--channels-last": st.sampled_from(["yes", "1", ""]),
    "--deterministic": st.sampled_from(["yes", "1", ""]),
    "--compile": st.sampled_from(["on", "yes", "", "max_autotune", "DEFAULT"]),
    "--checkpoint": st.sampled_from(["no", "0", "yes"]),
    "--output": st.just("x"),  # not an abbreviation of --output-dir
    "--epoch": st.just("3"),
    "--config": st.from_regex(r"no-such-[a-z]{1,5}\.toml", fullmatch=True),
}


def test_every_trainer_option_is_swept():
    from hpcbench.train.config import OPTIONS, flag

    # paths, checked where they are read (--weights: tests/integration/test_trainer_inputs.py)
    free = {
        "--data",
        "--output-dir",
        "--stage-dir",
        "--tensorboard",
        "--checkpoint-dir",
        "--weights",
    }
    missing = {flag(f) for f in OPTIONS} - set(TRAIN_FLAGS) - free
    assert missing == set(), "give each new option bad values in TRAIN_FLAGS"


@WIDE
@given(case=flag_and_value(TRAIN_FLAGS))
def test_a_bad_trainer_option_is_one_line_naming_the_flag(case, monkeypatch, capsys):
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    flag, value = case
    capsys.readouterr()
    try:
        parse_args([f"{flag}={value}"])
    except SystemExit as exit_:
        assert exit_.code == 2
        line = error_line(capsys.readouterr().err)
    except ConfigError as err:
        line = one_line(str(err))
    else:
        raise AssertionError(f"{flag}={value!r} was accepted")
    assert flag in line, line


# ---- dataset manifests -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    need_module("h5py")
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    root = tmp_path_factory.mktemp("sweep") / "ds"
    options = ConvertOptions(
        size=(8, 8), grayscale=True, shard_samples=10, progress=False, workers=1
    )
    convert(synthetic(60, 3), root, options, use_mpi=False)
    return root


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
ESCAPES = [
    "../x.h5",
    "/etc/passwd",
    "a/../../x",
    "..",
    ".",
    "./train-00000.h5",
    "sub/x.h5",
    "",
    "x\n.h5",
]


def paths_in(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) to a value inside ``data``."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            found += paths_in(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found += paths_in(v, (*prefix, i))
    return found


def inside(path: Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


@SWEEP
@given(data=st.data())
def test_a_mutated_manifest_is_a_data_error_naming_it_or_stays_inside_the_dataset(dataset, data):
    from hpcbench.data.manifest import DataError, Manifest

    original = json.loads((dataset / "manifest.json").read_text())
    mutated = copy.deepcopy(original)
    how = data.draw(st.sampled_from(["replace", "delete", "shard file", "shard escape"]))
    shards = [(name, i) for name, s in mutated["splits"].items() for i in range(len(s["shards"]))]
    if how in ("shard file", "shard escape"):
        split, i = data.draw(st.sampled_from(shards))
        name = data.draw(
            st.sampled_from(ESCAPES)
            if how == "shard escape"
            else st.one_of(st.text(max_size=10), text_with(["/", "\\", "\x00", ".."]))
        )
        mutated["splits"][split]["shards"][i]["file"] = name
    else:
        path = data.draw(st.sampled_from(paths_in(mutated)))
        *parents, last = path
        node = mutated
        for part in parents:
            node = node[part]
        if how == "delete":
            del node[last]
        else:
            node[last] = data.draw(JSON)
    root = Path(os.path.realpath(dataset)).parent / "mutated"
    if not root.exists():
        shutil.copytree(dataset, root)
    (root / "manifest.json").write_text(json.dumps(mutated))
    try:
        manifest = Manifest.load(root)
    except DataError as err:
        event(f"{how}: refused")
        assert str(root) in one_line(str(err)), err
        return
    event(f"{how}: accepted")
    assert how != "shard escape", f"accepted the shard name {name!r}"
    for info in manifest.splits.values():
        for shard in info.shards:
            assert inside(manifest.shard_path(shard), root), shard.file


def test_a_shard_linked_to_a_file_outside_the_dataset_is_refused(dataset, tmp_path):
    """A link that leaves the directory would have the reader (and staging) open whatever file it
    points at; one to a file of the same size even passes the reader's size check."""
    from hpcbench.data.manifest import DataError, Manifest

    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    shard = sorted(root.glob("train-*.h5"))[0]
    outside = tmp_path / "elsewhere.h5"
    shard.rename(outside)
    shard.symlink_to(outside)
    with pytest.raises(DataError, match=rf"{re.escape(str(shard))}: .*outside") as raised:
        Manifest.load(root)
    one_line(str(raised.value))
    shard.unlink()
    shard.symlink_to(Path("..") / outside.name)  # relative, up and out
    with pytest.raises(DataError, match="outside"):
        Manifest.load(root)


def test_a_shard_linked_inside_the_dataset_is_accepted(dataset, tmp_path):
    from hpcbench.data.manifest import Manifest

    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    (root / "keep").mkdir()
    shard = sorted(root.glob("train-*.h5"))[0]
    shard.rename(root / "keep" / shard.name)
    shard.symlink_to(Path("keep") / shard.name)
    Manifest.load(root)
