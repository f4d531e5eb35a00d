"""The status history on disk: one SQLite file (stdlib :mod:`sqlite3`), bounded in age and rows.

Tables (``PRAGMA user_version`` 2)::

    checks(id INTEGER PRIMARY KEY, pool TEXT, domain TEXT, up INTEGER, since REAL)
        one row per check (domain '' is the pool probe): whether it is up and since when
        (its streak may be older than any kept result); unique (pool, domain)
    results(check_id INTEGER, at REAL, ok INTEGER, latency REAL, label TEXT, counted INTEGER)
        one row per result, about 56 bytes on disk with its index (check_id, at); ``counted``
        is 0 for a result during a maintenance window (a bar, never uptime)
    hours(check_id INTEGER, hour INTEGER, ok INTEGER, total INTEGER)
        successes and counted results per check and hour (Unix time // 3600), for the 24 h
        and 7 d uptime: reading them back is 168 rows a check, not every result of a week

Version 1 (no ``counted``: it kept no maintenance result) is upgraded in place when opened,
every old row counted; a file of a newer version is refused with a clear error (it is a
newer agent's: kept as it is). A corrupt file (not a SQLite database, or a damaged one) or a
foreign one (a SQLite database with tables of another program, or ours missing columns) is
moved aside (``history.sqlite`` becomes ``history.sqlite.<UTC time>.corrupt``, its ``-wal``
and ``-shm`` files with it) with one warning, and a new history starts in its place: the
operator keeps the bytes to inspect, and the agent keeps a history that survives restarts.

A :class:`HistoryFile` is used from ONE thread only (the recorder's writer thread: a
connection belongs to the thread that opened it, and a commit may wait for the disk).
Results older than ``retention_days`` are deleted, and the oldest beyond ``max_rows``,
whichever bounds first, at most once a minute; hour counts go after ``retention_days`` or
7 days, whichever is shorter (so the uptime outlives the row cap). Every failure is a :class:`HistoryFileError`
whose message names the file and says what is wrong with it.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .history import BARS, HOURS, MINUTES, Key, Sample

__all__ = ["SCHEMA_VERSION", "HistoryFile", "HistoryFileError", "Loaded", "Row"]

log = logging.getLogger("failover_agent.status")

SCHEMA_VERSION = 2
PRUNE_EVERY = 60.0  # seconds between two retention passes

Row = tuple[float, str, str, int, float, str, int]
"""``(at, pool, domain, ok, latency, label, counted)``: one result as stored (``counted`` 0:
during a maintenance window, in the bars but not in the uptime)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checks (
    id INTEGER PRIMARY KEY, pool TEXT NOT NULL, domain TEXT NOT NULL, up INTEGER, since REAL,
    UNIQUE (pool, domain));
CREATE TABLE IF NOT EXISTS results (
    check_id INTEGER NOT NULL, at REAL NOT NULL, ok INTEGER NOT NULL, latency REAL NOT NULL,
    label TEXT NOT NULL, counted INTEGER NOT NULL DEFAULT 1);
CREATE INDEX IF NOT EXISTS results_check_at ON results (check_id, at);
CREATE TABLE IF NOT EXISTS hours (
    check_id INTEGER NOT NULL, hour INTEGER NOT NULL, ok INTEGER NOT NULL, total INTEGER NOT NULL,
    PRIMARY KEY (check_id, hour)) WITHOUT ROWID;
