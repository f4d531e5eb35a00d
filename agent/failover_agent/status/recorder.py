"""Feeds every check result into the status history, and the history file when there is one.

The checks call it: :meth:`Recorder.on_result` is one of the agent's result listeners
(:meth:`failover_agent.runner.Agent.on_result`), called by each pinned domain probe and each
pool probe with its new :class:`~failover_agent.checks.result.ProbeResult`, once per result,
so nothing polls the agent's state. A reload replaces the state: the first result after it
makes the recorder forget the checks that are gone.

Writes to the SQLite file are batched and run in one dedicated thread: the loop only appends
rows to a list, and once a second (skipped while the previous write is still going) hands
the batch to the writer thread. A thread because :mod:`sqlite3` blocks (a commit can
wait for the disk, a prune for seconds) and its connection belongs to the thread that opened
it; batching because one transaction per second costs the disk far less than one per result.
At most one write is in flight; while the disk is stuck, rows wait in memory up to
:data:`MAX_PENDING`, then the oldest are dropped (and counted in the log).

A domain's result during one of its maintenance windows (:mod:`failover_agent.maintenance`) is
shown in the bars with the label ``maintenance`` (then its own) and is not counted in the
uptime: a planned outage is not downtime. It is written to the file marked as not counted, so
after a restart the bars still show the window and the uptime still leaves it out. Pool probes
count as ever: what users see.

A corrupt or foreign file is moved aside when opened, and a new one made
(:meth:`~failover_agent.status.store.HistoryFile.open`). If the file cannot be opened or
written otherwise (unreadable, a newer agent's, disk full), the reason is logged once as an
error and the history carries on in memory only: the agent keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from .history import History, Key, Sample

if TYPE_CHECKING:
    from ..checks.result import ProbeResult
    from ..config import AgentConfig, StatusConfig
    from ..state import AgentState
    from .store import HistoryFile, Loaded, Row

__all__ = ["MAINTENANCE", "MAX_PENDING", "Recorder", "probe_label", "refresh_for"]

log = logging.getLogger("failover_agent.status")

MAX_PENDING = 200_000
"""Rows waiting for a stuck disk before the oldest are dropped."""
FLUSH_EVERY = 1.0
MAINTENANCE = "maintenance"
"""The first word of the label of a result during a maintenance window (the page draws it apart)."""


def probe_label(result: ProbeResult, pool_probe: bool) -> str:
    """The short text of a result's bar: what served it (pool probes), its status, or its error."""
    if result.success:
        if pool_probe:
            return result.served_by or ""
        return "" if result.status is None else str(result.status)
    return result.error_type or ("" if result.status is None else str(result.status))


def shortest_interval(config: AgentConfig) -> float:
    """The shortest probe interval of ``config`` (pool probes share their pool's interval)."""
    return min((pool.probe.for_domain(url).interval for pool in config.pools for url in pool.domains),
               default=1.0)


def refresh_for(config: AgentConfig) -> float:
    """How often the page fetches ``/status.json``: half the shortest interval, within 0.5 .. 5 s."""
    return min(5.0, max(0.5, shortest_interval(config) / 2))


