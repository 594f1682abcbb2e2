"""Where the ranks' telemetry files (:mod:`.telemetry`) are, and reading those of a run directory that may be anyone's
(``hpcbench watch`` and the report read other people's results too): regular files only, never
through a symbolic link, a bounded number of bytes and of files, and only lines that parse as a
record of the rank the file is named after.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from hpcbench.files import open_regular

DIRECTORY = "telemetry"
#: records a rank's file holds at most (:mod:`.telemetry` merges neighbours beyond)
MAX_RECORDS = 2000

_RANK_FILE = re.compile(r"rank-(\d{1,6})\.jsonl")
MAX_RANKS = 4096
TAIL_BYTES = 16_384
WHOLE_BYTES = 4 * 2**20  # a whole file: MAX_RECORDS lines of a few hundred bytes, and room
MAX_LINE = 4096  # a record is a few hundred characters: a longer line is not one


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


def _number(value: Any, whole: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int):
        return False
    return math.isfinite(value) and value >= 0


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
    )


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_records(text: str, rank: int | None) -> tuple[list[dict[str, Any]], int]:
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


def _parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if well_formed(record) else None


def _records(text: str, rank: int | None) -> list[dict[str, Any]]:
    return parse_records(text, rank)[0]


def read_records(
    path: Path, max_records: int = MAX_RECORDS * 2, strict: bool = False
) -> list[dict[str, Any]]:
    """The records of one rank's file, oldest first (at most ``max_records``, the newest); none
    when it cannot be read (``strict``: the error raised, for the writer's own rewrite)."""
    match = _RANK_FILE.fullmatch(path.name)
    rank = int(match.group(1)) if match else None
    try:
        return _records(_read(path, WHOLE_BYTES), rank)[-max_records:]
    except (OSError, ValueError):
        if strict:
            raise
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


def latest_records(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Rank -> its newest record (a bounded read of each file's end)."""
    out = {}
    for rank, path in rank_files(run_dir).items():
        try:
            records = _records(_read(path, TAIL_BYTES), rank)
        except (OSError, ValueError):
            continue
        if records:
            out[rank] = records[-1]
    return out


def all_records(run_dir: str | Path, max_total: int = 200_000) -> dict[int, list[dict[str, Any]]]:
    """Rank -> its records, oldest first: each rank's newest ones, at most ``max_total`` in all
    (a report of thousands of ranks on a login node stays within memory)."""
    files = rank_files(run_dir)
    each = max(2, max_total // max(1, len(files)))
    out = {}
    for rank, path in files.items():
        records = read_records(path, max_records=each)
        if records:
            out[rank] = records
    return out
