"""``hpcbench history`` and ``hpcbench check``: parse, call :mod:`hpcbench.history`, print."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.argparsing import count
from hpcbench.files import printable
from hpcbench.jobs.profiles import PROFILE_VAR

if TYPE_CHECKING:
    from hpcbench.history.store import Entry
    from hpcbench.jsonfile import JSONObject


def _date(text: str) -> str:
    """A date (and time) as the history's records begin: ``2026-11-26``, ``2026-11-26T18:00``."""
    from datetime import datetime

    for form in ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"):
        try:
            datetime.strptime(text, form)
            return text
        except ValueError:
            continue
    raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD[THH:MM], got {text[:40]!r}")


def add_parsers(sub: Any) -> None:
    h = sub.add_parser(
        "history",
        help="the results history: list, show or add recorded results",
        description="List the results recorded in the history (every finished hpcbench bench; "
        "$HPCBENCH_HISTORY, else the user's data directory), newest first; with ID, one "
        "record's figures; with --add, record a results directory or a training run.",
        epilog="e.g. hpcbench history --name laptop --since 2026-11-01; hpcbench history 12",
    )
    h.add_argument("id", nargs="?", metavar="ID", help="show this record's figures")
    h.add_argument("--name", help="only this matrix (or run) name")
    h.add_argument("--profile", help="only results of this cluster profile")
    h.add_argument(
        "--since", metavar="DATE", type=_date, help="recorded on or after YYYY-MM-DD[THH:MM]"
    )
    h.add_argument(
        "--until", metavar="DATE", type=_date, help="recorded on or before YYYY-MM-DD[THH:MM]"
    )
    h.add_argument("--last", type=count(1), default=20, help="how many (default 20)")
    h.add_argument("--json", action="store_true", help="print JSON instead of a table")
    h.add_argument(
        "--add",
        metavar="DIR",
        help="record DIR: a results directory of hpcbench bench, a training run directory, or a "
        "doctor's run directory",
    )
    c = sub.add_parser(
        "check",
        help="check a results directory against reference values (exit 1 when out of tolerance)",
        description="Check each referenced figure of a results directory of hpcbench bench "
        "against its reference and tolerance (the matrix's [reference] table, or --references "
        "FILE): one line per figure out of tolerance and per configuration with failed runs, "
        "exit status 1 if any, 0 if none; usable as a CI step on a cluster. RESULTS may be a "
        "doctor's run directory (doctor.json), checked against --references: each node's, "
        "link's and pair's figures, and the doctor's findings.",
        epilog='e.g. [reference] "1gpu" = { samples_per_s = [4400, -0.05, 0.10] }',
    )
    c.add_argument("results", metavar="RESULTS")
    c.add_argument("--references", metavar="FILE", help="a TOML file with a [reference] table")
    c.add_argument(
        "--profile",
        metavar="NAME",
        help="whose PROFILE:CONFIG references apply (default: the profile the matrix ran with)",
    )
    c.add_argument("-v", "--verbose", action="store_true", help="print the figures within too")
    c.add_argument(
        "--allow-failed",
        action="store_true",
        help="failed runs do not fail the check (they are still named); the figures of the runs "
        "that completed decide",
    )
    for name in ("history", "check"):
        sub.choices[name].set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.bench.analysing.references import ReferenceError
    from hpcbench.bench.reading.results_reader import AnalysisError
    from hpcbench.history import HistoryError

    try:
        return _history(args) if args.action == "history" else _check(args)
    except (HistoryError, AnalysisError, ReferenceError) as err:
        print(f"hpcbench: error: {err}", file=sys.stderr)
        return 2


