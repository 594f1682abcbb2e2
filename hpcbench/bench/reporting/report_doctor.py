"""The report's preflight: what ``hpcbench doctor`` found in each run's allocation before the
program started (``launcher.doctor``): healthy or its first finding, each node's median compute
and the job's all-reduce bandwidth, naming the runs; a run the doctor stopped is here with why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpcbench.bench.reporting.document import Block, Bullets, Heading, Para, Table
from hpcbench.files import printable


def _number(value: Any, digits: int) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{digits}f}"
    return "–"


def _row(run: Any, doctor: dict[str, Any]) -> list[str]:
    steps = doctor.get("steps") if isinstance(doctor.get("steps"), dict) else {}
    compute = steps.get("compute") or {}
    figures = doctor.get("figures") if isinstance(doctor.get("figures"), dict) else {}
    findings = [str(f) for f in doctor.get("findings") or []]
    verdict = "healthy" if doctor.get("healthy") and not findings else f"{len(findings)} named"
    return [
        printable(f"{run.config}, {run.kind} run {run.rep}")[:80],
        verdict,
        _number(compute.get("median_gflops"), 1),
        _number(figures.get("world") or figures.get("mpi-world"), 2),
        _number(figures.get("filesystem"), 0),
    ]


def doctor_blocks(runs: Sequence[Any]) -> list[Block]:
    """The preflight subsection (nothing where no run had one)."""
    examined = [(run, run.doctor) for run in runs if isinstance(getattr(run, "doctor", None), dict)]
    if not examined:
        return []
    named = [
        printable(f"{run.config}, {run.kind} run {run.rep}: {finding}")[:300]
        for run, doctor in examined
        for finding in doctor.get("findings") or []
    ]
    blocks: list[Block] = [Heading(3, "Preflight (hpcbench doctor)", "preflight")]
    if named:
        blocks += [Para(f"The doctor named {len(named)} finding(s):", "warn"), Bullets(named)]
    else:
        blocks.append(
            Para(
                f"The allocations of all {len(examined)} run(s) with a preflight (of "
                f"{len(runs)}) were healthy before their program started."
            )
        )
    header = ["run", "verdict", "GFLOP/s per node", "all-reduce GB/s", "read MB/s"]
    rows = [_row(run, doctor) for run, doctor in examined]
    blocks.append(Table(header, rows, numeric={2, 3, 4}))
    return blocks
