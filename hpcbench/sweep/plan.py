"""A sweep file and its plan: which settings of which trainer options (or of any program's:
:mod:`.program`), how many repetitions.

A sweep is a TOML file (flags may change it, :func:`read_sweep`)::

    name = "batch-and-resolution"
    job = "jobs/reference-study/resnet34.toml"   # the job every task runs (or matrix = "...":
                                                 # that matrix's job and trainer_args)
    trainer_args = ["--epochs", "30"]            # options common to every task
    mode = "product"                             # product | zip | random
    draws = 8                                    # random: how many settings, drawn without
    seed = 0                                     #   repeats with this seed
    repetitions = 1                              # runs of each setting
    metric = "val_accuracy"                      # what ranks the settings (METRICS)
    max_parallel = 4                             # tasks running at once

    [axes]                                       # trainer options, named as in --config files
    global-batch-size = [72, 96, 128, 160, 192, 256]
    data = ["data/shapes-295x222", "data/shapes-148x112"]

Each setting, once per repetition, is one task of one array job; its run directory is named
after the setting (:attr:`Task.run`). Errors are one line naming the file and the key
(:class:`SweepError`). No torch here: this runs on a login node.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hpcbench.jobs.spec import MAX_ARRAY_TASKS
from hpcbench.jsonfile import JSONObject, JSONValue
from hpcbench.sweep import program as any_program
from hpcbench.sweep.documents import AxisValue, ProgramTable, Setting, SweepRecord, TaskRecord
from hpcbench.sweep.errors import SweepError, fail
from hpcbench.tomlfile import TomlFileError, parse_toml, read_toml_file
from hpcbench.train.config import ConfigError
from hpcbench.train.config_file import check_options

MODES = ("product", "zip", "random")
MAX_SWEEP_BYTES = 1 << 20
#: what can rank the settings: (what it is, higher is better, unit)
METRICS: dict[str, tuple[str, bool, str]] = {
    "val_accuracy": ("final validation accuracy", True, ""),
    "test_accuracy": ("test accuracy", True, ""),
    "val_loss": ("final validation loss", False, ""),
    "train_s": ("training time", False, "s"),
    "total_s": ("time to result (set-up, training, validation and test)", False, "s"),
    "samples_per_s": ("training throughput", True, "samples/s"),
}
#: options a task may not vary: the run directory is the task's own
RESERVED_AXES = ("output-dir", "output_dir", "checkpoint-dir", "checkpoint_dir")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_RUN_NAME = 120
# What a task's run directory is called: run_name's characters, ``=`` and ``,``, and the repetition
# (",rep=2"): one name under runs/, never a path (sweep.json is read back as data).
RUN_NAME = re.compile(r"[A-Za-z0-9._+=,-]{1,200}")
KNOWN_KEYS = {
    "name", "job", "matrix", "trainer_args", "mode", "draws", "seed", "repetitions", "metric",
    "max_parallel", "axes", "program", "program_args",
}  # fmt: skip


@dataclass(frozen=True)
class Task:
    """One run of one setting: the ``index``-th task of the plan (from 1)."""

    index: int
    setting: Setting
    rep: int
    run: str

    def to_dict(self) -> TaskRecord:
        return {"index": self.index, "setting": self.setting, "rep": self.rep, "run": self.run}


@dataclass
class Sweep:
    """The whole search: axes combined by ``mode``, each setting ``repetitions`` times."""

    name: str
    axes: dict[str, list[AxisValue]]
    job: str | None = None
    trainer_args: list[str] = field(default_factory=list)
    mode: str = "product"
    draws: int | None = None
    seed: int = 0
    repetitions: int = 1
    metric: str = "val_accuracy"
    max_parallel: int | None = None
    smoke: bool = False
    source: str | None = None
    #: the program every task runs and its arguments (:mod:`.program`); None: the trainer
    program: ProgramTable | None = None
    program_args: list[str] = field(default_factory=list)

    def task_arguments(self, setting: Setting) -> list[str]:
        """``program_args`` with each ``{axis}`` replaced by the setting's value."""
        return [any_program.fill(arg, setting) for arg in self.program_args]

    def settings(self) -> list[Setting]:
        """Every setting, in plan order: each a dict of axis -> value."""
        keys = list(self.axes)
        lists = [self.axes[k] for k in keys]
        if not keys:
            return [{}]
        if self.mode == "zip":
            return [dict(zip(keys, values, strict=True)) for values in zip(*lists, strict=True)]
        if self.mode == "product":
            return [dict(zip(keys, values, strict=True)) for values in itertools.product(*lists)]
        total = math.prod(len(v) for v in lists)
        chosen = _draw(random.Random(self.seed), total, min(self.draws or 1, total))
        out = []
        for number in chosen:  # the number as digits of the axes' lengths, the last fastest
            values = []
            for values_of in reversed(lists):
                number, digit = divmod(number, len(values_of))
                values.append(values_of[digit])
            out.append(dict(zip(keys, reversed(values), strict=True)))
        return out

    def tasks(self) -> list[Task]:
        """Every task: each setting once per repetition (repetitions of one setting apart, so
        that a machine slowing down meanwhile slows every setting alike)."""
        settings = self.settings()
        names = [run_name(s) for s in settings]
        for i, name in enumerate(names):
            if names.count(name) > 1:  # two values alike once made safe for a file name
                names[i] = f"{name},n={i + 1}"
        tasks = []
        for rep in range(1, self.repetitions + 1):
            for setting, name in zip(settings, names, strict=True):
                run = name if self.repetitions == 1 else f"{name},rep={rep}"
                tasks.append(Task(len(tasks) + 1, setting, rep, run))
        return tasks

    def to_dict(self) -> SweepRecord:
        """As recorded in sweep.json (what a continued sweep must still be)."""
        return {
            "name": self.name,
            "job": self.job,
            "trainer_args": list(self.trainer_args),
            "mode": self.mode,
            "draws": self.draws,
            "seed": self.seed,
            "repetitions": self.repetitions,
            "metric": self.metric,
            "axes": {k: list(v) for k, v in self.axes.items()},
            "smoke": self.smoke,
            "program": self.program,
            "program_args": list(self.program_args),
        }


