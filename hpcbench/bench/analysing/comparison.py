"""What changed between two benchmark results (``hpcbench compare``, ``compare --against``):
configurations added or removed, changed settings, each figure whose 95 % intervals do not
overlap, and provenance that differs."""

from __future__ import annotations

from pathlib import Path

from hpcbench.bench import stats
from hpcbench.bench.analysing.analysis import analyse
from hpcbench.bench.analysing.energy_results import kind_name
from hpcbench.bench.analysis_types import Analysis, ConfigAnalysis
from hpcbench.bench.reading.results_documents import BenchProvenance, MatrixRecord
from hpcbench.bench.reading.results_reader import load_results


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _stat_change(label: str, a: dict | None, b: dict | None, unit: str) -> str | None:
    """A figure that changed beyond both 95 % intervals; or, where one side has a single run
    (no interval), the figure before and after, said to be not judged: never silence."""
    if a is None or b is None:
        return None
    ratio = f" ({b['median'] / a['median']:.2f}×)" if a["median"] else ""
    change = f"{label}: {_num(a['median'])}{unit} → {_num(b['median'])}{unit}{ratio}"
    na, nb = a.get("n") or 0, b.get("n") or 0
    if min(na, nb) < 2:
        runs = "one run each" if na == nb == 1 else f"{na} and {nb} run(s)"
        return f"{change}; {runs}: not judged (a single run has no interval; use --repetitions)"
    if not stats.significantly_different(a, b):
        return None
    return f"{change}; the 95 % intervals do not overlap"


def compare(a_dir: str | Path, b_dir: str | Path) -> list[str]:
    """What changed from results directory ``a_dir`` to ``b_dir``, one finding a line:
    configurations added or removed, a changed configuration or matrix setting, each metric
    whose 95 % intervals do not overlap, provenance that differs. Empty: nothing changed."""
    ra, rb = load_results(a_dir), load_results(b_dir)
    return compare_analyses(
        (ra.matrix, analyse(ra), ra.bench.get("provenance") or {}),
        (rb.matrix, analyse(rb), rb.bench.get("provenance") or {}),
    )


Side = tuple[MatrixRecord, Analysis, BenchProvenance]


def _config_changes(name: str, a: ConfigAnalysis, b: ConfigAnalysis) -> list[str]:
    """What changed in one configuration found on both sides: its times, throughput, accuracy,
    energy (whole and per kind of device) and accounting."""
    findings: list[str] = []
    checks = [(f"{name} {p} time", a["time"][p], b["time"][p], " s") for p in ("total", "train")]
    checks.append((f"{name} throughput", a["throughput"], b["throughput"], " samples/s"))
    checks.append((f"{name} test accuracy", a["accuracy"]["final"], b["accuracy"]["final"], ""))
    checks.append((f"{name} energy", a["energy"]["used_j"], b["energy"]["used_j"], " J"))
    acct_a, acct_b = a.get("accounting") or {}, b.get("accounting") or {}
    for label, key, unit in (
        ("queue wait", "queue_wait_s", " s"),
        ("memory high-water (MaxRSS)", "max_rss_bytes", " B"),
        ("CPU efficiency", "cpu_efficiency", ""),
    ):
        checks.append((f"{name} {label}", acct_a.get(key), acct_b.get(key), unit))
    for label, sa, sb, unit in checks:
        found = _stat_change(label, sa, sb, unit)
        if found:
            findings.append(found)
    if a["energy"]["available"] != b["energy"]["available"]:
        state = "measured" if b["energy"]["available"] else f"not known ({b['energy']['reason']})"
        findings.append(f"{name} energy: now {state}")
    ka, kb = a["energy"].get("by_kind") or {}, b["energy"].get("by_kind") or {}
    for kind in sorted(set(ka) | set(kb)):
        was, now = ka.get(kind) or {}, kb.get(kind) or {}
        if bool(was.get("available")) != bool(now.get("available")):
            state = (
                "measured"
                if now.get("available")
                else f"not known ({now.get('reason') or 'not used'})"
            )
            findings.append(f"{name} {kind_name(kind)} energy: now {state}")
        elif was.get("available"):
            found = _stat_change(
                f"{name} {kind_name(kind)} energy", was["used_j"], now["used_j"], " J"
            )
            if found:
                findings.append(found)
    return findings


def compare_analyses(side_a: Side, side_b: Side) -> list[str]:
    """:func:`compare` of two (matrix, analysis, provenance) sides: a results directory's, or
    one the history recorded."""
    (ma, aa, pa), (mb, ab, pb) = side_a, side_b
    ca = {c["name"]: c for c in aa["configs"]}
    cb = {c["name"]: c for c in ab["configs"]}
    findings: list[str] = []
    findings += [f"config {n} added" for n in cb if n not in ca]
    findings += [f"config {n} removed" for n in ca if n not in cb]

    # references and estimate factors say how to read results, not how they were made
    for key in sorted((set(ma) | set(mb)) - {"configs", "name", "reference", "estimates"}):
        if ma.get(key) != mb.get(key):
            findings.append(f"matrix {key}: {ma.get(key)!r} → {mb.get(key)!r}")
    defs_a = {c["name"]: c for c in ma["configs"]}
    defs_b = {c["name"]: c for c in mb["configs"]}
    for name in (n for n in defs_a if n in defs_b):
        for key in sorted(set(defs_a[name]) | set(defs_b[name])):
            if defs_a[name].get(key) != defs_b[name].get(key):
                findings.append(
                    f"config {name} {key}: {defs_a[name].get(key)!r} → {defs_b[name].get(key)!r}"
                )

    for name in (n for n in ca if n in cb):
        findings += _config_changes(name, ca[name], cb[name])

    for key in sorted(set(pa) | set(pb)):
        if pa.get(key) != pb.get(key):
            findings.append(f"provenance {key}: {pa.get(key)!r} → {pb.get(key)!r}")
    return findings