class Recorder:
    """Records results into :attr:`history` (and a file); ``start()``, then
    :meth:`on_result` for each result, then ``aclose()``."""

    def __init__(self, state: Callable[[], AgentState], config: Callable[[], AgentConfig],
                 clock: Callable[[], float] = time.time,
                 in_maintenance: Callable[[Key, float], bool] = lambda _key, _at: False) -> None:
        """``in_maintenance(key, at)``: whether the domain ``key`` was in a maintenance window at ``at``."""
        self._state = state
        self._in_maintenance = in_maintenance
        self._config = config
        self._clock = clock
        self.settings: StatusConfig = config().status
        self.history = History()
        self.error: str | None = None  # why the file is not used, if it is not
        self._watched: AgentState | None = None
        self._pending: list[Row] = []
        self._streaks: dict[Key, tuple[bool, float]] = {}
        self._dropped = 0
        self._file: HistoryFile | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._write: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._warned_settings = False

    @property
    def backend(self) -> str:
        return "sqlite" if self._file is not None else "memory"

    def describe(self) -> dict[str, object]:
        """The ``history`` object of ``/status.json``."""
        return {
            "backend": self.backend,
            "path": None if self.settings.history_path is None else str(self.settings.history_path),
            "error": self.error,
            "retention_days": self.settings.retention_days,
            "max_rows": self.settings.max_rows,
        }

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the history file (if any) and restore it, then start recording."""
        path = self.settings.history_path
        if path is not None:
            from .store import HistoryFile, HistoryFileError  # sqlite3 only with a history file

            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="status-history")
            file = HistoryFile(path, retention_days=self.settings.retention_days,
                               max_rows=self.settings.max_rows)
            loop = asyncio.get_running_loop()
            try:
                loaded = await loop.run_in_executor(self._writer, file.open, self._clock())
            except HistoryFileError as exc:
                self._give_up(str(exc))
            else:
                self._file = file
                self._restore(loaded)
                log.info("status history: %s (%d results kept, %g days, at most %d rows)",
                         path, loaded.rows, self.settings.retention_days, self.settings.max_rows)
                self._task = asyncio.get_running_loop().create_task(self._run(), name="status-history")

    def _give_up(self, reason: str) -> None:
        self.error = reason
        log.error("%s; the status history is kept in memory only from now on", reason)
        if self._file is not None and self._writer is not None:
            self._writer.submit(self._file.close)
        self._file = None
        self._pending.clear()

    def _restore(self, loaded: Loaded) -> None:
        for key, samples in loaded.recent.items():
            series = self.history.series(key)
            for sample in samples:
                series.add(sample, count=False)
        for key, at, ok, total in loaded.minutes:
            self.history.series(key).minutes.add(at, ok, total)
        for key, at, ok, total in loaded.hours:
            series = self.history.series(key)
            series.hours.add(at, ok, total)
            kept = loaded.first.get(key)
            if kept is None or at + series.hours.width <= kept:  # an hour whose results the row cap dropped
                series.counted_since(at)
        for key, at in loaded.first.items():
            self.history.series(key).counted_since(at)
        for key, (up, since) in loaded.streaks.items():
            restored = self.history.get(key)
            if restored is not None and restored.up is up and restored.since is not None:
                restored.since = min(restored.since, since)

    async def aclose(self) -> None:
        """Stop recording, write what is pending, close the file."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._writer is None:
            return
        with contextlib.suppress(Exception):  # a failed write was already logged
            if self._write is not None:
                await self._write
            self._flush()
            if self._write is not None:
                await self._write
        if self._file is not None:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._file.close)
            self._file = None
        self._writer.shutdown(wait=False)
        self._writer = None

    # --- recording ------------------------------------------------------------------------

    async def _run(self) -> None:
        """Once a second, hand what is pending to the writer (while the file is in use)."""
        while self._file is not None:
            await asyncio.sleep(FLUSH_EVERY)
            if self._write is None or self._write.done():
                try:
                    self._flush()
                except Exception:  # the recorder never dies; the file only lags
                    log.exception("status history: writing failed")

    def on_result(self, key: Key, result: ProbeResult) -> None:
        """Record a check's new result: ``(pool, url)`` of a pinned probe, ``(pool, "")`` of a
        pool probe (the agent calls this once per result)."""
        state = self._state()
        if state is not self._watched:  # the first result, or the first since a reload
            self._follow(state)
        self._record(key, result, pool_probe=not key[1])

    def _follow(self, state: AgentState) -> None:
        """Keep the history of the checks ``state`` has, and only those."""
        self._watched = state
        if self._config().status != self.settings and not self._warned_settings:
            self._warned_settings = True
            log.warning("[status] settings changed: they take effect after a restart")
        keys = [(d.pool, d.url) for d in state.domains.values()] + [(p, "") for p in state.pools]
        self.history.keep_only(keys)

    def _record(self, key: Key, result: ProbeResult, *, pool_probe: bool) -> None:
        label = probe_label(result, pool_probe)
        counted = pool_probe or not self._in_maintenance(key, result.at)
        if not counted:
            label = f"{MAINTENANCE} {label}".rstrip()
        series = self.history.series(key)
        series.add(Sample(result.at, result.success, result.duration, label), count=counted)
        if self._file is not None:
            self._pending.append((result.at, key[0], key[1], int(result.success), result.duration, label,
                                  int(counted)))
            assert series.up is not None and series.since is not None
            self._streaks[key] = (series.up, series.since)

    def _flush(self) -> None:
        """Hand the pending rows to the writer thread (the caller checked none is in flight)."""
        if self._file is None or self._writer is None or not self._pending:
            return
        if len(self._pending) > MAX_PENDING:
            drop = len(self._pending) - MAX_PENDING
            del self._pending[:drop]
            self._dropped += drop
            log.warning("status history: the disk is not keeping up; %d results not written", self._dropped)
        rows, self._pending = self._pending, []
        streaks, self._streaks = self._streaks, {}
        file = self._file
        self._write = asyncio.get_running_loop().run_in_executor(
            self._writer, file.write, rows, streaks, self._clock())
        self._write.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None and self._file is not None:
            from .store import HistoryFileError  # imported by start(), as the file is open
            self._give_up(str(exc) if isinstance(exc, HistoryFileError) else
                          f"status history file {self.settings.history_path}: cannot write to it: {exc!r}")
