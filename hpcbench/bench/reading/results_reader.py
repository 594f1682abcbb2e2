"""A results directory of ``hpcbench bench``, read and checked once: the only module of
:mod:`hpcbench.bench` that opens its files.

:func:`load_results` reads ``bench.json``, ``runs.json``, every completed run's ``metrics.json``
and (energy runs) ``energy.json``, each run's ``accounting.json`` (the scheduler's record), and
``idle.json``; :class:`AnalysisError`, one line naming the
file, for anything that is not a results directory of ``hpcbench bench``. The analysis, the
energy figures, the tables, the figures and the report all work from the :class:`Results` it
returns. Each document is read as its type: ``metrics.json`` by :func:`read_metrics` as
:class:`~hpcbench.run_documents.Metrics`, ``bench.json`` and ``runs.json`` as
:class:`~hpcbench.bench.reading.results_documents.BenchDocument` and
:class:`~hpcbench.bench.reading.results_documents.RunRecord`,
``energy.json`` and ``idle.json`` as :class:`~hpcbench.run_documents.EnergyDocument` and
:class:`~hpcbench.energy.sampler.IdleDocument`, ``accounting.json`` as
:class:`~hpcbench.jobs.accounting.records.AccountingRecord`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.files import printable
from hpcbench.jobs.accounting.records import load as load_accounting
from hpcbench.jsonfile import JsonFileError, read_json
from hpcbench.measure.stragglers import analyse as analyse_ranks
from hpcbench.measure.telemetry_files import all_records, skipped_line
from hpcbench.measure.traces import read_summaries
from hpcbench.run_documents import METRICS_FORMAT, EnergyDocument, Metrics

if TYPE_CHECKING:
    from hpcbench.bench.reading.results_documents import (
        BenchDocument,
        MatrixRecord,
        RunRecord,
        RunsDocument,
    )
    from hpcbench.energy.sampler import IdleDocument
    from hpcbench.jobs.accounting.records import AccountingRecord
    from hpcbench.measure.stragglers import Stragglers
    from hpcbench.measure.traces import TraceSummary

BENCH_FORMAT = "hpcbench-bench/1"
RUNS_FORMAT = "hpcbench-runs/1"
ENERGY_FORMAT = "hpcbench-energy/1"
PHASES = ("total", "setup", "train", "val", "test")
# The total time of a run: the measured work, set-up excluded (MLPerf's rule, as the trainer's
# throughput); set-up is reported as a phase of its own.
TOTAL_PHASES = ("train_s", "val_s", "test_s")
ENERGY_PHASES = ("train", "val", "test")  # the same window, for a device's joules


class AnalysisError(ValueError):
    """A results directory the analysis cannot read: one line naming the file and the fault."""


@dataclass
class Run:
    """One run of the matrix as ``runs.json`` records it, with what its run directory holds
    (completed runs only: ``metrics``; energy runs also ``energy``, None when absent)."""

    config: str
    kind: str
    rep: int
    status: str
    run_dir: Path
    error: str = ""
    metrics: Metrics | None = None
    energy: EnergyDocument | None = None
    record: RunRecord = field(default_factory=dict)  # as runs.json holds it
    #: the scheduler's accounting of the run's job (``accounting.json``; None when not kept)
    accounting: AccountingRecord | None = None
    #: its ranks' telemetry read for stragglers (:func:`hpcbench.measure.stragglers.analyse`)
    stragglers: Stragglers | None = None
    #: its preflight's ``doctor.json`` (``launcher.doctor``; None without one, or unreadable)
    doctor: dict[str, Any] | None = None
    #: its ranks' profiler trace summaries (:func:`hpcbench.measure.traces.read_summaries`)
    traces: list[TraceSummary] = field(default_factory=list)
    #: one line per telemetry file with lines that were not a record (skipped, counted)
    skipped_telemetry: list[str] = field(default_factory=list)


@dataclass
class Results:
    """A results directory of ``hpcbench bench``, read and checked."""

    directory: Path
    bench: BenchDocument
    runs: list[Run] = field(default_factory=list)
    idle: IdleDocument | None = None

    @property
    def matrix(self) -> MatrixRecord:
        return self.bench["matrix"]


def _read_json(path: Path, hint: str) -> Any:
    try:
        return read_json(path, missing_hint=hint)
    except JsonFileError as err:
        raise AnalysisError(str(err)) from None


def is_number(value: Any) -> bool:
    """A finite number (JSON lets NaN and Infinity through; they are never a measurement)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_bench(path: Path, bench: Any) -> None:
    if not isinstance(bench, dict) or bench.get("format") != BENCH_FORMAT:
        got = bench.get("format") if isinstance(bench, dict) else type(bench).__name__
        raise AnalysisError(f"{path}: format is {got!r}, not {BENCH_FORMAT!r}")
    matrix = bench.get("matrix")
    if not isinstance(matrix, dict) or not isinstance(matrix.get("configs"), list):
        raise AnalysisError(f'{path}: no "matrix" with a list of "configs"')
    names = set()
    for i, cfg in enumerate(matrix["configs"]):
        if not isinstance(cfg, dict) or not isinstance(cfg.get("name"), str):
            raise AnalysisError(f'{path}: matrix.configs[{i}] has no "name"')
        devices = cfg.get("devices")
        if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
            raise AnalysisError(
                f'{path}: config {cfg["name"]!r}: "devices" must be a whole number ≥ 1, '
                f"not {devices!r}"
            )
        names.add(cfg["name"])
    for key in ("baseline_cpu", "baseline_one_device"):
        base = matrix.get(key)
        if base is not None and base not in names:
            raise AnalysisError(f"{path}: matrix.{key} {base!r} is not one of the configs")


