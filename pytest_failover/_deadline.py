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
import itertools
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

__all__ = ["GRACE", "Guard", "async_limit", "watchdog"]

# The guard fires this long after the attempt's time: httpx's own timeouts, set to the
# same time, go first and name the phase (``connect_timeout``, ``read_timeout``); the
# guard only stops what they cannot, such as a body trickled a byte at a time.
GRACE = 0.02


def async_limit(seconds: float) -> AbstractAsyncContextManager[Any]:
    """A context manager that cancels its body after ``seconds`` and raises ``TimeoutError``."""
    if sys.version_info >= (3, 11):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no asyncio loop: trio
            task = None
        if task is not None:
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
    """The watchdog's hold on one sync attempt: the socket to cut, and whether it was cut."""

    __slots__ = ("expired", "socket", "ticket")

    def __init__(self, sock: socket.socket, ticket: int) -> None:
        self.socket = sock
        self.ticket = ticket
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        with contextlib.suppress(OSError):  # already closed: nothing left to interrupt
            self.socket.shutdown(socket.SHUT_RDWR)


def _socket_of(response: httpx.Response) -> socket.socket | None:
    """The socket under an httpcore response (None for in-process transports)."""
    stream = response.extensions.get("network_stream")
    get_extra_info = getattr(stream, "get_extra_info", None)
    sock = get_extra_info("socket") if get_extra_info is not None else None
    return sock if isinstance(sock, socket.socket) else None


class _Watchdog:
    """One thread that cuts the sockets of attempts past their time.

    Arming is a dict insert and disarming a dict pop (atomic under the GIL): the
    happy path pays about a microsecond, where a heap under a condition variable
    cost nine (cProfile of 5,000 in-process requests, side by side). The thread
    scans the armed attempts every ``TICK`` seconds while any were armed lately,
    so an attempt is cut at most ``TICK`` late, and it sleeps when none are.
    """

    TICK = 0.01
    IDLE_AFTER = 1.0  # seconds without an armed attempt before the thread sleeps

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._armed: dict[int, tuple[float, Guard]] = {}
        self._tickets = itertools.count()
        self._wake = threading.Event()
        self._idle = True
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def arm(self, at: float, response: httpx.Response) -> Guard | None:
        """Cut ``response``'s socket at ``at`` (monotonic seconds), unless disarmed
        first (None: the response has no socket, so nothing can block on one)."""
        sock = _socket_of(response)
        if sock is None:
            return None
        guard = Guard(sock, next(self._tickets))
        self._armed[guard.ticket] = (at, guard)
        if self._idle:
            self._idle = False
            self._start()
            self._wake.set()
        return guard

    def disarm(self, guard: Guard) -> None:
        self._armed.pop(guard.ticket, None)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="failover-deadlines", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        quiet_since = self._clock()
        while True:
            if self._idle:
                self._wake.wait()
                self._wake.clear()
                quiet_since = self._clock()
            time.sleep(self.TICK)
            now = self._clock()
            due = [ticket for ticket, (at, _) in list(self._armed.items()) if at <= now]
            for ticket in due:
                entry = self._armed.pop(ticket, None)
                if entry is not None:
                    entry[1].expire()
            if self._armed:
                quiet_since = now
            elif now - quiet_since > self.IDLE_AFTER:
                self._idle = True
                if self._armed:  # armed between the check and going idle
                    self._idle = False


watchdog = _Watchdog()
