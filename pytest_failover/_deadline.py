"""Deadlines over a whole exchange: connect, send, and every byte the transport reads.

httpx's timeouts apply to each network operation, so a server that trickles one
byte every 0.4 s never trips a 3 s read timeout and can hold a call for ever.
An attempt's time is therefore bounded from outside:

- async: the attempt runs inside ``asyncio.timeout`` (anyio's ``fail_after``
  under trio, or on Python 3.10). ``asyncio.timeout`` costs 5.8 µs an attempt
  against 19 µs for ``anyio.fail_after`` (measured side by side on this machine),
  hence the asyncio path.
- sync: a blocked ``recv`` cannot be cancelled from its own thread. One watchdog
  thread per process keeps the armed deadlines; when one passes, it shuts
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

Both raise the library's ``ReadTimeout`` naming the limit, so an exceeded deadline is
classified like any other timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from ._sockets import socket_of

if TYPE_CHECKING:
    from ._lib import Response

__all__ = ["GRACE", "async_limit", "watchdog"]

logger = logging.getLogger("pytest_failover")

# An async attempt's guard, which spans the connect, fires this long after the attempt's
# time: httpx's own timeouts, set to the same time, go first and name the phase
# (``connect_timeout``, ``read_timeout``; a connect that timed out was not sent), and the
# guard only stops what they cannot, such as a body trickled a byte at a time. The sync
# watchdog guards only the body, where no phase is left to name: it fires at the time
# itself. (Moving the async guard to the time itself once the headers are in costs
# ``asyncio.Timeout.reschedule``: 3.0 us a request, as much again as the guard, timeit.)
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
    instructions (callgrind, loopback).

    The thread sleeps until the earliest armed deadline (at most ``MAX_SLEEP``,
    and for ever while nothing is armed). An attempt armed with a deadline before
    the thread's next wake-up wakes it, which only an attempt with very little
    time left does, so a busy client wakes it a few times a second rather than at
    every tick: each wake-up takes the GIL from the threads doing requests.
    """

    MAX_SLEEP = 0.25
    IDLE_AFTER = 1.0  # seconds without an arm() before the thread sleeps until the next one

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # ticket -> (when, the socket to cut or the callable to call then)
        self._armed: dict[int, tuple[float, Response | Callable[[], object]]] = {}
        self._cut: set[int] = set()  # tickets whose socket was shut down
        self._tickets = itertools.count()
        self._wake = threading.Event()
        self._wakes_at = float("inf")  # when the thread looks next (inf: never, or not started)
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.looks = 0  # how often the thread has looked at the armed attempts
        self._armed_lately = False  # set by arm(), cleared by the thread

    def arm(self, at: float, target: Response | Callable[[], object]) -> int:
        """Cut ``target``'s socket (a response's) at ``at`` (monotonic seconds) unless
        disarmed first; the ticket to disarm with. The socket is looked up only when the
        time has passed, which almost no attempt lets happen: looking it up at every arm
        was 330 of the 800 ns an arm and disarm cost (timeit). A response without one
        (an in-process transport) has nothing to cut, and is never cut. For a callable
        (:meth:`call_at`), call it then instead."""
        ticket = next(self._tickets)
        self._armed[ticket] = (at, target)
        self._armed_lately = True
        if at >= self._wakes_at:
            return ticket  # the thread looks before it is due
        if self._thread is None:
            self._start()
        self._wake.set()
        return ticket

    # ``call_at(at, action)``: call ``action`` from the watchdog's thread at ``at`` unless
    # disarmed first (a sync hedge that is due: ``action`` only hands it to a sending
    # thread, as nothing may hold this thread up); the ticket to disarm with. ``arm``
    # itself, under the name that says what it does with a callable: no frame of its own.
    call_at = arm

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
        busy_at = self._clock()
        while True:
            self.looks += 1
            now = self._clock()
            if self._armed_lately:
                self._armed_lately = False
                busy_at = now
            earliest = float("inf")
            for ticket, (at, target) in list(self._armed.items()):
                if at > now:
                    earliest = min(earliest, at)
                    continue
                self._cut.add(ticket)  # before the pop: disarm() then sees it was cut
                if self._armed.pop(ticket, None) is None:
                    self._cut.discard(ticket)  # disarmed in time after all
                    continue
                if callable(target):  # a response is not
                    try:
                        target()
                    except Exception:  # a bug there must not stop every deadline
                        logger.exception("failover: a timed action failed")
                    continue
                sock = socket_of(target)
                if sock is None:
                    self._cut.discard(ticket)  # nothing to cut: it runs its course
                    continue
                with contextlib.suppress(OSError):  # already closed: nothing to interrupt
                    sock.shutdown(socket.SHUT_RDWR)
            # Nothing armed: keep looking every MAX_SLEEP for a while (a client that
            # arms and disarms in turn would otherwise wake the thread every time).
            idle = earliest == float("inf") and now - busy_at > self.IDLE_AFTER
            sleep = None if idle else min(earliest - now, self.MAX_SLEEP)
            # Publish the wake-up before clearing the event: an arm() racing with this
            # either sees the new time or sets the event after the clear.
            self._wakes_at = float("inf") if sleep is None else now + sleep
            self._wake.clear()
            if self._armed and min(at for at, _ in list(self._armed.values())) < self._wakes_at:
                continue  # armed while we looked: look again
            self._wake.wait(sleep)


watchdog = _Watchdog()
