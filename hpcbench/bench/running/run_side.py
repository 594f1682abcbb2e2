"""What the ranks of a benchmark's runs saw (hosts, node lists, MPI, backend, torch), added to
``bench.json``'s provenance as each run completes, so the report states it once for the whole
matrix."""

from __future__ import annotations

from pathlib import Path

from hpcbench.atomic import write_json_atomically
from hpcbench.bench.reading.results_reader import (
    BENCH_FORMAT,
    AnalysisError,
    read_document,
    run_metrics,
)


def record_run_side(results: Path, run_dir: str | None) -> None:
    """Add what the ranks of the run in ``results/run_dir`` saw to ``results/bench.json``."""
    bench_file = results / "bench.json"
    try:
        ranks = (run_metrics(results, run_dir) or {})["provenance"]
        bench = read_document(bench_file, BENCH_FORMAT, "")
    except (AnalysisError, KeyError, TypeError):
        return
    prov = bench.setdefault("provenance", {})
    changed = False
    for key, value in (
        ("hosts", ranks.get("nodelist") or ranks.get("host")),
        ("mpi_seen", ranks.get("mpi")),
        ("backends_seen", ranks.get("backend")),
        ("torch_seen", ranks.get("torch")),
    ):
        if value and value not in prov.setdefault(key, []):
            prov[key].append(value)
            changed = True
    if changed:
        write_json_atomically(bench_file, bench)
