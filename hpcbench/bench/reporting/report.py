"""``hpcbench report RESULTS``: the benchmark's results as a Markdown file and one self-contained
HTML page (figures embedded as PNG data URIs, CSS inline, no external URL, no JavaScript), plus
the figures as PNG files and the analysis tables as CSV.

The numbers come from :func:`hpcbench.bench.analysing.analysis.analyse`; what the analysis dict does not
hold (each run's status, error and job id, the provenance, the energy sources and samples) comes
from the :class:`~hpcbench.bench.reading.results_reader.Results` it was made from: the report opens no file of
the results directory. The report is built once as a list of blocks and written
twice, so both files say the same; every string from those files is user data, escaped for the
format it lands in. Documented in docs/report.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.bench.analysing.analysis import analyse, factors_of
from hpcbench.bench.analysis_types import Analysis
from hpcbench.bench.reading.results_documents import RunRecord
from hpcbench.bench.reading.results_reader import Results, load_results
from hpcbench.bench.reporting import figures
from hpcbench.bench.reporting.document import (
    Block,
    Bullets,
    Heading,
    Image,
    Para,
    to_html,
    to_markdown,
)
from hpcbench.bench.reporting.formatting import num, when
from hpcbench.bench.reporting.power_traces import power_traces
from hpcbench.bench.reporting.report_accounting import accounting_blocks, estimate_blocks
from hpcbench.bench.reporting.report_compare import lead_blocks, pairwise_blocks
from hpcbench.bench.reporting.report_energy import energy_blocks
from hpcbench.bench.reporting.report_ranks import rank_blocks
from hpcbench.bench.reporting.report_runs import closing_blocks, failed_summary
from hpcbench.bench.reporting.report_tables import (
    accuracy_table,
    config_table,
    scaling_table,
    time_table,
    total_phases,
)
from hpcbench.bench.reporting.tables import write_tables


class ReportError(ValueError):
    """A results directory the report cannot read; the message names the file."""


# ---------------------------------------------------------------------------------------------
# The report's sections

_PHASE_WORDS = {"setup": "set-up", "train": "training", "val": "validation", "test": "test"}


def _total_words() -> str:
    phases = total_phases()
    text = " + ".join(_PHASE_WORDS.get(p, p) for p in phases)
    if "setup" not in phases:
        text += " (set-up, shown on its own, is left out, as MLPerf and the throughput do)"
    return text


def _differences(analysis: Analysis) -> list[str]:
    out = []
    for d in analysis.get("differences") or []:
        ratio = d.get("ratio")
        if not isinstance(ratio, (int, float)):
            continue
        verdict = (
            "the 95 % intervals do not overlap: a real difference"
            if d.get("significant")
            else "the intervals overlap: not distinguishable from noise at this sample size"
        )
        metric = {"total": "total time", "train": "train time", "used_j": "energy"}.get(
            str(d.get("metric")), str(d.get("metric"))
        )
        out.append(f"{d.get('a')} ÷ {d.get('b')}, {metric}: {num(ratio)}; {verdict}")
    return out


def _summary_blocks(analysis: Analysis, runs: Sequence[RunRecord]) -> list[Block]:
    """The summary's sentences, the baselines, failed and shared runs, the differences."""
    blocks: list[Block] = lead_blocks(analysis)  # what the noise carries, and different work
    sentences = [str(s) for s in analysis.get("sentences") or []]
    blocks.append(Bullets(sentences) if sentences else Para("The analysis found nothing to say."))
    base = analysis.get("baselines") or {}
    blocks.append(
        Para(
            f"Baselines: CPU {base.get('cpu') or 'none'}, one device "
            f"{base.get('one_device') or 'none'}. Times are seconds per run (the slowest "
            f"rank's for training): total = {_total_words()}. Each cell gives the median over "
            "the completed timing runs, its 95 % bootstrap interval in brackets, and n, the "
            "number of runs."
        )
    )
    blocks += failed_summary(runs)
    shared = [r for r in runs if r.get("shared")]
    if shared:
        which = ", ".join(f"{r.get('config')} {r.get('kind')} {r.get('rep')}" for r in shared[:8])
        blocks.append(
            Para(
                f"{len(shared)} of {len(runs)} runs started while other work shared this "
                f"machine ({which}{', …' if len(shared) > 8 else ''}): their times carry it, "
                "and differences between configurations may be the machine's load. Run the "
                "matrix on an idle machine or a cluster's nodes.",
                "warn",
            )
        )
    diffs = _differences(analysis)
    if diffs:
        blocks += [Heading(3, "Against the one-device baseline"), Bullets(diffs)]

    return blocks


def _figure_blocks(plots: Sequence[Any], out_dir: Path) -> list[Block]:
    """Each figure, or the reason it could not be drawn."""
    blocks: list[Block] = []
    for p in plots:
        blocks.append(Heading(3, p.title))
        if p.path is None:
            blocks.append(Para(p.missing, "note"))
        else:
            rel = p.path.relative_to(out_dir).as_posix()
            blocks.append(Image(p.title, p.caption, rel, p.png))

    return blocks