"""


# The columns each table of ours must have (``counted`` is added to a version 1 file).
_COLUMNS = {
    "checks": {"id", "pool", "domain", "up", "since"},
    "results": {"check_id", "at", "ok", "latency", "label"},
    "hours": {"check_id", "hour", "ok", "total"},
}
# SQLite's result codes for a file that is not a database, or a damaged one.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


class HistoryFileError(Exception):
    """The history file cannot be used; the message names it and says why."""


class _Unusable(Exception):
    """The file is corrupt or foreign (the message says which): to be moved aside."""


def _foreign(db: sqlite3.Connection) -> str | None:
    """Why ``db`` is another program's database (None: empty, or ours)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    others = sorted(tables - _COLUMNS.keys())
    if others:
        return f"it holds tables of another program ({', '.join(others)})"
    for table in sorted(tables):
        missing = _COLUMNS[table] - {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if missing:
            return f"its table {table} lacks the columns {', '.join(sorted(missing))}"
    return None


@dataclass(slots=True)
class Loaded:
    """What a file holds, shaped for :class:`~failover_agent.status.history.History`."""

    recent: dict[Key, list[Sample]] = field(default_factory=dict)  # oldest first, <= BARS each
    minutes: list[tuple[Key, float, int, int]] = field(default_factory=list)  # (key, slot start, ok, total)
    hours: list[tuple[Key, float, int, int]] = field(default_factory=list)
    streaks: dict[Key, tuple[bool, float]] = field(default_factory=dict)  # key -> (up, since)
    first: dict[Key, float] = field(default_factory=dict)  # key -> its oldest result kept
    rows: int = 0


class HistoryFile:
    """A history file (see the module docstring)."""

    def __init__(self, path: Path, *, retention_days: float, max_rows: int) -> None:
        self.path = path
        self.retention = retention_days * 86400.0
        self.max_rows = max_rows
        self._db: sqlite3.Connection | None = None
        self._ids: dict[Key, int] = {}
        self._pruned_at = float("-inf")

    def _fail(self, exc: BaseException, doing: str) -> HistoryFileError:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in reason:
            reason = "the file is not a SQLite database (or is corrupt)"
        return HistoryFileError(f"status history file {self.path}: cannot {doing}: {reason}")

    def _check_version(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryFileError(
                f"status history file {self.path}: schema version {version} was written by a newer "
                f"failover-agent (this one reads version {SCHEMA_VERSION})")

    def check(self) -> None:
        """Raise :class:`HistoryFileError` if an existing file could not be opened; read-only,
        so it creates and changes nothing (``failover-agent check-config``)."""
        if not self.path.exists():
            return
        try:
            db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                self._check_version(db)
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise self._fail(exc, "open it") from None

    def open(self, now: float) -> Loaded:
        """Open (or create) the file, check it, apply the retention and read what it holds;
        a corrupt or foreign file is moved aside first (one warning), and a new one made."""
        try:
            return self._open(now)
        except _Unusable as exc:
            aside = self._move_aside()
            log.warning("status history file %s: %s; moved aside to %s, a new history starts",
                        self.path, exc, aside.name)
            return self._open(now)

    def _move_aside(self) -> Path:
        """Rename the file (and its ``-wal`` and ``-shm``) to ``<name>.<UTC time>.corrupt``."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}.{stamp}.corrupt")
        try:
            for suffix in ("-wal", "-shm", ""):  # the database last: it names the others
                source = self.path.with_name(self.path.name + suffix)
                if source.exists():
                    source.rename(aside.with_name(aside.name + suffix))
        except OSError as exc:
            raise self._fail(exc, "move the unusable file aside") from exc
        return aside

    def _open(self, now: float) -> Loaded:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None)  # transactions by hand
            self._check_version(self._db)
            foreign = _foreign(self._db)
            if foreign is not None:
                raise _Unusable(foreign)
            # No integrity check (it reads the whole file): a damaged page fails the queries
            # below, or a later write, with "database disk image is malformed".
            self._db.execute("PRAGMA journal_mode = WAL")  # a reader never blocks the writer
            self._db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
            self._db.executescript(_SCHEMA)
            self._upgrade(self._db)
            self._prune(now)
            return self._load(now)
        except (HistoryFileError, _Unusable):
            self.close()
            raise
        except sqlite3.DatabaseError as exc:
            self.close()
            if getattr(exc, "sqlite_errorcode", None) in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
                raise _Unusable(self._fail(exc, "open it").args[0].rpartition(": ")[2]) from exc
            raise self._fail(exc, "open it") from exc
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise self._fail(exc, "open it") from exc

    @staticmethod
    def _upgrade(db: sqlite3.Connection) -> None:
        """Bring a file of an older schema (or a new one) to :data:`SCHEMA_VERSION`, in one transaction."""
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in db.execute("PRAGMA table_info(results)")}
            if "counted" not in columns:  # version 1: every result it kept was counted
                db.execute("ALTER TABLE results ADD COLUMN counted INTEGER NOT NULL DEFAULT 1")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _load(self, now: float) -> Loaded:
        assert self._db is not None
        db = self._db
        loaded = Loaded(rows=db.execute("SELECT count(*) FROM results").fetchone()[0])
        for check_id, pool, domain, up, since in db.execute(
                "SELECT id, pool, domain, up, since FROM checks").fetchall():
            key = (pool, domain)
            self._ids[key] = check_id
            if up is not None and since is not None:
                loaded.streaks[key] = (bool(up), since)
            (first,) = db.execute("SELECT min(at) FROM results WHERE check_id = ? AND counted",
                                  (check_id,)).fetchone()
            if first is not None:
                loaded.first[key] = first
            recent = db.execute("SELECT at, ok, latency, label FROM results WHERE check_id = ?"
                                " ORDER BY at DESC LIMIT ?", (check_id, BARS)).fetchall()
            if recent:
                loaded.recent[key] = [Sample(at, bool(ok), latency, label) for at, ok, latency, label in reversed(recent)]
            for minute, ok, total in db.execute(
                    "SELECT CAST(at / 60 AS INTEGER) AS minute, sum(ok), count(*) FROM results"
                    " WHERE check_id = ? AND counted AND at >= ? GROUP BY minute", (check_id, (now // 60 - MINUTES + 1) * 60)):
                loaded.minutes.append((key, minute * 60.0, ok, total))
            for hour, ok, total in db.execute("SELECT hour, ok, total FROM hours WHERE check_id = ? AND hour >= ?",
                                              (check_id, int(now // 3600) - HOURS + 1)):
                loaded.hours.append((key, hour * 3600.0, ok, total))
        return loaded

    def write(self, rows: list[Row], streaks: dict[Key, tuple[bool, float]], now: float) -> None:
        """Append ``rows`` and the checks' current streaks in one transaction (only counted rows
        add to the hour counts); prune now and then."""
        if self._db is None:
            raise HistoryFileError(f"status history file {self.path}: not open")
        try:
            self._db.execute("BEGIN")
            ids = self._ids
            for key in {(pool, domain) for _, pool, domain, *_ in rows} | streaks.keys():
                if key not in ids:
                    cursor = self._db.execute("INSERT INTO checks (pool, domain) VALUES (?, ?)", key)
                    assert cursor.lastrowid is not None
                    ids[key] = cursor.lastrowid
            self._db.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?, ?)",
                                 [(ids[(pool, domain)], at, ok, latency, label, counted)
                                  for at, pool, domain, ok, latency, label, counted in rows])
            hours: dict[tuple[int, int], list[int]] = {}
            for at, pool, domain, ok, _, _, counted in rows:
                if not counted:
                    continue
                counts = hours.setdefault((ids[(pool, domain)], int(at // 3600)), [0, 0])
                counts[0] += ok
                counts[1] += 1
            self._db.executemany(
                "INSERT INTO hours VALUES (?, ?, ?, ?) ON CONFLICT (check_id, hour)"
                " DO UPDATE SET ok = ok + excluded.ok, total = total + excluded.total",
                [(check_id, hour, ok, total) for (check_id, hour), (ok, total) in hours.items()])
            self._db.executemany("UPDATE checks SET up = ?, since = ? WHERE id = ?",
                                 [(int(up), since, ids[key]) for key, (up, since) in streaks.items()])
            self._db.execute("COMMIT")
            if now - self._pruned_at >= PRUNE_EVERY:
                self._prune(now)
        except sqlite3.Error as exc:  # the recorder stops using the file: its ids may be stale
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise self._fail(exc, "write to it") from exc

    def _prune(self, now: float) -> None:
        """Delete the rows older than the retention, then the oldest beyond ``max_rows``."""
        assert self._db is not None
        self._pruned_at = now
        # Results are appended in time order, so the old ones are the lowest rowids: scanning
        # from the lowest reads only the rows to delete (there is no index on ``at``).
        self._db.execute("DELETE FROM results WHERE rowid < coalesce("
                         "(SELECT rowid FROM results WHERE at >= ? ORDER BY rowid LIMIT 1),"
                         " (SELECT max(rowid) + 1 FROM results))", (now - self.retention,))
        oldest_hour = int((now - min(self.retention, HOURS * 3600.0)) // 3600)
        self._db.execute("DELETE FROM hours WHERE hour < ?", (oldest_hour,))
        # rowids grow with every insert and the newest row is never deleted by the cap, so the
        # oldest rows are the lowest rowids: no count, no sort.
        self._db.execute("DELETE FROM results WHERE rowid <= (SELECT max(rowid) FROM results) - ?",
                         (self.max_rows,))

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):  # closing a broken file: nothing more to lose
                self._db.close()
            self._db = None
