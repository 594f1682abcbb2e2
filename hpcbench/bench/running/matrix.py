"""The experiment matrix of ``hpcbench bench``: which configurations, how many repetitions.

A matrix is a TOML file (or the same built from flags, :func:`configs_from_words`)::

    name = "laptop"
    repetitions = 3                  # timing runs per configuration
    energy_repetitions = 1           # energy runs per configuration, kept apart from timing runs
    cooldown = 0                     # seconds of rest between runs
    energy_interval = 0.5            # the energy sampler's period, seconds
    idle_seconds = 10                # idle power measured this long before energy runs (0: not)
    job = "jobs/demo.toml"           # optional: the job spec every run starts from (partition,
                                     # account, modules, time ...); resources below replace its own
    trainer_args = ["--model", "small_cnn", "--epochs", "2", "--global-batch-size", "32"]
    baseline_cpu = "cpu"             # optional: the configuration speedups are measured against
    baseline_one_device = "cpu"
    estimates = { carbon_intensity = 250, pue = 1.2, price_per_node_hour = 1.5, currency = "EUR" }

    [reference]                      # optional: what hpcbench check holds the results to
    "ddp-2" = { samples_per_s = [900, -0.1, inf] }

    [[config]]
    name = "cpu"
    strategy = "single"

    [[config]]
    name = "ddp-2"
    strategy = "ddp"
    ranks_per_node = 2               # nodes, device ("cpu" or "cuda"), launcher, trainer_args too

Every configuration trains the same model on the same data with the same global batch and epochs
(the common ``trainer_args``); only how the work is parallelised differs. The training may be
any program instead of hpcbench's trainer (``program``, ``program_args``:
:mod:`.matrix_program`). Errors are one line
naming the file and the key (:class:`MatrixError`).

The matrix as ``bench.json`` records it (:meth:`Matrix.to_dict`) is typed
:class:`~hpcbench.bench.reading.results_documents.MatrixRecord`, each configuration a
:class:`~hpcbench.bench.reading.results_documents.ConfigRecord`; the TOML table it is read from is
arbitrary until checked (:data:`hpcbench.jsonfile.JSONObject`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.bench.matrix_program import ProgramTable, check_arguments, read_program
from hpcbench.bench.matrix_values import (
    MatrixError,
    matrix_error,
    read_args,
    read_float,
    read_int,
    read_name,
    read_str,
)
from hpcbench.bench.reading.results_documents import (
    ConfigRecord,
    EstimateFactors,
    MatrixRecord,
    References,
)
from hpcbench.jobs.launchers import launcher_names
from hpcbench.jsonfile import JSONObject
from hpcbench.tomlfile import TomlFileError, read_toml_file
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

STRATEGIES = tuple(STRATEGY_KINDS)
DEVICES = ("cpu", "cuda")
MAX_MATRIX_BYTES = 1 << 20
MAX_RUNS = 10_000  # a matrix larger than this is a typo, not a plan


@dataclass(frozen=True)
class Config:
    """One way of running the same training: strategy, device, nodes and ranks."""

    name: str
    strategy: str
    device: str = "cpu"
    nodes: int = 1
    ranks_per_node: int = 1
    launcher: str = ""  # empty: the strategy's default (StrategyKind.default_launcher)
    trainer_args: tuple[str, ...] = ()
    program_args: tuple[str, ...] = ()  # a program the matrix names: its own arguments

    @property
    def world_size(self) -> int:
        one = STRATEGY_KINDS[self.strategy].drives_node_gpus
        return 1 if one else self.nodes * self.ranks_per_node

    @property
    def devices(self) -> int:
        """The compute devices it uses: the p of speedup, efficiency and Karp–Flatt (GPUs on
        cuda, including dp's one process driving several; ranks on the CPU)."""
        return self.nodes * self.ranks_per_node

    @property
    def launcher_kind(self) -> str:
        return self.launcher or STRATEGY_KINDS[self.strategy].default_launcher()

    def to_dict(self) -> ConfigRecord:
        d = asdict(self)
        d["trainer_args"] = list(self.trainer_args)
        d["program_args"] = list(self.program_args)
        d.update(devices=self.devices, world_size=self.world_size, launcher=self.launcher_kind)
        return d


@dataclass
class Matrix:
    """The whole experiment: configurations × repetitions over one training."""

    name: str
    configs: list[Config]
    repetitions: int = 3
    energy_repetitions: int = 0
    cooldown_s: float = 0.0
    energy_interval_s: float = 0.5
    idle_seconds: float = 10.0
    job: str | None = None
    trainer_args: list[str] = field(default_factory=list)
    #: the program every run measures (module, script or command); None: hpcbench's trainer
    program: ProgramTable | None = None
    program_args: list[str] = field(default_factory=list)
    baseline_cpu: str | None = None
    baseline_one_device: str | None = None
    smoke: bool = False  # the smoke form: its job spec's [smoke] form too
    #: the carbon and cost factors (:mod:`hpcbench.bench.analysing.estimates`)
    estimates: EstimateFactors = field(default_factory=dict)
    #: reference values with tolerances (:mod:`hpcbench.bench.analysing.references`)
    reference: References = field(default_factory=dict)

    def config(self, name: str) -> Config:
        return next(c for c in self.configs if c.name == name)

    def to_dict(self) -> MatrixRecord:
        """As recorded in bench.json (what a resumed matrix must still be)."""
        return {
            "name": self.name,
            "repetitions": self.repetitions,
            "energy_repetitions": self.energy_repetitions,
            "cooldown_s": self.cooldown_s,
            "energy_interval_s": self.energy_interval_s,
            "idle_seconds": self.idle_seconds,
            "job": self.job,
            "trainer_args": list(self.trainer_args),
            "program": self.program,
            "program_args": list(self.program_args),
            "baseline_cpu": self.baseline_cpu,
            "baseline_one_device": self.baseline_one_device,
            "configs": [c.to_dict() for c in self.configs],
            "estimates": dict(self.estimates),
            "reference": _references_as_json(self.reference),
        }


# ---------------------------------------------------------------------------------- reading


def _config(table: Any, where: str, program: ProgramTable | None = None) -> Config:
    if not isinstance(table, dict):
        raise MatrixError(f"{where}: expected a table, got {table!r}")
    known = {"name", "strategy", "device", "nodes", "ranks_per_node", "launcher", "trainer_args"}
    known.add("program_args")
    for key in table:
        if key not in known:
            raise matrix_error(where, key, f"unknown key (known: {', '.join(sorted(known))})")
    name = read_name(table.get("name"), where, "name")
    where = f"{where} ({name})"
    check_arguments(table, where, program)
    strategy = read_str(table, "strategy", where, STRATEGIES)
    if strategy is None:
        raise matrix_error(where, "strategy", f"missing (one of {', '.join(STRATEGIES)})")
    device = read_str(table, "device", where, DEVICES) or _default_device(strategy)
    config = Config(
        name=name,
        strategy=strategy,
        device=device,
        nodes=read_int(table, "nodes", where, 1, 1, 4096),
        ranks_per_node=read_int(table, "ranks_per_node", where, 1, 1, 1024),
        launcher=read_str(table, "launcher", where, launcher_names())
        or ("" if program is None else STRATEGY_KINDS[strategy].default_launcher(False)),
        trainer_args=tuple(read_args(table, "trainer_args", where)),
        program_args=tuple(read_args(table, "program_args", where, trainer=False)),
    )
    _check_config(config, where)
    return config


def _default_device(strategy: str) -> str:
    return "cuda" if STRATEGY_KINDS[strategy].drives_node_gpus else "cpu"


def _check_config(c: Config, where: str) -> None:
    kind = STRATEGY_KINDS[c.strategy]
    key, why = kind.matrix_problem(c.devices, c.device, c.nodes, c.launcher_kind)
    if key:
        raise matrix_error(where, key, why)


def read_matrix(path: str | Path) -> Matrix:
    """The matrix in ``path``, checked; :class:`MatrixError` naming the file and key."""
    return build_matrix(read_matrix_table(path), str(path), default_name=Path(path).stem)


def read_matrix_table(path: str | Path) -> JSONObject:
    """The TOML table of a matrix file, unchecked (flags may still change it)."""
    try:
        return read_toml_file(path, MAX_MATRIX_BYTES, "the matrix file", "a matrix")
    except TomlFileError as err:
        raise MatrixError(str(err)) from None


MATRIX_KEYS = frozenset(
    {"name", "repetitions", "energy_repetitions", "cooldown", "energy_interval", "idle_seconds",
     "job", "trainer_args", "baseline_cpu", "baseline_one_device", "config", "estimates",
     "reference", "program", "program_args"}
)  # fmt: skip


def _configs(raw: Any, where: str, program: ProgramTable | None) -> list[Config]:
    """The matrix's ``[[config]]`` tables, each checked, their names unique."""
    if not isinstance(raw, list) or not raw:
        raise matrix_error(
            where, "config", "give at least one [[config]] table (name, strategy, ...)"
        )
    configs = [_config(t, f"{where}: config[{i}]", program) for i, t in enumerate(raw)]
    names = [c.name for c in configs]
    for name in names:
        if names.count(name) > 1:
            raise matrix_error(where, "config", f"two configurations are named {name!r}")
    return configs


def build_matrix(
    table: JSONObject, where: str = "matrix", default_name: str = "bench", smoke: bool = False
) -> Matrix:
    """The checked matrix. ``smoke``: ``table`` is a smoke form (:func:`smoke_form`), and the
    job spec is read in its ``[smoke]`` form too."""
    table = dict(table)
    overlay = table.pop("smoke", None)
    if overlay is not None:  # checked now, so that a broken smoke form is found before use
        build_matrix(smoke_form({**table, "smoke": overlay}, where), f"{where} [smoke]")
    for key in table:
        if key not in MATRIX_KEYS:
            raise matrix_error(where, key, f"unknown key (known: {', '.join(sorted(MATRIX_KEYS))})")
    program = read_program(table, where)
    check_arguments(table, where, program)
    configs = _configs(table.get("config"), where, program)
    names = [c.name for c in configs]
    matrix = Matrix(
        name=read_name(table.get("name", default_name), where, "name"),
        configs=configs,
        repetitions=read_int(table, "repetitions", where, 3, 1, 1000),
        energy_repetitions=read_int(table, "energy_repetitions", where, 0, 0, 1000),
        cooldown_s=read_float(table, "cooldown", where, 0.0, 0.0, 86400.0),
        energy_interval_s=read_float(table, "energy_interval", where, 0.5, 0.01, 60.0),
        idle_seconds=read_float(table, "idle_seconds", where, 10.0, 0.0, 3600.0),
        job=read_str(table, "job", where),
        trainer_args=read_args(table, "trainer_args", where),
        program=program,
        program_args=read_args(table, "program_args", where, trainer=False),
        baseline_cpu=read_str(table, "baseline_cpu", where),
        baseline_one_device=read_str(table, "baseline_one_device", where),
        estimates=_estimates(table.get("estimates"), where),
        reference=_reference(table.get("reference"), where),
    )
    runs = len(configs) * (matrix.repetitions + matrix.energy_repetitions)
    if runs > MAX_RUNS:
        raise matrix_error(where, "repetitions", f"{runs} runs in all; at most {MAX_RUNS}")
    for key in ("baseline_cpu", "baseline_one_device"):
        chosen = getattr(matrix, key)
        if chosen is not None and chosen not in names:
            raise matrix_error(
                where, key, f"no configuration is named {chosen!r} (known: {', '.join(names)})"
            )
    matrix.smoke = smoke and matrix.job is not None
    matrix.baseline_cpu = matrix.baseline_cpu or _first(configs, "cpu")
    matrix.baseline_one_device = (
        matrix.baseline_one_device or _first(configs, "cuda") or matrix.baseline_cpu
    )
    return matrix


def _references_as_json(reference: References) -> References:
    from hpcbench.bench.analysing.references import as_json

    return as_json(reference)


def _estimates(table: Any, where: str) -> EstimateFactors:
    from hpcbench.bench.analysing.estimates import check_factors

    try:
        return check_factors(table, where)
    except ValueError as err:
        raise MatrixError(str(err)) from None


def _reference(table: Any, where: str) -> References:
    from hpcbench.bench.analysing.references import ReferenceError, check_references

    try:
        return check_references(table, where)
    except ReferenceError as err:
        raise MatrixError(str(err)) from None


def smoke_form(table: JSONObject, where: str) -> JSONObject:
    """The matrix's ``[smoke]`` form: its keys (the matrix's own; a ``config`` list replaces
    the configurations) over the rest: the same comparison in minutes on a small cluster."""
    overlay = table.get("smoke")
    if overlay is None:
        raise matrix_error(where, "smoke", "--smoke: this matrix has no [smoke] table")
    if not isinstance(overlay, dict):
        raise matrix_error(where, "smoke", "expected a table of the matrix's keys")
    if "smoke" in overlay:
        raise matrix_error(where, "smoke.smoke", "a smoke form has no smoke form")
    return {**{k: v for k, v in table.items() if k != "smoke"}, **overlay}


def _first(configs: list[Config], device: str) -> str | None:
    """The single-device configuration on ``device`` (plain ``single`` first)."""
    ones = [c for c in configs if c.device == device and c.devices == 1]
    ones.sort(key=lambda c: not STRATEGY_KINDS[c.strategy].one_device)
    return ones[0].name if ones else None


# ------------------------------------------------------------------------ the common case


_WORD = re.compile(
    r"(?P<strategy>[a-z]+)(?::(?P<ranks>[0-9]+)(?:x(?P<nodes>[0-9]+))?)?(?:@(?P<device>[a-z]+))?"
)


def configs_from_words(words: str) -> list[JSONObject]:
    """``single,ddp:2,mpi:4x2,ddp:2@cuda`` -> [[config]] tables: STRATEGY[:RANKS[xNODES]][@DEVICE],
    RANKS per node (default 1), NODES (default 1), DEVICE cpu or cuda (default cpu)."""
    tables = []
    for word in (w.strip() for w in words.split(",")):
        m = _WORD.fullmatch(word)
        if not m or m["strategy"] not in STRATEGIES or (m["device"] and m["device"] not in DEVICES):
            raise MatrixError(
                f"--configs: {word!r} is not STRATEGY[:RANKS[xNODES]][@DEVICE] "
                f"(strategies {', '.join(STRATEGIES)}; devices {', '.join(DEVICES)}), e.g. ddp:2"
            )
        try:
            ranks, nodes = int(m["ranks"] or 1), int(m["nodes"] or 1)
        except ValueError:  # int() refuses more than 4300 digits
            raise MatrixError(
                f"--configs: {word[:24]}…: a count far beyond the limits (ranks per node at "
                "most 1024, nodes at most 4096)"
            ) from None
        device = m["device"] or _default_device(m["strategy"])
        name = m["strategy"] if ranks * nodes == 1 else f"{m['strategy']}-{ranks * nodes}"
        if nodes > 1:
            name += f"-{nodes}n"
        if device == "cuda":
            name += "-gpu"
        tables.append(
            {
                "name": name,
                "strategy": m["strategy"],
                "device": device,
                "nodes": nodes,
                "ranks_per_node": ranks,
            }
        )
    return tables
