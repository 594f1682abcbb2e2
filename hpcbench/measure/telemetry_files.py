"""Where the ranks' telemetry files (:mod:`.telemetry`) are, and reading those of a run
directory that may be anyone's (``hpcbench watch`` and the report read other people's results
too): regular files only, never through a symbolic link, a bounded number of bytes and of files,
and only lines that parse as a record of the rank the file is named after (every number finite,
of its kind and at most :data:`MAX_NUMBER`). A line that is not one is skipped, never an error;
the readers count them per file (``skipped``) for a one-line note (:func:`skipped_line`).

A line of those files, one telemetry record, is typed here as :class:`TelemetryRecord` (its
layout in :mod:`.telemetry`, which writes it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from hpcbench.files import open_regular, printable

if TYPE_CHECKING:
    from typing_extensions import NotRequired

DIRECTORY = "telemetry"
#: where a reader counts the lines that were not a record: path -> how many (None: not counted)
Skipped = dict[Path, int] | None
#: records a rank's file holds at most (:mod:`.telemetry` merges neighbours beyond)
MAX_RECORDS = 2000

_RANK_FILE = re.compile(r"rank-(\d{1,6})\.jsonl")
MAX_RANKS = 4096
TAIL_BYTES = 16_384
WHOLE_BYTES = 4 * 2**20  # a whole file: MAX_RECORDS lines of a few hundred bytes, and room
MAX_LINE = 4096  # a record is a few hundred characters: a longer line is not one


class TelemetryRecord(TypedDict):
    """One line of ``telemetry/rank-N.jsonl`` (format ``v`` 1): where the rank is, and what it
    did over the interval since its last record (per-step means; None where not measured)."""

    v: int
    rank: int
    host: str
    world: int
    t: float
    epoch: int
    step: int
    of: int | None
    epochs: int | None
    samples: int
    steps: int
    wall_s: float
    samples_per_s: float | None
    compute_s: float | None
    data_s: float | None
    comm_s: float | None
    loss: float | None
    cpu_cores: float | None
    rss_mb: float | None
    gpu_util: float | None
    gpu_mem_mb: float | None
    not_measured: NotRequired[list[str]]


def telemetry_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / DIRECTORY


def rank_file(run_dir: str | Path, rank: int) -> Path:
    return telemetry_dir(run_dir) / f"rank-{rank}.jsonl"


def _read(path: Path, max_bytes: int) -> str:
    """The last ``max_bytes`` of the regular file at ``path`` (from a line's start)."""
    fd = open_regular(path, follow_symlinks=False)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            f.seek(size - max_bytes)
            data = f.read(max_bytes)
            data = data[data.find(b"\n") + 1 :]
        else:
            data = f.read(max_bytes)
    return data.decode("utf-8", "replace")


#: the fields a record must hold as numbers (None allowed where a reading can be missing)
WHOLE = ("step", "steps", "samples")
NUMBERS = ("t", "wall_s")
MAYBE = ("compute_s", "data_s", "comm_s", "samples_per_s", "cpu_cores", "rss_mb", "gpu_util",
         "gpu_mem_mb")  # fmt: skip
MAYBE_WHOLE = ("of", "epoch", "epochs")


#: no field of a record is larger (a step count, a Unix time, samples, megabytes): a larger
#: number is someone else's line, and would overflow the readers' sums and estimates
MAX_NUMBER = 1e15


def _number(value: Any, whole: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int):
        return False
    return 0 <= value <= MAX_NUMBER  # NaN compares false: left out too


def well_formed(record: Any) -> bool:
    """Whether a parsed line is a record this code can read (every number a finite one of its
    kind, the host a short text): a line of someone else's, or damaged, is left out."""
    if not isinstance(record, dict) or not isinstance(record.get("rank"), int):
        return False
    host = record.get("host")
    if host is not None and not (isinstance(host, str) and len(host) <= 256):
        return False
    return (
        all(_number(record.get(k), whole=True) for k in WHOLE)
        and all(_number(record.get(k)) for k in NUMBERS)
        and all(record.get(k) is None or _number(record[k]) for k in MAYBE)
        and all(record.get(k) is None or _number(record[k], whole=True) for k in MAYBE_WHOLE)
        and (record.get("loss") is None or _finite(record["loss"]))
        and (record.get("not_measured") is None or _parts(record["not_measured"]))
    )


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return -MAX_NUMBER <= value <= MAX_NUMBER


def _parts(value: Any) -> bool:
    """``not_measured``: the parts of a step the program does not mark (``data``, ``comm``)."""
    return (
        isinstance(value, list)
        and len(value) <= 8
        and all(isinstance(v, str) and len(v) <= 16 for v in value)
    )


def parse_records(text: str, rank: int | None) -> tuple[list[TelemetryRecord], int]:
    """The records among ``text``'s lines (of ``rank`` when given), and how many lines were
    not one; an unended last line (being written) is neither."""
    out, bad = [], 0
    lines = text.split("\n")
    for line in lines[:-1] if not text.endswith("\n") else lines:
        if not line.strip():
            continue
        if len(line) <= MAX_LINE:
            record = _parse(line)
            if record is not None and (rank is None or record["rank"] == rank):
                out.append(record)
                continue
        bad += 1
    return out, bad


def _parse(line: str) -> TelemetryRecord | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if well_formed(record) else None


def skipped_line(path: Path, count: int, run_dir: str | Path | None = None) -> str:
    """One line naming a rank's file and the lines of it that were not records."""
    shown = path
    if run_dir is not None:
        try:
            shown = path.relative_to(run_dir)
        except ValueError:
            pass
    lines = "line" if count == 1 else "lines"
    return f"{printable(shown)}: {count} {lines} skipped (not a telemetry record)"


def _read_records(path: Path, max_bytes: int, skipped: Skipped) -> list[TelemetryRecord]:
    """The records of one rank's file (its last ``max_bytes``), the lines that were not one
    counted in ``skipped``."""
    match = _RANK_FILE.fullmatch(path.name)
    records, bad = parse_records(_read(path, max_bytes), int(match.group(1)) if match else None)
    if bad and skipped is not None:
        skipped[path] = bad
    return records


def read_records(
    path: Path, max_records: int = MAX_RECORDS * 2, skipped: Skipped = None
) -> list[TelemetryRecord]:
    """The records of one rank's file, oldest first (at most ``max_records``, the newest); none
    when it cannot be read. ``skipped``: path -> the lines that were not a record."""
    try:
        return _read_records(path, WHOLE_BYTES, skipped)[-max_records:]
    except (OSError, ValueError):
        return []


def rank_files(run_dir: str | Path) -> dict[int, Path]:
    """Rank -> its telemetry file in ``run_dir`` (at most :data:`MAX_RANKS`)."""
    found: dict[int, Path] = {}
    directory = telemetry_dir(run_dir)
    if directory.is_symlink():  # somewhere else: not this run's
        return {}
    try:
        with os.scandir(directory) as entries:
            for n, entry in enumerate(entries):
                if n >= 4 * MAX_RANKS:  # a directory of anything else: looked at, bounded
                    break
                match = _RANK_FILE.fullmatch(entry.name)
                if match and entry.is_file(follow_symlinks=False):
                    found[int(match.group(1))] = Path(entry.path)
                    if len(found) >= MAX_RANKS:
                        break
    except OSError:
        return {}
    return dict(sorted(found.items()))


def latest_records(run_dir: str | Path, skipped: Skipped = None) -> dict[int, TelemetryRecord]:
    """Rank -> its newest record (a bounded read of each file's end; ``skipped``: path -> the
    lines there that were not a record)."""
    out = {}
    for rank, path in rank_files(run_dir).items():
        try:
            records = _read_records(path, TAIL_BYTES, skipped)
        except (OSError, ValueError):
            continue
        if records:
            out[rank] = records[-1]
    return out


def all_records(
    run_dir: str | Path, max_total: int = 200_000, skipped: Skipped = None
) -> dict[int, list[TelemetryRecord]]:
    """Rank -> its records, oldest first: each rank's newest ones, at most ``max_total`` in all
    (a report of thousands of ranks on a login node stays within memory); ``skipped``: path ->
    the lines that were not a record."""
    files = rank_files(run_dir)
    each = max(2, max_total // max(1, len(files)))
    out = {}
    for rank, path in files.items():
        records = read_records(path, max_records=each, skipped=skipped)
        if records:
            out[rank] = records
    return out
