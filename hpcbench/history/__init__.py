"""What happened last week: a store of every completed ``hpcbench bench`` (and of training runs
added by hand), comparisons against it, and checks against reference values.

- :mod:`.store`: the SQLite file (:class:`~.store.History`), safe with several writers;
- the figures kept per configuration are :mod:`hpcbench.bench.analysing.key_figures` and the reference
  values with tolerances (per system and configuration, in the matrix) and their check
  :mod:`hpcbench.bench.analysing.references`;
- here: :func:`record_results` (a bench results directory), :func:`record_run` (a training run
  directory), :func:`find` (a stored result by ``last``, a date, an id or a matrix name) and
  :func:`compare_against`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from hpcbench.bench.analysing.key_figures import Figure, analysis_figures
from hpcbench.files import read_regular
from hpcbench.history.store import Entry, History, HistoryError, history_path
from hpcbench.jsonfile import MAX_JSON_BYTES

if TYPE_CHECKING:
    from hpcbench.bench.reading.results_documents import MatrixRecord
    from hpcbench.run_documents import Provenance

__all__ = [
    "Entry",
    "History",
    "HistoryError",
    "compare_against",
    "find",
    "history_path",
    "record_document",
    "record_results",
    "record_run",
]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?")


def _fingerprint(directory: Path, *files: Path) -> str:
    digest = hashlib.sha256(str(directory.resolve()).encode())
    for path in files:
        try:
            digest.update(read_regular(path, MAX_JSON_BYTES))
        except (OSError, ValueError):  # not a regular file, or too large: read by no one
            digest.update(b"-")
    return digest.hexdigest()


def record_results(results_dir: str | Path, history: History | None = None) -> tuple[int, bool]:
    """Record a bench results directory (its analysis, matrix and provenance); (id, True), or
    (the earlier id, False) when these results are recorded already."""
    from hpcbench.bench.analysing.analysis import analyse
    from hpcbench.bench.reading.results_reader import load_results

    directory = Path(results_dir).resolve()
    results = load_results(directory)
    analysis = analyse(results)
    prov = dict(results.bench.get("provenance") or {})
    with history or History() as store:
        return store.record(
            kind="bench",
            name=str(results.matrix.get("name") or directory.name),
            directory=str(directory),
            fingerprint=_fingerprint(directory, directory / "runs.json"),
            provenance=prov,
            matrix=results.matrix,
            analysis=dict(analysis),
            figures=analysis_figures(dict(analysis)),
            hosts=[str(h) for h in prov.get("hosts") or [prov.get("submit_host")] if h],
        )


def record_run(run_dir: str | Path, history: History | None = None) -> tuple[int, bool]:
    """Record one training run (a run directory with the trainer's ``metrics.json``) as a
    result of one configuration, named after its strategy."""
    from hpcbench.bench.reading.results_reader import (
        AnalysisError,
        check_metrics_format,
        phase_times,
    )
    from hpcbench.jsonfile import JsonFileError, read_json

    directory = Path(run_dir).resolve()
    try:
        metrics = read_json(directory / "metrics.json", "not a run directory of hpcbench train")
    except JsonFileError as err:
        raise HistoryError(str(err)) from None
    try:
        check_metrics_format(directory / "metrics.json", metrics)
    except AnalysisError as err:
        raise HistoryError(str(err)) from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("phases"), dict):
        raise HistoryError(f"{directory / 'metrics.json'}: not a metrics.json of hpcbench train")
    run = metrics.get("run") or {}
    try:
        times = phase_times(metrics)
    except (KeyError, TypeError, ValueError, AnalysisError):
        raise HistoryError(f"{directory / 'metrics.json'}: phases incomplete") from None
    config = str(run.get("strategy") or "run")
    one = lambda v: {"median": float(v), "ci95": None, "n": 1}  # noqa: E731
    figs: dict[str, Figure] = {"total_s": one(times["total"]), "train_s": one(times["train"])}
    rate = (metrics.get("throughput") or {}).get("train_samples_per_s")
    if isinstance(rate, (int, float)):
        figs["samples_per_s"] = one(rate)
    acc = (metrics.get("test") or {}).get("accuracy")
    if isinstance(acc, (int, float)):
        figs["test_accuracy"] = one(acc)
    prov = metrics.get("provenance") or {}
    with history or History() as store:
        return store.record(
            kind="train",
            name=directory.name,
            directory=str(directory),
            fingerprint=_fingerprint(directory, directory / "metrics.json"),
            provenance=prov if isinstance(prov, dict) else {},
            matrix=None,
            analysis=None,
            figures={config: figs},
            hosts=[str(prov.get("host"))] if isinstance(prov, dict) and prov.get("host") else [],
        )


def configs_of(matrix: MatrixRecord | None) -> frozenset[str]:
    """The names of the configurations a recorded matrix measured."""
    configs = (matrix or {}).get("configs") or []
    return frozenset(str(c.get("name")) for c in configs if isinstance(c, dict))


def find(
    store: History,
    against: str,
    name: str | None,
    exclude: str | Path | None = None,
    configs: frozenset[str] | None = None,
) -> Entry:
    """The stored result ``against`` names: ``last`` (the newest of matrix ``name``), a date
    ``YYYY-MM-DD[THH:MM]`` (the newest of ``name`` recorded on or before it), a record id
    (``12`` or ``#12``), or another matrix's name (its newest). ``exclude``: a results
    directory that is not to be its own reference; ``configs``: for ``last`` and a date, the
    configurations the result must have measured (the one compared with)."""
    skip = str(Path(exclude).resolve()) if exclude is not None else None

    def newest(entries: list[Entry], what: str, same: frozenset[str] | None = None) -> Entry:
        """The newest bench result; with ``same``, the newest that measured those
        configurations, else the newest that measured some of them (matrices made with
        --configs all share one name: one that measured none of them is another matrix)."""
        candidates = [e for e in entries if e.directory != skip and e.kind == "bench"]
        if candidates and not same:
            return candidates[0]
        if candidates:
            found = next((e for e in candidates if configs_of(e.matrix) == same), None) or next(
                (e for e in candidates if configs_of(e.matrix) & same), None
            )
            if found is not None:
                return found
            other = candidates[0]
            raise HistoryError(
                f"--against {against}: {what} that measured {', '.join(sorted(same))} in "
                f"{store.path} (the newest of that name, #{other.id}, measured "
                f"{', '.join(sorted(configs_of(other.matrix))) or 'nothing'}; --against "
                f"{other.id} compares with it all the same)"
            )
        raise HistoryError(f"--against {against}: {what} in {store.path}")

    text = against.strip()
    if text.lstrip("#").isdigit():
        entry = store.get(int(text.lstrip("#")))
        if entry is None or entry.kind != "bench":
            raise HistoryError(f"--against {against}: no recorded bench result #{text.lstrip('#')}")
        return entry
    if text == "last":
        return newest(store.entries(name=name), f"no earlier result of matrix {name!r}", configs)
    if _DATE.fullmatch(text):
        until = text.replace(" ", "T")
        return newest(
            store.entries(name=name, until=until),
            f"no result of matrix {name!r} recorded on or before {until}",
            configs,
        )
    return newest(store.entries(name=text), f"no recorded result of a matrix named {text!r}")


def compare_against(
    results_dir: str | Path, against: str, history: History | None = None
) -> tuple[Entry, list[str]]:
    """What changed from the stored result ``against`` names (:func:`find`) to the results
    directory: the findings of ``hpcbench compare``, by the same rules."""
    from hpcbench.bench.analysing.analysis import analyse
    from hpcbench.bench.analysing.comparison import compare_analyses
    from hpcbench.bench.reading.results_reader import load_results

    results = load_results(results_dir)
    analysis = analyse(results)
    with history or History() as store:
        entry = find(
            store, against, str(results.matrix.get("name")), results_dir,
            configs_of(results.matrix),
        )  # fmt: skip
    if entry.analysis is None or entry.matrix is None:
        raise HistoryError(f"--against {against}: {entry.label} holds no analysis to compare")
    findings = compare_analyses(
        (entry.matrix, entry.analysis, entry.provenance),  # type: ignore[arg-type]
        (results.matrix, analysis, results.bench.get("provenance") or {}),
    )
    return entry, findings


def record_document(
    *,
    kind: str,
    directory: str | Path,
    document: str,
    figures: dict[str, dict[str, Figure]],
    provenance: Provenance,
    hosts: list[str],
    history: History | None = None,
) -> tuple[int, bool]:
    """Record one run of another kind (``doctor``) from its document in ``directory``, as
    :func:`record_run` does a training run; (id, True), or (the earlier id, False)."""
    path = Path(directory).resolve()
    with history or History() as store:
        return store.record(
            kind=kind,
            name=path.name,
            directory=str(path),
            fingerprint=_fingerprint(path, path / document),
            provenance=provenance,
            matrix=None,
            analysis=None,
            figures=figures,
            hosts=hosts,
        )
