"""What every figure of the report shares: the palette (Okabe–Ito), the style, the figure and
its PNG written to a temporary name and renamed, labels that matplotlib cannot read as TeX,
interval whiskers, and the :class:`Plot` a figure becomes (or the sentence saying why not)."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from hpcbench.atomic import current_umask
from hpcbench.bench.analysis_types import Analysis, ConfigAnalysis
from hpcbench.bench.stats import Estimate, Stat

# Okabe–Ito: distinguishable with the common colour-vision deficiencies, and in greyscale print.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")
DPI = 150
RC = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.bbox": "tight",
}


@dataclass(frozen=True)
class Plot:
    """One figure of the report: drawn (``path`` and ``png``) or missing (``missing`` says why)."""

    key: str
    title: str
    caption: str
    path: Path | None = None
    png: bytes = b""
    missing: str = ""


def label(text: Any) -> str:
    """A string from user data made safe for matplotlib's text: ``$`` would start mathtext."""
    return str(text).replace("$", r"\$")


ACCURACY_SPAN = 25.0  # percentage points the accuracy axis shows at least


def accuracy_range(values: Sequence[float]) -> tuple[float, float]:
    """The accuracy axis (in %): at least :data:`ACCURACY_SPAN` points, inside 0..100, so that a
    2-point gap between curves looks like 2 points and not like the whole axis."""
    lo, hi = min(values), max(values)
    top = min(100.0, hi + 2.0)
    bottom = max(0.0, min(lo - 2.0, top - ACCURACY_SPAN))
    return bottom, max(top, min(100.0, bottom + ACCURACY_SPAN))


def interval(d: Stat | Estimate, centre: float, scale: float = 1.0) -> tuple[float, float]:
    """Distances below and above ``centre`` of the 95 % interval (0, 0 without one)."""
    ci = d.get("ci95")
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2) or None in ci:
        return 0.0, 0.0
    lo, hi = float(ci[0]) * scale, float(ci[1]) * scale
    return max(0.0, centre - lo), max(0.0, hi - centre)


def errors(items: Sequence[tuple[Stat | Estimate, float]]) -> list[list[float]]:
    """matplotlib's yerr (2 × n) from (STAT or EST, plotted centre) pairs."""
    below, above = [], []
    for d, centre in items:
        lo, hi = interval(d, centre) if d else (0.0, 0.0)
        below.append(lo)
        above.append(hi)
    return [below, above]


def colour_of(analysis: Analysis, name: str) -> str:
    """A configuration's colour, the same in every figure (its place in the matrix)."""
    names = [c.get("name") for c in analysis.get("configs", [])]
    i = names.index(name) if name in names else len(names)
    return PALETTE[i % len(PALETTE)]


LINE_STYLES = ("-", "--", "-.", ":")


class PlotStyle(TypedDict):
    """A configuration's curve, as matplotlib's ``plot`` takes it (``**style``)."""

    color: str
    linestyle: str
    marker: str
    markersize: float
    markerfacecolor: str
    markeredgewidth: float


MARKERS = "osD^v<>P"


def style_of(analysis: Analysis, name: str) -> PlotStyle:
    """A configuration's curve, the same in every figure (its place in the matrix): its colour,
    a line style and a hollow marker of its own, the markers of later configurations smaller, so
    that curves lying on each other all stay visible (each marker nested in the one below)."""
    names = [c.get("name") for c in analysis.get("configs", [])]
    i = names.index(name) if name in names else len(names)
    return {
        "color": colour_of(analysis, name),
        "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
        "marker": MARKERS[i % len(MARKERS)],
        "markersize": 9.0 - 1.5 * (i % 4),
        "markerfacecolor": "none",
        "markeredgewidth": 1.5,
    }


def new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save(fig, out_dir: Path, key: str) -> tuple[Path, bytes]:
    """The figure as PNG bytes, written to ``out_dir/key.png`` through a temporary file."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    png = buf.getvalue()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{key}.png"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(png)
        os.chmod(tmp, 0o644 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path, png


def xticks(ax, names: Sequence[str]) -> None:
    ax.set_xticks(range(len(names)))
    long = len(names) > 5 or max((len(n) for n in names), default=0) > 12
    ax.set_xticklabels(
        [label(n) for n in names], rotation=30 if long else 0, ha="right" if long else "center"
    )


def mark_unavailable(ax, configs: Sequence[ConfigAnalysis], key: str) -> None:
    from matplotlib.transforms import blended_transform_factory

    trans = blended_transform_factory(ax.transData, ax.transAxes)
    for i, c in enumerate(configs):
        if not (c.get("energy") or {}).get(key):
            ax.text(i, 0.02, "n/a", ha="center", va="bottom", color="#b00020", transform=trans)


def no_runs(analysis: Analysis) -> str:
    """Why a figure has no time: no run completed (and how many failed)."""
    n = sum((c.get("runs") or {}).get("failed", 0) for c in analysis.get("configs", []))
    return "No time figure: no run completed" + (
        f" ({n} failed; see Failed runs)." if n else " yet."
    )
