"""Reference values with tolerances, and the check of a result against them (ReFrame's form).

In the matrix file (or a file of its own given to ``hpcbench check --references``)::

    [reference]
    "1gpu" = { samples_per_s = [4400, -0.05, 0.10], test_accuracy = [0.9, -0.02, inf] }
    "hydra:1gpu" = { samples_per_s = [4100, -0.05, 0.10, "samples/s"] }
    "*" = { efficiency = [1.0, -0.3, inf] }

Each key is a configuration (``*``: every configuration), or ``PROFILE:CONFIG`` for one cluster
profile only (``PROFILE:*`` too); the most specific key that names a figure wins. Each figure is
``[reference, lower, upper]`` and optionally its unit: the median must lie within
``reference + |reference| × lower`` and ``reference + |reference| × upper`` (``lower`` ≤ 0 ≤
``upper``; ``inf`` and ``-inf`` leave a side open). The figures are those of
:mod:`hpcbench.bench.analysing.key_figures` (a doctor run's: :mod:`hpcbench.doctor.figures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpcbench.bench.analysing.key_figures import FIGURE_NAMES, UNITS, analysis_figures
from hpcbench.bench.reading.run_lines import failure_cause
from hpcbench.files import printable

if TYPE_CHECKING:
    from hpcbench.bench.analysing.key_figures import Figure
    from hpcbench.bench.analysis_types import Analysis
    from hpcbench.bench.reading.results_documents import References


class ReferenceError(ValueError):
    """A malformed reference table (one line naming the file and key)."""


@dataclass
class Outcome:
    """One figure of one configuration against its reference."""

    config: str
    figure: str
    key: str  # the reference key it came from
    reference: float
    low: float
    high: float
    value: float | None
    unit: str

    @property
    def ok(self) -> bool:
        return self.value is not None and self.low <= self.value <= self.high

    def line(self) -> str:
        bounds = f"[{_num(self.low)}, {_num(self.high)}]"
        unit = f" {self.unit}" if self.unit else ""
        if self.value is None:
            return (
                f"{self.config} {self.figure}: not measured; reference {_num(self.reference)}"
                f"{unit} ({self.key}), allowed {bounds}"
            )
        off = (self.value - self.reference) / abs(self.reference) if self.reference else math.nan
        rel = f", {off:+.1%} from the reference" if math.isfinite(off) else ""
        verdict = "within" if self.ok else "out of tolerance:"
        return (
            f"{self.config} {self.figure}: {_num(self.value)}{unit} {verdict} "
            f"{bounds} (reference {_num(self.reference)}{rel}; {self.key})"
        )


def _num(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def check_references(table: Any, where: str) -> References:
    """The reference table, checked: key -> figure -> [reference, lower, upper, unit]."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ReferenceError(f"{where}: reference: expected a table of configurations")
    out: dict[str, dict[str, list[Any]]] = {}
    for key, figures in table.items():
        place = f"{where}: reference.{key}"
        profile, sep, config = key.rpartition(":")
        if not config or (sep and not profile):
            raise ReferenceError(f"{place}: expected CONFIG, *, PROFILE:CONFIG or PROFILE:*")
        if not isinstance(figures, dict) or not figures:
            raise ReferenceError(f"{place}: expected a table of figures (e.g. samples_per_s)")
        out[key] = {}
        for figure, spec in figures.items():
            if figure not in FIGURE_NAMES:
                raise ReferenceError(
                    f"{place}.{figure}: unknown figure (known: {', '.join(FIGURE_NAMES)})"
                )
            out[key][figure] = _check_spec(spec, f"{place}.{figure}")
    return out


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


_OPEN = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf}


def as_json(references: References) -> References:
    """The references with open sides as ``"inf"``/``"-inf"`` (JSON has no infinity; the
    check reads both)."""
    return {
        key: {
            fig: [("inf" if v > 0 else "-inf") if isinstance(v, float) and math.isinf(v) else v
                  for v in spec]
            for fig, spec in figures.items()
        }
        for key, figures in references.items()
    }  # fmt: skip


