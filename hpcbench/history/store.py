"""The results store: one SQLite file (the standard library's ``sqlite3``), kept in the user's
data directory (``$XDG_DATA_HOME/hpcbench/history.sqlite``, else
``~/.local/share/hpcbench/history.sqlite``) or where ``$HPCBENCH_HISTORY`` says.

Two tables: ``results`` (one row per recorded bench results directory or training run: when,
its name, kind, directory, profile, git revision, hosts, package versions, the matrix, the whole
analysis and provenance as JSON) and ``figures`` (one row per configuration and figure: median,
95 % interval, repetitions) for listing and filtering. A results directory recorded twice with
the same runs is one record (its fingerprint: the directory and its ``runs.json``).

Several writers at once (two bench runs finishing together, several login nodes on a shared
home) are SQLite's business: every write is one ``BEGIN IMMEDIATE`` transaction, waiting up to
a minute for the lock; the journal is WAL on local filesystems, and the classic rollback journal
on network filesystems (NFS, Lustre, GPFS, BeeGFS, CIFS), where WAL's shared memory does not work.
A file that is not an hpcbench history is refused, never changed.

A result read back is an :class:`Entry`: the documents it was recorded from keep their types
(:class:`~hpcbench.bench.reading.results_documents.MatrixRecord`,
:class:`~hpcbench.bench.analysis_types.Analysis`, the bench's or the run's provenance), its
figures each a :class:`~hpcbench.bench.analysing.key_figures.Figure`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcbench.bench.analysing.key_figures import Figure
    from hpcbench.bench.analysis_types import Analysis
    from hpcbench.bench.reading.results_documents import BenchProvenance, MatrixRecord
    from hpcbench.run_documents import Provenance

HISTORY_VAR = "HPCBENCH_HISTORY"
HISTORY_FORMAT = "hpcbench-history/1"
LOCK_WAIT_S = 60.0
NETWORK_FILESYSTEMS = (
    "nfs",
    "nfs4",
    "lustre",
    "gpfs",
    "beegfs",
    "cifs",
    "smb3",
    "smbfs",
    "ceph",
    "fuse.sshfs",
    "fuse.glusterfs",
    "panfs",
    "9p",
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    directory TEXT NOT NULL,
    fingerprint TEXT NOT NULL UNIQUE,
    profile TEXT,
    git TEXT,
    hosts TEXT,
    versions TEXT,
    matrix TEXT,
    analysis TEXT,
    provenance TEXT
);
CREATE TABLE IF NOT EXISTS figures (
    result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
    config TEXT NOT NULL,
    metric TEXT NOT NULL,
    median REAL,
    low REAL,
    high REAL,
    n INTEGER,
    PRIMARY KEY (result_id, config, metric)
);
CREATE INDEX IF NOT EXISTS results_by_name ON results (name, recorded_at);
"""


class HistoryError(ValueError):
    """The store cannot be used (one line naming the file)."""


@dataclass
class Entry:
    """One recorded result."""

    id: int
    recorded_at: str
    kind: str
    name: str
    directory: str
    profile: str | None
    git: str | None
    hosts: list[str]
    versions: dict[str, str | None]
    matrix: MatrixRecord | None
    analysis: Analysis | None
    provenance: BenchProvenance | Provenance
    figures: dict[str, dict[str, Figure]]  # config -> metric -> stat

    @property
    def label(self) -> str:
        return f"#{self.id} {self.name} ({self.recorded_at})"