def _history(args: argparse.Namespace) -> int:
    from hpcbench.history import History, HistoryError, record_results, record_run

    store = History()
    if args.add:
        target = Path(args.add)
        if (target / "bench.json").is_file():
            rid, new = record_results(target, store)
        elif (target / "metrics.json").is_file():
            rid, new = record_run(target, store)
        elif (target / "doctor.json").is_file():
            from hpcbench.doctor.history import record_doctor

            rid, new = record_doctor(target, _doctor_document(target), store)
        else:
            raise HistoryError(
                f"--add {target}: neither a results directory of hpcbench bench (bench.json), "
                "a training run directory (metrics.json) nor a doctor's (doctor.json)"
            )
        print(f"{'recorded' if new else 'already recorded'} as #{rid} in {store.path}")
        return 0
    if not store.path.exists():
        print(f"no results recorded yet ({store.path} does not exist)")
        return 0
    if args.id is not None:
        if not args.id.lstrip("#").isdigit():
            raise HistoryError(f"ID {args.id!r}: a record id is a number (hpcbench history)")
        entry = store.get(int(args.id.lstrip("#")))
        if entry is None:
            raise HistoryError(f"no record #{args.id.lstrip('#')} in {store.path}")
        if args.json:
            print(json.dumps(_entry_json(entry, full=True), indent=1))
            return 0
        for line in _show(entry):
            print(printable(line))
        return 0
    entries = store.entries(
        name=args.name, profile=args.profile, since=args.since, until=args.until, limit=args.last
    )
    if args.json:
        print(json.dumps([_entry_json(e) for e in entries], indent=1))
        return 0
    if not entries:
        print(f"no recorded results match ({store.path})")
        return 0
    print("id\trecorded\tkind\tname\tprofile\tgit\tconfigurations")
    for e in entries:
        git = (e.git or "-")[:12]
        cells = [e.id, e.recorded_at[:16], e.kind, e.name, e.profile or "-", git]
        print("\t".join(map(printable, [*cells, ", ".join(e.figures) or "-"])))
    return 0


def _entry_json(entry: Entry, full: bool = False) -> JSONObject:
    data = {
        "id": entry.id,
        "recorded_at": entry.recorded_at,
        "kind": entry.kind,
        "name": entry.name,
        "directory": entry.directory,
        "profile": entry.profile,
        "git": entry.git,
        "hosts": entry.hosts,
        "versions": entry.versions,
        "figures": entry.figures,
    }
    if full:
        data.update(matrix=entry.matrix, provenance=entry.provenance)
    return data


def _show(entry: Any) -> list[str]:
    from hpcbench.bench.analysing.key_figures import UNITS
    from hpcbench.bench.reading.results_reader import is_number
    from hpcbench.history import HistoryError

    lines = [
        f"#{entry.id} {entry.kind} {entry.name}, recorded {entry.recorded_at}",
        f"directory: {entry.directory}",
        f"profile: {entry.profile or '-'}; git: {entry.git or '-'}; hosts: "
        f"{', '.join(entry.hosts) or '-'}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in entry.versions.items() if v),
    ]
    for config, figures in entry.figures.items():
        lines.append(f"{config}:")
        for metric, stat in figures.items():
            ci = stat.get("ci95") or [None, None]
            for value in (stat.get("median"), *ci, stat.get("n")):
                if value is not None and not is_number(value):
                    raise HistoryError(
                        f"record #{entry.id}: {config} {metric}: {value!r} is not a number (the "
                        "history was edited by hand); hpcbench history --add records it again"
                    )
            interval = f" [{ci[0]:.4g}, {ci[1]:.4g}]" if None not in ci else ""
            n = f", n={stat['n']}" if stat.get("n") else ""
            unit = f" {UNITS.get(metric, '')}".rstrip()
            median = "?" if stat.get("median") is None else f"{stat['median']:.4g}"
            lines.append(f"  {metric}: {median}{unit}{interval}{n}")
    return lines


def _references(args: argparse.Namespace, results: Any) -> tuple[Any, str]:
    """The reference values to hold the results to (``--references FILE``, else the matrix's
    own ``[reference]``) and where they come from, for the messages."""
    from hpcbench.bench.analysing.references import ReferenceError, check_references
    from hpcbench.bench.running.matrix import MatrixError, read_matrix_table

    if not args.references:
        where = str(Path(args.results) / "bench.json")
        return check_references(results.matrix.get("reference"), where), "the matrix's [reference]"
    try:
        table = read_matrix_table(args.references)
    except MatrixError as err:
        raise ReferenceError(str(err)) from None
    unknown = sorted(set(table) - {"reference"})
    if unknown:
        raise ReferenceError(
            f"{args.references}: {unknown[0]}: unknown key (a references file holds one "
            "[reference] table)"
        )
    return check_references(table.get("reference"), args.references), args.references