def _check_spec(spec: Any, place: str) -> list[Any]:
    if isinstance(spec, list):
        spec = [_OPEN.get(v, v) if isinstance(v, str) and i in (1, 2) else v
                for i, v in enumerate(spec)]  # fmt: skip
    if not isinstance(spec, list) or len(spec) not in (3, 4):
        raise ReferenceError(
            f"{place}: expected [reference, lower, upper] (and a unit), got {spec!r}"
        )
    ref, lower, upper = spec[:3]
    if not (_number(ref) and math.isfinite(ref)):
        raise ReferenceError(f"{place}: the reference must be a finite number, got {ref!r}")
    if not _number(lower) or lower > 0:
        raise ReferenceError(f"{place}: lower must be a number <= 0 (or -inf), got {lower!r}")
    if not _number(upper) or upper < 0:
        raise ReferenceError(f"{place}: upper must be a number >= 0 (or inf), got {upper!r}")
    unit = spec[3] if len(spec) == 4 else ""
    if not isinstance(unit, str) or len(unit) > 20:
        raise ReferenceError(f"{place}: the unit must be a short string, got {unit!r}")
    return [float(ref), float(lower), float(upper), unit]


def _bound(ref: float, tolerance: float) -> float:
    """``ref + |ref| × tolerance``; an infinite tolerance leaves that side open."""
    return tolerance if math.isinf(tolerance) else ref + abs(ref) * tolerance


def _lookup(
    references: dict[str, dict[str, list[Any]]], profile: str | None, config: str
) -> dict[str, tuple[str, list[Any]]]:
    """figure -> (key, spec) for one configuration, the most specific key winning."""
    keys = ["*", config]
    if profile:
        keys += [f"{profile}:*", f"{profile}:{config}"]
    chosen: dict[str, tuple[str, list[Any]]] = {}
    for key in keys:  # later (more specific) keys replace earlier ones
        for figure, spec in references.get(key, {}).items():
            chosen[figure] = (key, spec)
    return chosen


def check(
    analysis: Analysis,
    references: References,
    profile: str | None = None,
) -> list[Outcome]:
    """Every referenced figure of every configuration against its tolerance. A reference for
    a configuration these results do not have is an outcome without a value (a failure): a
    renamed configuration must not pass silently."""
    return check_figures(analysis_figures(analysis), references, profile)


def check_figures(
    figures: dict[str, dict[str, Figure]],
    references: References,
    profile: str | None = None,
    *,
    wildcards_where_measured: bool = False,
) -> list[Outcome]:
    """:func:`check` of figures however measured (config -> figure -> statistic). With
    ``wildcards_where_measured`` (a doctor's nodes, links and pairs, which measure different
    figures), a ``*`` key's figure applies only to the configurations that have it."""
    outcomes = []
    named = {
        key.rpartition(":")[2]
        for key in references
        if key.rpartition(":")[2] != "*" and key.rpartition(":")[0] in ("", profile)
    }
    for config in [*figures, *sorted(named - set(figures))]:
        for figure, (key, (ref, lower, upper, unit)) in _lookup(
            references, profile, config
        ).items():
            stat = figures.get(config, {}).get(figure)
            if stat is None and wildcards_where_measured and key.rpartition(":")[2] == "*":
                continue
            value = float(stat["median"]) if stat else None
            outcomes.append(
                Outcome(
                    config,
                    figure,
                    key,
                    ref,
                    _bound(ref, lower),
                    _bound(ref, upper),
                    value,
                    unit or UNITS[figure],
                )
            )
    return outcomes


def failed_run_lines(results: Any) -> list[str]:
    """One line per configuration and kind of run with failed runs (``check`` fails on them):
    how many of how many, and the first failure's cause in one line
    (:func:`~hpcbench.bench.reading.run_lines.failure_cause`: ``rank 1: RuntimeError: …``)."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for run in results.runs:
        groups.setdefault((run.config, run.kind), []).append(run)
    lines = []
    for (config, kind), runs in groups.items():
        bad = [r for r in runs if r.status == "failed"]
        if bad:
            why = next((failure_cause(r.error) for r in bad if r.error), "") or "no reason recorded"
            lines.append(
                f"{printable(config)}: {len(bad)} of {len(runs)} {kind} run(s) failed "
                f"({printable(why)})"
            )
    return lines