def _draw(rng: random.Random, total: int, k: int) -> list[int]:
    """``k`` distinct numbers below ``total``: random.sample's draws where it can count the
    population (every earlier sweep's), else one by one, a repeat drawn again (past 2^63
    settings, at most 10,000 draws: a repeat is all but impossible)."""
    if total <= sys.maxsize:
        return rng.sample(range(total), k)
    chosen: dict[int, None] = {}
    while len(chosen) < k:
        chosen.setdefault(rng.randrange(total))
    return list(chosen)


def run_name(setting: Setting) -> str:
    """A directory name that says the setting: ``global-batch-size=128,data=shapes-148x112``
    (a path by its last part; characters outside ``A-Za-z0-9._+-`` become ``_``; a long one
    shortened with a hash of the whole)."""
    if not setting:
        return "default"
    parts = []
    for key, value in setting.items():
        text = any_program.value_text(value)
        if isinstance(value, str) and "/" in value.rstrip("/"):
            text = value.rstrip("/").rsplit("/", 1)[1]
        parts.append(f"{_UNSAFE.sub('_', key)}={_UNSAFE.sub('_', text).strip('_') or '_'}")
    name = ",".join(parts)
    if len(name) > MAX_RUN_NAME:
        digest = hashlib.sha256(repr(sorted(setting.items())).encode()).hexdigest()[:10]
        name = f"{name[: MAX_RUN_NAME - 11]}-{digest}"
    return name


# ---------------------------------------------------------------------------------- reading