def check_metrics_format(path: Path, metrics: Any) -> None:
    """Refuse a metrics.json of another layout than :data:`METRICS_FORMAT` (one without a
    format is that layout's first form, written before it was recorded)."""
    if isinstance(metrics, dict) and metrics.get("format", METRICS_FORMAT) != METRICS_FORMAT:
        raise AnalysisError(
            f"{path}: format is {printable(str(metrics['format']))[:80]!r}, not "
            f"{METRICS_FORMAT!r} (written by another version of hpcbench)"
        )


def _check_metrics(path: Path, metrics: Any) -> None:
    check_metrics_format(path, metrics)
    if not isinstance(metrics, dict) or not isinstance(metrics.get("phases"), dict):
        raise AnalysisError(f'{path}: no "phases" (not a metrics.json of hpcbench train)')
    for key in ("setup_s", *TOTAL_PHASES):
        value = metrics["phases"].get(key)
        if not is_number(value) or value < 0 or (key == "train_s" and value == 0):
            raise AnalysisError(
                f"{path}: phases.{key} is {value!r}, not a finite number of seconds >= 0"
            )
    if not isinstance(metrics.get("run"), dict):
        raise AnalysisError(f'{path}: no "run" (not a metrics.json of hpcbench train)')


def _check_energy(path: Path, energy: Any) -> None:
    if not isinstance(energy, dict) or energy.get("format") != ENERGY_FORMAT:
        got = energy.get("format") if isinstance(energy, dict) else type(energy).__name__
        raise AnalysisError(f"{path}: format is {got!r}, not {ENERGY_FORMAT!r}")
    if not isinstance(energy.get("nodes"), list):
        raise AnalysisError(f'{path}: no list of "nodes"')
    for node in energy["nodes"]:
        if not isinstance(node, dict) or not isinstance(node.get("devices"), list):
            raise AnalysisError(f'{path}: a node without a list of "devices"')
        for dev in node["devices"]:
            if not isinstance(dev, dict) or "name" not in dev or "method" not in dev:
                raise AnalysisError(f'{path}: a device without "name" and "method"')
            if not isinstance(dev.get("phases") or {}, dict) or not isinstance(
                dev.get("samples") or [], list
            ):
                raise AnalysisError(f"{path}: device {dev['name']!r}: phases or samples malformed")
        if not isinstance(node.get("host", ""), str):
            raise AnalysisError(f"{path}: a node whose host is not a name")


