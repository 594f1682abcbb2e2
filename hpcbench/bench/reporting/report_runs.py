"""The report's closing sections, about its runs rather than its figures: the failed runs
(each one's cause in one line, then the failure report bench kept, verbatim), the completed
runs whose measurement warned, the provenance and every run, the files beside the report; and
the summary's line of the failed runs and their causes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.bench.matrix_program import program_line
from hpcbench.bench.reading.results_documents import BenchDocument, RunRecord
from hpcbench.bench.reading.results_reader import Results
from hpcbench.bench.reading.run_lines import failure_cause
from hpcbench.bench.reporting.document import Block, Bullets, Code, Heading, Para, Table
from hpcbench.bench.reporting.formatting import num, when
from hpcbench.bench.reporting.report_doctor import doctor_blocks
from hpcbench.bench.reporting.report_placement import placement_blocks
from hpcbench.files import printable

#: the failed runs the summary names, at most (the section below lists all)
SUMMARY_FAILED = 5


def _cause(run: RunRecord) -> str:
    """A failed run's cause in one line, its control characters shown as escapes."""
    return printable(failure_cause(str(run.get("error") or ""))) or "no error recorded"


def failed_summary(runs: Sequence[RunRecord]) -> list[Block]:
    """The summary's line of the failed runs: how many, and each one's cause in one line."""
    failed = [r for r in runs if r.get("status") == "failed"]
    if not failed:
        return []
    causes = [
        f"{r.get('config')} {r.get('kind')} run {r.get('rep')}: {_cause(r)}"
        for r in failed[:SUMMARY_FAILED]
    ]
    if len(failed) > SUMMARY_FAILED:
        causes.append(f"and {len(failed) - SUMMARY_FAILED} more")
    return [
        Para(f"{len(failed)} of {len(runs)} runs failed (see Failed runs below):", "warn"),
        Bullets(causes),
    ]


def failed_blocks(runs: Sequence[RunRecord]) -> list[Block]:
    """Every failed run in a table with its cause in one line, then the failure report bench
    kept of each (the first failing rank's traceback, else its log's last lines), verbatim."""
    failed = [r for r in runs if r.get("status") == "failed"]
    if not failed:
        return [Para("No run failed.")]
    rows = [
        [
            str(r.get("config")),
            str(r.get("kind")),
            str(r.get("rep")),
            f"{r.get('job_id') or '–'} ({r.get('scheduler') or '–'})",
            _cause(r),
        ]
        for r in failed
    ]
    blocks: list[Block] = [
        Para(f"{len(failed)} run(s) failed; the analysis leaves them out.", "warn"),
        Table(["configuration", "kind", "rep", "job", "cause"], rows, numeric={2}),
        Para("What bench kept of each failure, verbatim:"),
    ]
    for r in failed:
        blocks.append(
            Heading(
                3,
                f"{r.get('config')}, {r.get('kind')} run {r.get('rep')} "
                f"(job {r.get('job_id') or '–'}, {r.get('scheduler') or '–'})",
            )
        )
        blocks.append(Code(str(r.get("error") or "(no error recorded)")))
    return blocks


def warned_blocks(runs: Sequence[Any]) -> list[Block]:
    """The completed runs whose measurement warned (a program measured with
    hpcbench.measure that called it wrongly), one line each: their figures are kept."""
    lines = []
    for run in runs:
        warned = (run.metrics or {}).get("warnings") or []
        if run.status == "completed" and isinstance(warned, list) and warned:
            more = f" (and {len(warned) - 1} more)" if len(warned) > 1 else ""
            lines.append(
                f"{run.config}, {run.kind} run {run.rep} ({run.run_dir.name}): "
                f"{printable(str(warned[0]))[:200]}{more}"
            )
    if not lines:
        return []
    return [
        Para(
            f"{len(lines)} run(s) completed with measurement warnings (metrics.json's "
            "warnings; their figures are kept):",
            "warn",
        ),  # fmt: skip
        Bullets(lines),
    ]


def _run_row(r: RunRecord) -> list[str]:
    """One run in the table of runs: what, where, when and how long."""
    started, ended = r.get("started"), r.get("ended")
    took = (
        f"{num(ended - started)} s"
        if isinstance(started, (int, float)) and isinstance(ended, (int, float))
        else "–"
    )
    return [
        str(r.get("config")),
        str(r.get("kind")),
        str(r.get("rep")),
        str(r.get("status")),
        str(r.get("scheduler") or "–"),
        str(r.get("job_id") or "–"),
        when(started),
        took,
        str(r.get("run_dir") or "–"),
    ]


def provenance_blocks(bench: BenchDocument, runs: Sequence[RunRecord]) -> list[Block]:
    prov = bench.get("provenance") or {}
    rows = []
    for key, value in prov.items():
        if isinstance(value, (list, tuple)):
            text = ", ".join(str(v) for v in value)
        elif isinstance(value, dict):
            text = json.dumps(value, sort_keys=True)
        else:
            text = "–" if value is None else str(value)
        rows.append([str(key), text])
    matrix = bench.get("matrix") or {}
    rows.append(["created", str(bench.get("created", "–"))])
    if matrix.get("program"):  # a program measured with hpcbench.measure: it, and its arguments
        args = [str(a) for a in matrix.get("program_args") or []]
        rows.append(["program", program_line(matrix["program"], args)])
    else:
        rows.append(
            ["common trainer flags", " ".join(str(a) for a in matrix.get("trainer_args") or [])]
        )
    rows.append(
        [
            "repetitions",
            f"{matrix.get('repetitions')} timing + {matrix.get('energy_repetitions')} energy "
            f"per configuration, {num(matrix.get('cooldown_s'))} s cool-down",
        ]
    )
    run_rows = [_run_row(r) for r in runs]
    return [
        Table(["what", "value"], rows),
        Heading(3, "Runs"),
        Table(
            [
                "configuration",
                "kind",
                "rep",
                "status",
                "scheduler",
                "job id",
                "started",
                "wall time",
                "run directory",
            ],
            run_rows,
            numeric={2, 7},
        ),
    ]


def closing_blocks(results: Results, tables: Sequence[Path], out_dir: Path) -> list[Block]:
    """The report's last sections: the failed runs (and those whose measurement warned), the
    provenance, the files beside the report."""
    runs = [run.record for run in results.runs]
    return [
        Heading(2, "Failed runs", "failed"),
        *failed_blocks(runs),
        *warned_blocks(results.runs),
        Heading(2, "Provenance", "provenance"),
        *provenance_blocks(results.bench, runs),
        *placement_blocks(results.runs),
        *doctor_blocks(results.runs),
        Heading(2, "Files", "files"),
        Para(
            "Next to this report: report.md and report.html (the same content), the figures as "
            "PNG in figures/, and the tables as CSV:"
        ),
        Bullets([t.relative_to(out_dir).as_posix() for t in tables] or ["(none)"]),
    ]