def read_sweep_table(path: str | Path) -> JSONObject:
    """The TOML table of a sweep file, unchecked (flags may still change it)."""
    try:
        return read_toml_file(path, MAX_SWEEP_BYTES, "the sweep file", "a sweep")
    except TomlFileError as err:
        raise SweepError(str(err)) from None


def smoke_form(table: JSONObject, where: str) -> JSONObject:
    """The sweep's ``[smoke]`` form: its keys over the rest (``axes`` replaced whole)."""
    overlay = table.get("smoke")
    if overlay is None:
        raise fail(where, "smoke", "--smoke: this sweep has no [smoke] table")
    if not isinstance(overlay, dict) or "smoke" in overlay:
        raise fail(where, "smoke", "expected a table of the sweep's keys (and no [smoke.smoke])")
    return {**{k: v for k, v in table.items() if k != "smoke"}, **overlay}


def parse_axis(text: str) -> tuple[str, list[AxisValue]]:
    """``--axis lr=0.01,0.05,0.1`` -> ("lr", [0.01, 0.05, 0.1]): each value as TOML reads it
    (numbers, true/false), else as text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # a byte the shell passed that is not UTF-8
        raise SweepError(
            f"--axis {ascii(text)[1:-1]!r}: not UTF-8 text (character {err.start + 1}); give "
            "option names and values in UTF-8"
        ) from None
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values.strip():
        raise SweepError(f"--axis {text!r}: expected OPTION=VALUE,VALUE,… e.g. lr=0.01,0.05")
    out: list[AxisValue] = []
    for item in values.split(","):
        item = item.strip()
        try:
            out.append(parse_toml(f"v = {item}", "--axis")["v"])
        except TomlFileError:
            out.append(item)
    return key.strip(), out


def _int(
    table: JSONObject, key: str, where: str, default: int | None, low: int, high: int
) -> int | None:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(where, key, f"expected a whole number from {low} to {high}, got {value!r}")
    return value


def _text(table: JSONObject, key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or any(c in value for c in "\n\r\0")):
        raise fail(where, key, f"expected one line of text, got {value!r}")
    return value


def _axes(raw: JSONValue, where: str, trainer: bool = True) -> dict[str, list[AxisValue]]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise fail(where, "axes", "expected a table of option = [values]")
    axes: dict[str, list[AxisValue]] = {}
    for key, values in raw.items():
        if key in RESERVED_AXES:
            raise fail(
                where, f"axes.{key}", "each task's run directory (and its checkpoints) is its own"
            )
        if not isinstance(values, list) or not values:
            raise fail(where, f"axes.{key}", f"expected a list of values, got {values!r}")
        if len(values) > MAX_ARRAY_TASKS:
            raise fail(where, f"axes.{key}", f"{len(values)} values; at most {MAX_ARRAY_TASKS}")
        for value in values:  # each value checked as a --config file's would be
            if not trainer:
                any_program.check_program_value(key, value, where)
                continue
            try:
                check_options({key: value}, f"{where}: axes")
            except ConfigError as err:
                raise SweepError(str(err)) from None
        axes[key] = list(values)
    return axes


def build_sweep(
    table: JSONObject,
    where: str = "sweep",
    default_name: str = "sweep",
    smoke: bool = False,
) -> Sweep:
    """The checked sweep of ``table`` (its ``[smoke]`` form with ``smoke``)."""
    table = dict(table)
    if smoke:
        table = smoke_form(table, where)
    elif isinstance(table.get("smoke"), dict):  # checked now, so that a broken one is found
        build_sweep(table, f"{where} [smoke]", default_name, smoke=True)
    table.pop("smoke", None)
    for key in table:
        if key not in KNOWN_KEYS:
            raise fail(where, key, f"unknown key (known: {', '.join(sorted(KNOWN_KEYS))})")
    name = table.get("name", default_name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail(where, "name", f"{name!r} is not a name (letters, digits, '.', '_', '-')")
    mode = _text(table, "mode", where) or "product"
    if mode not in MODES:
        raise fail(where, "mode", f"expected one of {', '.join(MODES)}, got {mode!r}")
    metric = _text(table, "metric", where) or "val_accuracy"
    if metric not in METRICS:
        raise fail(where, "metric", f"expected one of {', '.join(METRICS)}, got {metric!r}")
    args = table.get("trainer_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise fail(where, "trainer_args", f"expected a list of strings, got {args!r}")
    if table.get("job") is not None and table.get("matrix") is not None:
        raise fail(where, "job", "give job or matrix, not both")
    matrix_path = _text(table, "matrix", where)
    if matrix_path and table.get("program") is None:  # the matrix's own program, if it names one
        table = any_program.with_matrix_program(table, matrix_path, where)
    program, program_args = any_program.read_program_table(table, where)
    sweep = Sweep(
        name=name,
        axes=_axes(table.get("axes"), where, trainer=program is None),
        program=program,
        program_args=program_args,
        job=_text(table, "job", where),
        trainer_args=list(args),
        mode=mode,
        draws=_int(table, "draws", where, None, 1, MAX_ARRAY_TASKS),
        seed=_int(table, "seed", where, 0, 0, 2**63 - 1),
        repetitions=_int(table, "repetitions", where, 1, 1, 1000),
        metric=metric,
        max_parallel=_int(table, "max_parallel", where, None, 1, MAX_ARRAY_TASKS),
        smoke=smoke,
        source=where,
    )
    if matrix_path:
        _take_matrix(sweep, matrix_path, where)
    _check_shape(sweep, where)
    return sweep


def _take_matrix(sweep: Sweep, path: str, where: str) -> None:
    """A matrix's training: its job spec and its common trainer options (before the sweep's)."""
    from hpcbench.bench.running.matrix import MatrixError, read_matrix

    try:
        matrix = read_matrix(path)
    except MatrixError as err:
        raise fail(where, "matrix", str(err)) from None
    sweep.job = matrix.job
    if sweep.program is None:  # the trainer's: the matrix's options before the sweep's
        sweep.trainer_args = [*matrix.trainer_args, *sweep.trainer_args]


def _check_shape(sweep: Sweep, where: str) -> None:
    lengths = {k: len(v) for k, v in sweep.axes.items()}
    if sweep.mode == "zip" and len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise fail(where, "axes", f"mode zip needs axes of one length (got {shown})")
    if sweep.mode == "random" and sweep.draws is None:
        raise fail(where, "draws", "mode random: say how many settings to draw")
    if sweep.mode != "random" and sweep.draws is not None:
        raise fail(where, "draws", f"only mode random draws; mode is {sweep.mode}")
    settings = len(sweep.settings()) if sweep.mode != "product" else math.prod(lengths.values())
    if settings * sweep.repetitions > MAX_ARRAY_TASKS:
        raise fail(
            where,
            "axes",
            f"{settings} settings x {sweep.repetitions} repetitions is more than "
            f"{MAX_ARRAY_TASKS} tasks",
        )


def read_sweep(
    path: str | Path,
    smoke: bool = False,
    axes: list[str] | None = None,
    max_parallel: int | None = None,
    repetitions: int | None = None,
) -> Sweep:
    """The sweep in ``path``, its ``[smoke]`` form with ``smoke``; ``axes`` (``--axis
    KEY=V,V``) replace or add axes, ``max_parallel`` and ``repetitions`` replace the file's."""
    table = read_sweep_table(path)
    if smoke:
        table = smoke_form(table, str(path))
    over = {k: v for k, v in (parse_axis(a) for a in axes or [])}
    if over:
        base = table.get("axes") if isinstance(table.get("axes"), dict) else {}
        table["axes"] = {**base, **over}
    if max_parallel is not None:
        table["max_parallel"] = max_parallel
    if repetitions is not None:
        table["repetitions"] = repetitions
    sweep = build_sweep(table, str(path), default_name=Path(path).stem)
    sweep.smoke = smoke
    return sweep
