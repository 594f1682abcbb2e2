"""The report's energy section: per configuration the energy of its energy runs, the same per
kind of device, why a figure is unavailable, the sources of every figure and the idle power."""

from __future__ import annotations

from typing import Any

from hpcbench.bench.analysing.energy_results import energy_sources, kind_name
from hpcbench.bench.analysis_types import Analysis, ConfigAnalysis
from hpcbench.bench.reading.results_reader import Results
from hpcbench.bench.reporting.document import Block, Bullets, Heading, Para, Table
from hpcbench.bench.reporting.formatting import fmt_joules, fmt_stat, num


def energy_blocks(analysis: Analysis, results: Results) -> list[Block]:
    """The section's blocks, in the order docs/report.md gives."""
    configs = analysis.get("configs", [])
    return [
        *_energy_table(configs),
        *_kind_table(configs),
        *_unavailable(configs),
        *_source_blocks(configs, results),
        *_idle_blocks(results.idle),
    ]


def _energy_table(configs: list[ConfigAnalysis]) -> list[Block]:
    blocks: list[Block] = []
    rows = []
    for c in configs:
        e = c.get("energy") or {}
        rows.append(
            [
                str(c["name"]),
                str(e.get("window") or "–"),
                fmt_joules(e.get("used_j")),
                fmt_joules(e.get("with_idle_j")),
                fmt_joules(e.get("net_j")),
                fmt_stat(e.get("per_sample_j"), "J"),
                num(e.get("edp")),
                num(e.get("edp_norm")),
                num(e.get("edp_with_idle_norm")),
                num(e.get("ed2p_norm")),
            ]
        )
    blocks.append(
        Para(
            "Energy of one energy run (kept apart from the timing runs), median over the energy "
            "runs with its 95 % bootstrap interval: used = the devices the run computed on; with "
            "idle = every sampled device of its nodes, the allocated ones it left idle included; "
            "net = used less the idle power of the used devices (idle.json) over the run's time, "
            "the work's own energy; per sample = used ÷ training samples. EDP = energy × time "
            "(J·s), ED²P = energy × time²; the columns marked / baseline divide by the one-device "
            "baseline's (below 1 is better)."
        )
    )
    blocks.append(
        Table(
            [
                "configuration",
                "window",
                "used",
                "with idle",
                "net",
                "per sample",
                "EDP (J·s)",
                "EDP / baseline",
                "EDP with idle / baseline",
                "ED²P / baseline",
            ],
            rows,
            numeric=set(range(2, 10)),
        )
    )
    return blocks


def _kind_table(configs: list[ConfigAnalysis]) -> list[Block]:
    blocks: list[Block] = []
    kind_rows = []
    for c in configs:
        for kind, k in ((c.get("energy") or {}).get("by_kind") or {}).items():
            kind_rows.append(
                [
                    str(c["name"]),
                    kind_name(kind),
                    fmt_joules(k.get("used_j")) if k["available"] else f"not read: {k['reason']}",
                    fmt_stat(k.get("per_sample_j"), "J"),
                    num(k.get("edp")),
                    num(k.get("edp_norm")),
                    num(k.get("ed2p")),
                    num(k.get("ed2p_norm")),
                ]
            )
    if kind_rows:
        blocks.append(
            Para(
                "Per kind of device the runs computed on, the same figures for the devices of "
                "that kind alone: a kind that could be read is reported even where another could "
                "not (the totals above are then not known, never a sum that leaves a device out)."
            )
        )
        blocks.append(
            Table(
                [
                    "configuration",
                    "kind",
                    "used",
                    "per sample",
                    "EDP (J·s)",
                    "EDP / baseline",
                    "ED²P (J·s²)",
                    "ED²P / baseline",
                ],
                kind_rows,
                numeric=set(range(3, 8)),
            )
        )
    return blocks


def _unavailable(configs: list[ConfigAnalysis]) -> list[Block]:
    why = []
    for c in configs:
        e = c.get("energy") or {}
        if e.get("partial"):
            why.append(f"{c['name']}: {e['partial']}")
        if not e.get("available"):
            continue
        for key, what in (("with_idle_reason", "with idle"), ("net_reason", "net")):
            if e.get(key):
                why.append(f"{c['name']}: {what} unavailable: {e[key]}")
    return [Bullets(why)] if why else []


def _source_blocks(configs: list[ConfigAnalysis], results: Results) -> list[Block]:
    sources = []
    for c in configs:
        e = c.get("energy") or {}
        if e.get("available"):
            used = "; ".join(str(s) for s in e.get("sources") or []) or "–"
            sources.append(f"{c['name']}: {used}")
        else:
            sources.append(f"{c['name']}: unavailable: {e.get('reason') or 'no energy run'}")
    blocks: list[Block] = []
    blocks.append(Heading(3, "Energy sources"))
    blocks.append(Para("Where each configuration's energy comes from (method, device, period):"))
    blocks.append(Bullets(sources))
    src = energy_sources(results)
    blocks.append(Para("Per device, over every completed energy run:"))
    if src:
        blocks.append(
            Table(
                ["configuration", "host", "device", "kind", "method", "period", "used", "reason"],
                src,
            )
        )
    else:
        blocks.append(Para("No energy run completed, so no device was sampled.", "note"))
    return blocks


def _idle_blocks(idle: Any) -> list[Block]:
    blocks: list[Block] = []
    blocks.append(Heading(3, "Idle power"))
    devices = idle.get("devices") if isinstance(idle, dict) else None
    if devices:
        blocks.append(
            Para(
                f"Measured before the matrix for {num(idle.get('seconds'))} s, sampled every "
                f"{num(idle.get('interval_s'))} s."
            )
        )
        blocks.append(
            Table(
                ["host", "device", "kind", "method", "idle power", "reason"],
                [
                    [
                        str(d.get("host")),
                        str(d.get("name")),
                        str(d.get("kind")),
                        str(d.get("method")),
                        f"{num(d.get('watts'))} W" if d.get("watts") is not None else "–",
                        str(d.get("reason") or ""),
                    ]
                    for d in devices
                    if isinstance(d, dict)
                ],
                numeric={4},
            )
        )
    else:
        blocks.append(
            Para(
                "unavailable: no idle.json (the idle power was not measured before the matrix), "
                "so net energies (above idle power) could not be computed.",
                "note",
            )
        )
    return blocks