def build_blocks(
    results: Results,
    analysis: Analysis,
    plots: Sequence[Any],
    tables: Sequence[Path],
    out_dir: Path,
) -> list[Block]:
    """The whole report as blocks (the order of docs/report.md)."""
    bench = results.bench
    runs = [run.record for run in results.runs]
    matrix = bench.get("matrix") or {}
    name = matrix.get("name") or results.directory.name
    prov = bench.get("provenance") or {}
    blocks: list[Block] = [
        Heading(1, f"Benchmark report: {name}"),
        Para(
            f"Results directory {results.directory}; matrix created {bench.get('created', '–')}; "
            f"hpcbench {prov.get('hpcbench', '–')}, git {prov.get('git') or '–'}; report "
            f"written {when(time.time())}.",
            "",
        ),
        Heading(2, "Summary", "summary"),
    ]
    blocks += _summary_blocks(analysis, runs)
    blocks.append(Heading(2, "Figures", "figures"))
    blocks += _figure_blocks(plots, out_dir)
    blocks += [Heading(2, "Configurations", "configs"), config_table(bench, analysis)]
    blocks += [Heading(2, "Time", "time"), time_table(analysis)]
    blocks += [
        Heading(2, "Scaling", "scaling"),
        Para(
            "Speedup = median time of the baseline ÷ median time of the configuration; "
            "efficiency = speedup over one device ÷ p; Karp–Flatt e = (1/S − 1/p) ÷ (1 − 1/p) "
            "is the serial fraction the measured speedup implies (0 is perfect scaling; a value "
            "that grows with p points to overheads such as communication, not to serial code). "
            "The train-loop columns use the training time alone. A speedup marked weak "
            "scaling compares a configuration that trained another global batch than the "
            "reference: different work per step."
        ),
        scaling_table(analysis),
        Heading(2, "Configurations against each other", "pairwise"),
        *pairwise_blocks(analysis),
    ]
    blocks += [Heading(2, "Accuracy", "accuracy"), accuracy_table(analysis)]
    if analysis.get("energy_asked", True):  # no energy run asked for: no section to fill
        blocks += [Heading(2, "Energy", "energy")]
        blocks += energy_blocks(analysis, results)

    blocks += [
        Heading(2, "What the scheduler recorded", "accounting"),
        *accounting_blocks(analysis),
    ]
    if estimated := estimate_blocks(analysis, factors_of(results)):
        blocks += [Heading(2, "Carbon and cost (estimates)", "estimates"), *estimated]
    blocks += [Heading(2, "Ranks: stragglers and traces", "ranks"), *rank_blocks(results, out_dir)]

    return blocks + closing_blocks(results, tables, out_dir)


def render_report(
    results_dir: Results | str | Path,
    analysis: Analysis,
    out_dir: str | Path,
    tables: Sequence[Path] = (),
) -> list[Path]:
    """Write the report of ``analysis`` (the dict of :func:`hpcbench.bench.analysing.analysis.analyse` for
    ``results_dir``: its :class:`~hpcbench.bench.reading.results_reader.Results`, or the directory, then read by
    :func:`~hpcbench.bench.reading.results_reader.load_results`)
    into ``out_dir``: the figures, ``report.md`` and ``report.html``; ``tables`` are the CSV files
    already written there, listed in the report. Returns the paths written, ``report.md`` and
    ``report.html`` first."""
    results = results_dir if isinstance(results_dir, Results) else load_results(results_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig_dir = out / "figures"
    plots = figures.render_all(analysis, power_traces(results), fig_dir, total_phases())
    for p in plots:  # a figure drawn by an earlier report but missing now must not linger
        if p.path is None:
            (fig_dir / f"{p.key}.png").unlink(missing_ok=True)
    blocks = build_blocks(results, analysis, plots, tables, out)
    title = blocks[0].text if isinstance(blocks[0], Heading) else "Benchmark report"
    md = write_atomically(out / "report.md", to_markdown(blocks))
    page = write_atomically(out / "report.html", to_html(blocks, title))
    return [md, page] + [p.path for p in plots if p.path is not None] + list(tables)


def require_matplotlib() -> None:
    """:class:`ReportError` in one line when matplotlib (the ``report`` extra) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportError(
            "hpcbench report needs matplotlib: pip install 'hpcbench[report]'"
        ) from None


REPORT_MARK = ".hpcbench-report"  # in a directory hpcbench report wrote: it may write there again


def claim_output(out: Path) -> None:
    """Make ``out`` the report's directory, refusing one that holds anything else: the report
    replaces its own files (and removes its stale figures), never a user's."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"--output {out}: is a file, not a directory")
    if out.is_dir() and not (out / REPORT_MARK).is_file() and any(out.iterdir()):
        raise ReportError(
            f"--output {out}: holds files that hpcbench report did not write; give a new "
            "or empty directory"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_atomically(
            out / REPORT_MARK, "written by hpcbench report; it may replace its files here\n"
        )
    except OSError as err:
        raise ReportError(f"--output {out}: cannot write there ({err.strerror or err})") from None


def build_report(results_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Analyse ``results_dir`` and write the report into ``out_dir`` (default
    ``results_dir/report``): ``report.md``, ``report.html`` (self-contained), ``figures/*.png``
    and ``tables/*.csv``. Returns the paths written, ``report.md`` and ``report.html`` first.
    :class:`ReportError` without matplotlib; the analysis' own error (one line naming the file)
    for a directory that is not a benchmark's results."""
    require_matplotlib()
    directory = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else directory / "report"
    results = load_results(directory)
    analysis = analyse(results)
    claim_output(out)
    tables = [Path(t) for t in write_tables(analysis, out / "tables")]
    return render_report(results, analysis, out, tables)
