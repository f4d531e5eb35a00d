"""The status history on disk: one SQLite file (stdlib :mod:`sqlite3`), bounded in age and rows.

Tables (``PRAGMA user_version`` 1)::

    results(at REAL, pool TEXT, domain TEXT, ok INTEGER, latency REAL, label TEXT)
        one row per check result; domain '' is the pool probe; index (pool, domain, at)
    checks(pool TEXT, domain TEXT, up INTEGER, since REAL, PRIMARY KEY (pool, domain))
        whether each check is up and since when (its streak may be older than any kept row)

A :class:`HistoryFile` is used from ONE thread only (the recorder's writer thread: a
connection belongs to the thread that opened it, and a commit may wait for the disk).
Rows older than ``retention_days`` are deleted, and the oldest rows beyond ``max_rows``,
whichever bounds first, at most once a minute. Every failure is a :class:`HistoryFileError`
whose message names the file and says what is wrong with it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from .history import BARS, HOURS, MINUTES, Key, Sample

__all__ = ["SCHEMA_VERSION", "HistoryFile", "HistoryFileError", "Loaded", "Row"]

SCHEMA_VERSION = 1
PRUNE_EVERY = 60.0  # seconds between two retention passes

Row = tuple[float, str, str, int, float, str]
"""``(at, pool, domain, ok, latency, label)``: one result as stored."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    at REAL NOT NULL, pool TEXT NOT NULL, domain TEXT NOT NULL,
    ok INTEGER NOT NULL, latency REAL NOT NULL, label TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS results_check_at ON results (pool, domain, at);
CREATE TABLE IF NOT EXISTS checks (
    pool TEXT NOT NULL, domain TEXT NOT NULL, up INTEGER NOT NULL, since REAL NOT NULL,
    PRIMARY KEY (pool, domain));
"""


class HistoryFileError(Exception):
    """The history file cannot be used; the message names it and says why."""


@dataclass(slots=True)
class Loaded:
    """What a file holds, shaped for :class:`~failover_agent.status.history.History`."""

    recent: dict[Key, list[Sample]] = field(default_factory=dict)  # oldest first, <= BARS each
    minutes: list[tuple[Key, float, int, int]] = field(default_factory=list)  # (key, slot start, ok, total)
    hours: list[tuple[Key, float, int, int]] = field(default_factory=list)
    streaks: dict[Key, tuple[bool, float]] = field(default_factory=dict)  # key -> (up, since)
    rows: int = 0


class HistoryFile:
    """A history file (see the module docstring)."""

    def __init__(self, path: Path, *, retention_days: float, max_rows: int) -> None:
        self.path = path
        self.retention = retention_days * 86400.0
        self.max_rows = max_rows
        self._db: sqlite3.Connection | None = None
        self._pruned_at = float("-inf")

    def _fail(self, exc: BaseException, doing: str) -> HistoryFileError:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in reason:
            reason = "the file is not a SQLite database (or is corrupt)"
        return HistoryFileError(f"status history file {self.path}: cannot {doing}: {reason}")

    def open(self, now: float) -> Loaded:
        """Open (or create) the file, check it, apply the retention and read what it holds."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None)  # transactions by hand
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryFileError(
                    f"status history file {self.path}: schema version {version} was written by a newer "
                    f"failover-agent (this one reads version {SCHEMA_VERSION})")
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise HistoryFileError(f"status history file {self.path}: corrupt ({check})")
            self._db.execute("PRAGMA journal_mode = WAL")  # a reader never blocks the writer
            self._db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self._prune(now)
            return self._load(now)
        except HistoryFileError:
            self.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise self._fail(exc, "open it") from exc

    def _load(self, now: float) -> Loaded:
        assert self._db is not None
        db = self._db
        loaded = Loaded(rows=db.execute("SELECT count(*) FROM results").fetchone()[0])
        for pool, domain, at, ok, latency, label in db.execute(
            "SELECT pool, domain, at, ok, latency, label FROM ("
            " SELECT *, row_number() OVER (PARTITION BY pool, domain ORDER BY at DESC) AS n FROM results)"
            " WHERE n <= ? ORDER BY at", (BARS,)):
            loaded.recent.setdefault((pool, domain), []).append(Sample(at, bool(ok), latency, label))
        for width, slots, into in ((60, MINUTES, loaded.minutes), (3600, HOURS, loaded.hours)):
            since = (now // width - slots + 1) * width
            for pool, domain, slot, ok, total in db.execute(
                "SELECT pool, domain, CAST(at / ? AS INTEGER) AS slot, sum(ok), count(*) FROM results"
                " WHERE at >= ? GROUP BY pool, domain, slot", (width, since)):
                into.append(((pool, domain), slot * width, ok, total))
        for pool, domain, up, since in db.execute("SELECT pool, domain, up, since FROM checks"):
            loaded.streaks[(pool, domain)] = (bool(up), since)
        return loaded

    def write(self, rows: list[Row], streaks: dict[Key, tuple[bool, float]], now: float) -> None:
        """Append ``rows`` and the checks' current streaks in one transaction; prune now and then."""
        if self._db is None:
            raise HistoryFileError(f"status history file {self.path}: not open")
        try:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.executemany(
                "INSERT INTO checks VALUES (?, ?, ?, ?) ON CONFLICT (pool, domain)"
                " DO UPDATE SET up = excluded.up, since = excluded.since",
                [(pool, domain, int(up), since) for (pool, domain), (up, since) in streaks.items()])
            self._db.execute("COMMIT")
            if now - self._pruned_at >= PRUNE_EVERY:
                self._prune(now)
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise self._fail(exc, "write to it") from exc

    def _prune(self, now: float) -> None:
        """Delete the rows older than the retention, then the oldest beyond ``max_rows``."""
        assert self._db is not None
        self._pruned_at = now
        self._db.execute("DELETE FROM results WHERE at < ?", (now - self.retention,))
        # rowids grow with every insert and the newest row is never deleted, so the oldest
        # rows are the lowest rowids: no count, no sort.
        self._db.execute("DELETE FROM results WHERE rowid <= (SELECT max(rowid) FROM results) - ?",
                         (self.max_rows,))

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):  # closing a broken file: nothing more to lose
                self._db.close()
            self._db = None