def history_path() -> Path:
    """Where the store is: ``$HPCBENCH_HISTORY``, else the user's data directory."""
    if explicit := os.environ.get(HISTORY_VAR):
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hpcbench" / "history.sqlite"


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem holding ``path`` (Linux's /proc/self/mounts), else None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    best, kind = "", None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


class History:
    """The results store at ``path`` (default :func:`history_path`), opened on first use."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else history_path()
        self._db: sqlite3.Connection | None = None
        self.journal = ""

    # ------------------------------------------------------------------------- opening

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self.path.is_dir():
            raise HistoryError(f"{self.path}: is a directory, not a history file")
        if not self.path.exists():  # made here, readable by its owner alone
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                os.close(fd)
            except FileExistsError:  # another writer made it a moment ago
                pass
            except OSError as err:
                raise HistoryError(f"{self.path}: cannot create it ({err.strerror})") from None
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S, isolation_level=None)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(LOCK_WAIT_S * 1000)}")
            db.execute("PRAGMA foreign_keys = ON")
            if self._refuse_foreign(db):  # an empty file: ours to set up
                # WAL is a property of the file, set once when the store is made; a store on a
                # network filesystem keeps the rollback journal
                fs = filesystem_type(self.path.parent)
                wanted = "delete" if fs in NETWORK_FILESYSTEMS else "wal"
                db.execute(f"PRAGMA journal_mode = {wanted}")
                self._create(db)
            self.journal = str(db.execute("PRAGMA journal_mode").fetchone()[0])
        except sqlite3.DatabaseError as err:
            db.close()
            raise HistoryError(f"{self.path}: not an hpcbench history ({err})") from None
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _refuse_foreign(self, db: sqlite3.Connection) -> bool:
        """Whether the file is empty (a new store); an SQLite file of someone else's (any
        table but an hpcbench history's, another format) is refused before anything in it
        changes, the journal mode included."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return True
        fmt = None
        if {"meta", "results", "figures"} <= tables:
            row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            fmt = row[0] if row else None
        if fmt != HISTORY_FORMAT:
            what = f"history format {fmt!r}" if fmt else f"tables: {', '.join(sorted(tables))}"
            raise HistoryError(
                f"{self.path}: an SQLite file that is not an hpcbench history ({what}); give "
                "another $HPCBENCH_HISTORY"
            )
        return False

    def _create(self, db: sqlite3.Connection) -> None:
        """The tables of a new store (two writers may both get here: IF NOT EXISTS)."""
        with self._write(db):
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (HISTORY_FORMAT,))

    @contextmanager
    def _write(self, db: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding SQLite's write lock from its start."""
        db = db or self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # never leave the write lock held
                db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------- writing

    def record(
        self,
        *,
        kind: str,
        name: str,
        directory: str,
        fingerprint: str,
        provenance: BenchProvenance | Provenance,
        matrix: MatrixRecord | None,
        analysis: Analysis | None,
        figures: dict[str, dict[str, Figure]],
        hosts: list[str],
        recorded_at: str | None = None,
    ) -> tuple[int, bool]:
        """Add one result; (its id, True) or, when these results are recorded already,
        (the earlier id, False)."""
        versions = {
            k: provenance.get(k)
            for k in ("hpcbench", "torch", "torchvision", "mpi4py", "numpy", "python")
            if k in provenance
        }
        try:
            with self._write() as db:
                found = db.execute(
                    "SELECT id FROM results WHERE fingerprint = ?", (fingerprint,)
                ).fetchone()
                if found:
                    return int(found[0]), False
                cur = db.execute(
                    "INSERT INTO results (recorded_at, kind, name, directory, fingerprint, "
                    "profile, git, hosts, versions, matrix, analysis, provenance) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        recorded_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        kind,
                        name,
                        directory,
                        fingerprint,
                        provenance.get("profile"),
                        provenance.get("git"),
                        json.dumps(hosts),
                        json.dumps(versions),
                        json.dumps(matrix) if matrix is not None else None,
                        json.dumps(analysis) if analysis is not None else None,
                        json.dumps(provenance),
                    ),
                )
                rid = int(cur.lastrowid or 0)
                db.executemany(
                    "INSERT INTO figures VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (rid, config, metric, s.get("median"), *_interval(s), s.get("n"))
                        for config, by_metric in figures.items()
                        for metric, s in by_metric.items()
                    ],
                )
        except sqlite3.DatabaseError as err:
            raise HistoryError(f"{self.path}: cannot record ({err})") from None
        return rid, True

    # ------------------------------------------------------------------------- reading

    def entries(
        self,
        name: str | None = None,
        profile: str | None = None,
        since: str | None = None,
        until: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
    ) -> list[Entry]:
        """Recorded results, the last recorded first, filtered."""
        where, args = [], []
        for column, value in (("name", name), ("profile", profile), ("kind", kind)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if since:
            where.append("substr(recorded_at, 1, ?) >= ?")
            args += [len(since), since]
        if until:
            where.append("substr(recorded_at, 1, ?) <= ?")
            args += [len(until), until]
        sql = "SELECT * FROM results"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"  # the order they were recorded in, whatever the clocks say
        if limit:
            sql += f" LIMIT {int(limit)}"
        try:
            db = self._connect()
            rows = db.execute(sql, args).fetchall()
            names = [d[0] for d in db.execute("SELECT * FROM results LIMIT 0").description]
            return [self._entry(db, dict(zip(names, row, strict=True))) for row in rows]
        except sqlite3.DatabaseError as err:
            raise HistoryError(f"{self.path}: cannot read ({err})") from None

    def get(self, result_id: int) -> Entry | None:
        try:
            db = self._connect()
            row = db.execute("SELECT * FROM results WHERE id = ?", (result_id,)).fetchone()
            if row is None:
                return None
            names = [d[0] for d in db.execute("SELECT * FROM results LIMIT 0").description]
            return self._entry(db, dict(zip(names, row, strict=True)))
        except sqlite3.DatabaseError as err:
            raise HistoryError(f"{self.path}: cannot read ({err})") from None

    @staticmethod
    def _entry(db: sqlite3.Connection, row: dict[str, str | int | float | None]) -> Entry:
        figures: dict[str, dict[str, Figure]] = {}
        for config, metric, median, low, high, n in db.execute(
            "SELECT config, metric, median, low, high, n FROM figures WHERE result_id = ? "
            "ORDER BY rowid",
            (row["id"],),
        ):
            stat: Figure = {
                "median": median,
                "ci95": [low, high] if low is not None else None,
                "n": n,
            }
            figures.setdefault(config, {})[metric] = stat
        return Entry(
            id=row["id"],
            recorded_at=row["recorded_at"],
            kind=row["kind"],
            name=row["name"],
            directory=row["directory"],
            profile=row["profile"],
            git=row["git"],
            hosts=_json(row["hosts"], []),
            versions=_json(row["versions"], {}),
            matrix=_json(row["matrix"], None),
            analysis=_json(row["analysis"], None),
            provenance=_json(row["provenance"], {}),
            figures=figures,
        )


def _interval(stat: Figure) -> tuple[float | None, float | None]:
    ci = stat.get("ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        return ci[0], ci[1]
    return None, None


def _json(text: str | None, default: Any) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default
