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

__all__ = ["GRACE", "async_limit", "watchdog"]

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


class _Watchdog:
    """One thread that cuts the sockets of attempts past their time.

    Arming is a dict insert and disarming a dict pop (atomic under the GIL), and
    a ticket is a plain int: the happy path pays under a microsecond, where a
    heap under a condition variable cost nine (cProfile of 5,000 in-process
    requests, side by side) and a guard object per attempt another 11,000
    instructions (callgrind, loopback). The thread scans the armed attempts
    every ``TICK`` seconds while any were armed lately, so an attempt is cut at
    most ``TICK`` late, and it sleeps when none are.
    """

    TICK = 0.01
    IDLE_AFTER = 1.0  # seconds without an armed attempt before the thread sleeps

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._armed: dict[int, tuple[float, socket.socket]] = {}
        self._cut: set[int] = set()  # tickets whose socket was shut down
        self._tickets = itertools.count()
        self._wake = threading.Event()
        self._idle = True
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def arm(self, at: float, response: httpx.Response) -> int | None:
        """Cut ``response``'s socket at ``at`` (monotonic seconds) unless disarmed
        first; the ticket to disarm with. None: the response has no socket (an
        in-process transport), so nothing can block on one."""
        get_extra_info = getattr(response.extensions.get("network_stream"), "get_extra_info", None)
        sock = get_extra_info("socket") if get_extra_info is not None else None
        if not isinstance(sock, socket.socket):
            return None
        ticket = next(self._tickets)
        self._armed[ticket] = (at, sock)
        if self._idle:
            self._idle = False
            self._start()
            self._wake.set()
        return ticket

    def disarm(self, ticket: int) -> bool:
        """Stop watching; True if the attempt's socket was cut (it ran out of time)."""
        if self._armed.pop(ticket, None) is not None:
            return False
        cut = ticket in self._cut
        self._cut.discard(ticket)
        return cut

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
                self._cut.add(ticket)  # before the pop: disarm() then sees it was cut
                entry = self._armed.pop(ticket, None)
                if entry is None:
                    self._cut.discard(ticket)  # disarmed in time after all
                    continue
                with contextlib.suppress(OSError):  # already closed: nothing to interrupt
                    entry[1].shutdown(socket.SHUT_RDWR)
            if self._armed:
                quiet_since = now
            elif now - quiet_since > self.IDLE_AFTER:
                self._idle = True
                if self._armed:  # armed between the check and going idle
                    self._idle = False


watchdog = _Watchdog()