def _doctor_document(run_dir: Path) -> dict[str, Any]:
    from hpcbench.history import HistoryError
    from hpcbench.jsonfile import JsonFileError, read_json

    try:
        document = read_json(run_dir / "doctor.json", "not a doctor's run directory")
    except JsonFileError as err:
        raise HistoryError(str(err)) from None
    if not isinstance(document, dict) or document.get("version") != 1:
        raise HistoryError(f"{run_dir / 'doctor.json'}: not a doctor.json of version 1")
    return document


def _check_doctor(args: argparse.Namespace) -> int:
    """``check`` of a doctor's run directory against a references file: each node's, link's
    and pair's figures (:mod:`hpcbench.doctor.figures`), the doctor's findings too."""
    from hpcbench.bench.analysing.references import ReferenceError, check_figures
    from hpcbench.doctor.figures import doctor_figures

    document = _doctor_document(Path(args.results))
    if not args.references:
        raise ReferenceError(
            f"{args.results}: a doctor's run: give --references FILE (a [reference] table of "
            'its nodes\' figures, e.g. "*" = { compute_gflops = [50, -0.3, inf] })'
        )
    references, where = _references(args, None)
    profile = args.profile or document.get("cluster")
    outcomes = check_figures(
        doctor_figures(document), references, profile, wildcards_where_measured=True
    )
    if not outcomes:
        raise ReferenceError(f"{where}: no reference applies to this doctor's figures")
    failed = [o for o in outcomes if not o.ok]
    for outcome in outcomes:
        if not outcome.ok or args.verbose:
            print(printable(outcome.line()))
    findings = [str(f) for f in document.get("findings") or []]
    for finding in findings:
        print(printable(f"the doctor named: {finding}"))
    print(
        f"{len(outcomes) - len(failed)} of {len(outcomes)} figure(s) within tolerance ({where}"
        f"{f', profile {profile}' if profile else ''})"
        + (f"; the doctor named {len(findings)} finding(s)" if findings else "")
    )
    return 1 if failed or findings else 0


def _check(args: argparse.Namespace) -> int:
    import os

    if (Path(args.results) / "doctor.json").is_file() and not (
        Path(args.results) / "bench.json"
    ).is_file():
        return _check_doctor(args)

    from hpcbench.bench.analysing.analysis import analyse
    from hpcbench.bench.analysing.references import ReferenceError, check, failed_run_lines
    from hpcbench.bench.reading.results_reader import load_results

    results = load_results(args.results)
    references, where = _references(args, results)
    if not references:
        raise ReferenceError(
            f"{args.results}: no reference values (add a [reference] table to the matrix, or "
            "give --references FILE)"
        )
    profile = (
        args.profile
        or (results.bench.get("provenance") or {}).get("profile")
        or os.environ.get(PROFILE_VAR)
    )
    outcomes = check(dict(analyse(results)), references, profile)
    if not outcomes:
        raise ReferenceError(
            f"{where}: no reference applies to these results"
            f"{f' (profile {profile})' if profile else ' (no profile: PROFILE:CONFIG keys skipped)'}"
        )
    failed = [o for o in outcomes if not o.ok]
    for outcome in outcomes:
        if not outcome.ok or args.verbose:
            print(printable(outcome.line()))
    failed_runs = failed_run_lines(results)
    for line in failed_runs:
        print(line, file=sys.stderr if args.allow_failed else sys.stdout)
    print(
        f"{len(outcomes) - len(failed)} of {len(outcomes)} figure(s) within tolerance "
        f"({where}{f', profile {profile}' if profile else ''})"
        + (
            f"; {len(failed_runs)} configuration(s) with failed runs"
            + (
                " (allowed)"
                if args.allow_failed
                else ": a failure (--allow-failed to let the figures alone decide)"
            )
            if failed_runs
            else ""
        ),
        file=sys.stderr,
    )
    return 1 if failed or (failed_runs and not args.allow_failed) else 0
