"""How ``hpcbench watch`` shows a :class:`~.snapshot.Snapshot`: plain lines (a log, a pipe:
no cursor movement, one block per refresh) or rich tables redrawn in place on a terminal (the
``rich`` library). Both say the same: per run its state, progress, samples/s, ETA and last
loss; per rank of a running run its step, compute, data and communication time per step (``not
measured`` where the program does not mark that part), CPU cores or GPU busy, and the straggler
flag; and a line per telemetry file with lines that were not a record (skipped, counted)."""

from __future__ import annotations

import math
import time
from typing import Any

from hpcbench.files import printable
from hpcbench.measure.telemetry_files import skipped_line
from hpcbench.watch.snapshot import ItemRow, RankRow, Snapshot


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _ms(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value * 1000:.1f} ms"


def counted(snap: Snapshot) -> str:
    """Its runs counted by state: ``2 completed, 1 running``."""
    return ", ".join(f"{n} {printable(state)}" for state, n in sorted(snap.counts().items()))


def heading(snap: Snapshot) -> str:
    counts = counted(snap)
    when = time.strftime("%H:%M:%S", time.localtime(snap.at))
    eta = f", ETA {duration(snap.eta_s)} for the whole" if snap.eta_s else ""
    name = printable(snap.target.name)
    return f"{when} {snap.target.kind} {name}: {counts or 'nothing yet'}{eta}"


def progress(row: ItemRow) -> str:
    """The run's position: epoch, step of steps, samples/s, ETA, last loss."""
    lead = row.lead
    if lead is None:
        return ""
    parts = []
    if isinstance(lead.get("epoch"), int):
        of = f"/{lead['epochs']}" if isinstance(lead.get("epochs"), int) else ""
        parts.append(f"epoch {lead['epoch'] + 1}{of}")
    of = lead.get("of")
    share = f" ({lead['step'] / of:.0%})" if isinstance(of, int) and of else ""
    parts.append(f"step {lead['step']}{'/' + str(of) if of else ''}{share}")
    rate = row.samples_per_s
    if rate is not None:
        parts.append(f"{rate:,.0f} samples/s")
    if row.eta_s is not None:
        parts.append(f"ETA {duration(row.eta_s)}")
    if isinstance(lead.get("loss"), (int, float)):
        parts.append(f"loss {lead['loss']:.4g}")
    age = time.time() - lead["t"] if isinstance(lead.get("t"), (int, float)) else None
    if age is not None and age > STALE_AFTER_S + 3 * (lead.get("wall_s") or 0):
        parts.append(f"no record for {duration(age)}")  # stopped, hung, or its node lost
    return "  ".join(parts)


STALE_AFTER_S = 60.0
MAX_RANK_ROWS = 32  # a terminal's worth: the stragglers first


def use(rec: dict[str, Any]) -> str:
    if isinstance(rec.get("gpu_util"), (int, float)):
        return f"gpu {rec['gpu_util']:.0f}%"
    return f"cpu {rec['cpu_cores']:.1f}" if isinstance(rec.get("cpu_cores"), (int, float)) else "-"


def _loss(rec: dict[str, Any]) -> str:
    loss = rec.get("loss")
    return f"{loss:.4g}" if isinstance(loss, (int, float)) else "-"


def flag(rank: RankRow) -> str:
    s = rank.straggler
    if not s:
        return ""
    return f"STRAGGLER {s['ratio']:.1f}x since step {s['since_step']}"


def lines(snap: Snapshot) -> list[str]:
    """The plain form: a heading, a line per run, a line per rank of each running run."""
    out = [heading(snap)]
    for row in snap.items:
        job = f"  job {printable(row.item.job_id)}" if row.item.job_id else ""
        why = f" ({printable(row.reason)})" if row.reason and row.state != "running" else ""
        state = printable(row.state)
        out.append(f"  {printable(row.item.label)}: {state}{why}{job}  {progress(row)}".rstrip())
        for rank in row.ranks if not row.done else []:
            rec = rank.record
            out.append(
                f"    rank {rank.rank} {printable(rec.get('host') or '?')}: step {rec['step']}  "
                f"compute {_ms(rec.get('compute_s'))}  data {part(rec, 'data')}  "
                f"comm {part(rec, 'comm')}  {use(rec)}  loss {_loss(rec)}  "
                f"{flag(rank)}".rstrip()
            )
        out += [f"    {line}" for line in skipped(row)]
    return out


def part(rec: dict[str, Any], name: str) -> str:
    """A part of the step's time (``data``, ``comm``): ``not measured`` where the program does
    not mark it, ``-`` where it is not known now."""
    if name in (rec.get("not_measured") or ()):
        return "not measured"
    return _ms(rec.get(f"{name}_s"))


def skipped(row: ItemRow) -> list[str]:
    """One line per telemetry file of the run with lines that were not a record."""
    run_dir = row.item.run_dir
    return [skipped_line(path, n, run_dir) for path, n in sorted(row.skipped.items())]


def tables(snap: Snapshot) -> Any:
    """The terminal form: rich tables (runs, then the ranks of each running run)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def text(value: Any, style: str = "") -> Text:  # never read as markup, never an escape
        return Text(printable("" if value is None else value), style=style)

    runs = Table(title=text(heading(snap)), title_justify="left", expand=False)
    for name in ("run", "state", "job", "progress"):
        runs.add_column(name)
    parts: list[Any] = [runs]
    for row in snap.items:
        style = {"failed": "red", "completed": "green"}.get(row.state, "")
        why = f" ({row.reason})" if row.reason and row.state != "running" else ""
        runs.add_row(text(row.item.label), text(row.state + why, style), text(row.item.job_id),
                     text(progress(row)))  # fmt: skip
        if row.done or not row.ranks:
            continue
        ranks = Table(title=text(f"{row.item.label}: ranks"), title_justify="left")
        for name in ("rank", "host", "step", "compute", "data", "comm", "use", "loss", ""):
            ranks.add_column(name, justify="right" if name in ("step", "rank") else "left")
        for rank in sorted(row.ranks, key=lambda r: r.straggler is None)[:MAX_RANK_ROWS]:
            rec = rank.record
            ranks.add_row(
                text(rank.rank), text(rec.get("host") or "?"), text(rec["step"]),
                text(_ms(rec.get("compute_s"))), text(part(rec, "data")),
                text(part(rec, "comm")), text(use(rec)), text(_loss(rec)),
                text(flag(rank), "bold red"),
            )  # fmt: skip
        if len(row.ranks) > MAX_RANK_ROWS:
            ranks.caption = text(f"{len(row.ranks) - MAX_RANK_ROWS} more ranks (piped: all)")
        parts.append(ranks)
        parts += [text(line, "yellow") for line in skipped(row)]
    return Group(*parts)