def inside(results: Path, rel: Any) -> Path | None:
    """``results/rel`` if it stays inside ``results`` (a run_dir is data, not a free path: an
    absolute one, ``..`` or a link out of the directory gives None)."""
    if not isinstance(rel, str) or not rel:
        return None
    p = (results / rel).resolve()
    try:
        p.relative_to(results.resolve())
    except ValueError:
        return None
    return p


def load_results(results_dir: str | Path) -> Results:
    """Read a results directory of ``hpcbench bench``; :class:`AnalysisError` (one line, naming
    the file) when it is not one, or when a completed run's ``metrics.json`` is missing or has
    no phases. Pending, running and failed runs are kept (they are counted) without files."""
    directory = Path(results_dir)
    if not directory.is_dir():
        raise AnalysisError(f"{directory}: not a directory (give the results directory)")
    bench_path = directory / "bench.json"
    bench = _read_json(bench_path, "not a results directory of hpcbench bench")
    _check_bench(bench_path, bench)
    names = {cfg["name"] for cfg in bench["matrix"]["configs"]}

    runs_path = directory / "runs.json"
    doc = _read_json(runs_path, "the matrix has not started")
    if not isinstance(doc, dict) or doc.get("format") != RUNS_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise AnalysisError(f"{runs_path}: format is {got!r}, not {RUNS_FORMAT!r}")
    if not isinstance(doc.get("runs"), list):
        raise AnalysisError(f'{runs_path}: no list of "runs"')

    results = Results(directory=directory, bench=bench)
    for i, rec in enumerate(doc["runs"]):
        _check_run_record(rec, f"{runs_path}: runs[{i}]", names, directory)
        run_dir = rec["run_dir"]
        run = Run(
            config=rec["config"],
            kind=rec["kind"],
            rep=rec["rep"],
            status=str(rec["status"]),
            # pending runs and runs never submitted have no directory; they are only counted
            run_dir=directory / run_dir if run_dir else directory,
            error=str(rec.get("error") or ""),
            record=rec,
        )
        if run_dir:  # an unreadable accounting.json is as good as none: it never fails a report
            run.accounting = load_accounting(run.run_dir)
            run.stragglers, run.skipped_telemetry = _ranks(run.run_dir)
            run.traces = read_summaries(run.run_dir)
            run.doctor = _read_doctor(directory, run_dir)
        if run.status == "completed":
            _read_run_files(directory, run_dir, run)
        results.runs.append(run)

    idle_path = directory / "idle.json"
    if idle_path.exists():
        idle = _read_json(idle_path, "")
        if not isinstance(idle, dict) or not isinstance(idle.get("devices"), list):
            raise AnalysisError(f'{idle_path}: no list of "devices"')
        results.idle = idle
    return results


def _read_doctor(directory: Path, run_dir: str) -> dict[str, Any] | None:
    """A run's preflight doctor.json, if it has one inside the results directory; one that
    cannot be read is a line on standard error, never a refused report."""
    path = inside(directory, f"{run_dir}/doctor.json")
    if path is None or not path.exists():
        return None
    try:
        document = read_json(path)
    except JsonFileError as err:
        print(f"hpcbench: {err}: not shown", file=sys.stderr)
        return None
    return document if isinstance(document, dict) and document.get("version") == 1 else None


def _ranks(run_dir: Path) -> tuple[Stragglers | None, list[str]]:
    """A run's ranks read for stragglers (None: none read), and a line per telemetry file whose
    lines were not all records, each also said on standard error: a hostile or damaged line is
    skipped, never the whole results directory refused."""
    skipped: dict[Path, int] = {}
    stragglers = analyse_ranks(all_records(run_dir, skipped=skipped))
    said = [skipped_line(path, n) for path, n in sorted(skipped.items())]
    for line in said:
        print(f"hpcbench: {line}", file=sys.stderr)
    return stragglers, said


