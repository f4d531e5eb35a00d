"""Deadlines over a whole exchange: connect, send, and every byte the transport reads.

httpx's timeouts apply to each network operation, so a server that trickles one
byte every 0.4 s never trips a 3 s read timeout and can hold a call for ever.
An attempt's time is therefore bounded from outside:

- async: the attempt runs inside ``asyncio.timeout`` (anyio's ``fail_after``
  under trio, or on Python 3.10). ``asyncio.timeout`` costs 5.8 µs an attempt
  against 19 µs for ``anyio.fail_after`` (measured side by side on this machine),
  hence the asyncio path.
- sync: a blocked ``recv`` cannot be cancelled from its own thread. One watchdog
  thread per process keeps a heap of armed deadlines; when one passes, it shuts
  down the socket of that attempt (``socket.shutdown`` is safe from another
  thread), the blocked read returns at once, and the transport reports a timeout.
  The socket is known once the response headers arrived (httpcore's
  ``network_stream`` extension), so the guard covers the body the transport
  reads. Before that, each connect, write and read is bounded by httpx's own
  timeouts, which the attempt caps at its remaining time; a server that
  trickles its *headers* a byte at a time is bounded only per read there.
  Learning the socket earlier through httpcore's ``trace`` extension would close
  that gap, but makes httpcore call back a dozen times per request on the
  happy path.

Both raise :class:`httpx.ReadTimeout` naming the limit, so an exceeded deadline is
classified like any other timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

__all__ = ["GRACE", "Guard", "async_limit", "watchdog"]

# The guard fires this long after the attempt's time: httpx's own timeouts, set to the
# same time, go first and name the phase (``connect_timeout``, ``read_timeout``); the
# guard only stops what they cannot, such as a body trickled a byte at a time.
GRACE = 0.02


def async_limit(seconds: float) -> AbstractAsyncContextManager[Any]:
    """A context manager that cancels its body after ``seconds`` and raises ``TimeoutError``."""
    if sys.version_info >= (3, 11):
        try:
            asyncio.current_task()
        except RuntimeError:  # not asyncio (trio)
            pass
        else:
            return asyncio.timeout(seconds)
    import anyio  # httpx's own dependency

    return _AnyioLimit(anyio.fail_after(seconds))


class _AnyioLimit:
    """``anyio.fail_after`` (a sync context manager) as an async one."""

    def __init__(self, scope: Any) -> None:
        self._scope = scope

    async def __aenter__(self) -> None:
        self._scope.__enter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        result: bool | None = self._scope.__exit__(*exc)
        return result


class Guard:
    """The watchdog's hold on one sync attempt: which socket to cut, and whether it was cut."""

    __slots__ = ("_lock", "_socket", "expired")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.expired = False

    def watch(self, stream: object) -> None:
        """Remember the socket under an httpcore network stream (if it has one)."""
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if get_extra_info is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._socket = sock
            expired = self.expired
        if expired:
            _cut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._socket
        if sock is not None:
            _cut(sock)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to interrupt
        sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One thread, one heap of ``(at, seq, guard)``; disarming leaves a tombstone."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Guard]] = []
        self._armed: set[int] = set()
        self._seq = itertools.count()
        self._wake = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, guard: Guard) -> int:
        at = self._clock() + seconds
        with self._wake:
            ticket = next(self._seq)
            self._armed.add(ticket)
            heapq.heappush(self._heap, (at, ticket, guard))
            if len(self._heap) > 2 * len(self._armed) + 64:  # mostly tombstones
                self._heap = [entry for entry in self._heap if entry[1] in self._armed]
                heapq.heapify(self._heap)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="failover-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][1] == ticket:
                self._wake.notify()
        return ticket

    def disarm(self, ticket: int) -> None:
        with self._wake:
            self._armed.discard(ticket)

    def _run(self) -> None:
        while True:
            due: list[Guard] = []
            with self._wake:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                at = self._heap[0][0]
                wait = at - self._clock()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                while self._heap and self._heap[0][0] <= self._clock():
                    _, ticket, guard = heapq.heappop(self._heap)
                    if ticket in self._armed:
                        self._armed.discard(ticket)
                        due.append(guard)
            for guard in due:
                guard.expire()


watchdog = _Watchdog()