def _check_run_record(rec: Any, where: str, names: set[str], directory: Path) -> None:
    """One record of runs.json as the runner writes it; :class:`AnalysisError` naming it."""
    if not isinstance(rec, dict) or not all(
        k in rec for k in ("config", "kind", "rep", "status", "run_dir")
    ):
        raise AnalysisError(f"{where} lacks one of config, kind, rep, status, run_dir")
    if not isinstance(rec["config"], str) or rec["config"] not in names:
        raise AnalysisError(f"{where}: config {rec['config']!r} is not in the matrix")
    if not isinstance(rec["rep"], int) or isinstance(rec["rep"], bool):
        raise AnalysisError(f"{where}: rep {rec['rep']!r} is not a whole number")
    if rec["kind"] not in ("timing", "energy"):
        raise AnalysisError(f"{where}: kind {rec['kind']!r} is not timing or energy")
    run_dir = rec["run_dir"]
    if run_dir is not None and not isinstance(run_dir, str):
        raise AnalysisError(f"{where}: run_dir {run_dir!r} is not a path")
    if rec["status"] == "completed" and not run_dir:
        raise AnalysisError(f"{where}: completed without a run_dir")
    if run_dir and inside(directory, run_dir) is None:
        raise AnalysisError(
            f"{where}: run_dir {run_dir!r} is not inside the results directory (bench writes "
            "relative paths under it)"
        )


def _read_run_files(directory: Path, run_dir: str, run: Run) -> None:
    """A completed run's metrics.json (and an energy run's energy.json), each refused if it
    is a link out of the results directory, never read."""
    for name in ("metrics.json", "energy.json"):
        if inside(directory, f"{run_dir}/{name}") is None:
            raise AnalysisError(
                f"{run.run_dir / name}: leads out of the results directory: not read"
            )
    run.metrics = read_metrics(run.run_dir / "metrics.json", "the run is recorded as completed")
    epath = run.run_dir / "energy.json"
    if run.kind == "energy" and epath.exists():
        run.energy = _read_json(epath, "")
        _check_energy(epath, run.energy)


def read_metrics(path: Path, missing_hint: str = "") -> Metrics:
    """A run's ``metrics.json``, checked as the analysis needs it (its layout, its phases and
    its run); :class:`AnalysisError` (one line naming the file) otherwise."""
    metrics = _read_json(path, missing_hint)
    _check_metrics(path, metrics)
    return metrics


def phase_times(metrics: Metrics) -> dict[str, float]:
    """A run's phase seconds, and ``total``: train, validation and test (set-up excluded)."""
    ph = metrics["phases"]
    times = {p: float(ph[f"{p}_s"]) for p in ("setup", "train", "val", "test")}
    times["total"] = sum(float(ph[k]) for k in TOTAL_PHASES)
    return times


def samples_trained(metrics: Metrics) -> int | None:
    """Epochs x steps per epoch x global batch; None where the run does not say."""
    run = metrics["run"]
    try:
        n = int(run["epochs"]) * int(run["steps_per_epoch"]) * int(run["global_batch"])
    except (KeyError, TypeError, ValueError):
        return None
    return n or None


def read_document(path: Path, fmt: str, missing_hint: str) -> BenchDocument | RunsDocument:
    """One of the directory's own files (``bench.json``, ``runs.json``) as the runner resumes
    it: a JSON object of format ``fmt``; :class:`AnalysisError` (one line) otherwise."""
    data = _read_json(path, missing_hint)
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise AnalysisError(f"{path}: not a {fmt} file")
    return data


def read_run_metrics(directory: Path, run_dir: str) -> Metrics | None:
    """The ``metrics.json`` of the run in ``directory/run_dir`` (a bench run, a sweep's task):
    None when it has none; :class:`AnalysisError` (one line) when the run directory leads out of
    ``directory`` (a link: never read) or the file cannot be read as a JSON object's text."""
    path = directory / run_dir / "metrics.json"
    if inside(directory, f"{run_dir}/metrics.json") is None:
        raise AnalysisError(f"{path}: leads out of the results directory {directory}: not read")
    try:
        data = read_json(path)
    except JsonFileError as err:
        if err.missing:
            return None
        raise AnalysisError(str(err)) from None
    check_metrics_format(path, data)
    return data if isinstance(data, dict) else None


def run_metrics(directory: Path, run_dir: str | None) -> Metrics | None:
    """A run's ``metrics.json`` as the runner reports it while the matrix goes on; None when it
    is missing, unreadable or outside the directory (the analysis names such a run)."""
    if not run_dir:
        return None
    try:
        return read_run_metrics(directory, run_dir)
    except AnalysisError:
        return None
