"""The resolver cache: TTL bounds, LRU, negative answers, serve-stale, and single-flight.

Rules and theory of operation
-----------------------------
``_Table`` decides, ``CachingResolver`` does the I/O; the table reads no clock (``now`` is
an argument) and does no I/O, so every rule below is tested with numbers.

One entry per name, at most ``max_entries`` of them, the least recently used evicted first.
An entry holds the last good answer, or the last error, or both:

=====================================  ==================================================
the entry, at ``now``                  ``lookup`` gives
=====================================  ==================================================
none                                   a miss: ask the resolver
a good answer within its TTL           the answer, ``source="cache"``, the TTL left
a failure (or no address) held         that error again, without asking
a good answer held as stale            the answer, ``source="stale"`` (recheck timer)
a good answer past its TTL             a miss (the answer is kept for ``fail``)
a good answer past ``serve_stale``     a miss, and the entry is forgotten
=====================================  ==================================================

What the resolver said then goes through ``store`` or ``fail``:

* an answer: its TTL clamped to ``[min_ttl, max_ttl]``; it replaces the entry;
* ``NoAddresses`` (NXDOMAIN, no record: the name's own answer): kept ``negative_ttl`` seconds,
  and the good answer is forgotten (RFC 2308);
* any other error (timeout, unreachable, a bad answer): if a good answer expired less than
  ``serve_stale`` seconds ago, it is served as ``stale`` and held so for ``stale_ttl``
  seconds before the resolver is asked again (RFC 8767's failure recheck timer); without
  one, the error is kept ``negative_ttl`` seconds (RFC 9520) and raised. Bad input thus
  never replaces a good answer.

Single-flight: a miss makes its caller the name's leader, and others missing the same name
meanwhile wait for the leader's outcome (one ``concurrent.futures.Future`` per name under
one lock: threads wait on it, tasks through ``_aio.wait_future``, asyncio or trio). A leader
that is cancelled hands over: its waiters look again, and one of them leads.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from .. import semconv
from .._fork import renew_in_child
from ._aio import wait_future
from ._base import (
    Answer,
    NoAddresses,
    ResolveError,
    Resolver,
    ResolveTimeout,
    answered,
    normalize_host,
)

__all__ = ["CachingResolver"]

#: How many times a caller looks again after its leader was cancelled, before it gives up.
HANDOVERS = 3


@dataclass(slots=True)
class _Entry:
    answer: Answer | None = None  # the last good answer (TTL clamped, its resolver's source)
    fresh_until: float = -math.inf  # the answer is fresh before this
    stale_until: float = -math.inf  # the answer may be served stale before this
    held_until: float = -math.inf  # after a failed refresh: served stale until this
    error: ResolveError | None = None  # a failure or negative answer, raised again...
    error_until: float = -math.inf  # ...until this


@dataclass(frozen=True, slots=True, kw_only=True)
class _Bounds:
    min_ttl: float
    max_ttl: float
    negative_ttl: float
    serve_stale: float
    stale_ttl: float
    max_entries: int

    def __post_init__(self) -> None:
        for name in ("min_ttl", "max_ttl", "negative_ttl", "serve_stale", "stale_ttl"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"CachingResolver({name}=...) takes seconds >= 0, got {value!r}")
        if self.min_ttl > self.max_ttl:
            raise ValueError(
                f"CachingResolver: min_ttl ({self.min_ttl}) is above max_ttl ({self.max_ttl})"
            )
        if isinstance(self.max_entries, bool) or not isinstance(self.max_entries, int) or self.max_entries < 1:
            raise ValueError(
                f"CachingResolver(max_entries=...) takes a whole number >= 1, got {self.max_entries!r}"
            )


class _Table:
    """The cache's decisions (see the module docstring); not thread-safe by itself."""

    def __init__(self, bounds: _Bounds) -> None:
        self.bounds = bounds
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """The cached names, least recently used first."""
        return list(self._entries)

    def lookup(self, host: str, now: float) -> Answer | ResolveError | None:
        """A cached answer or error for ``host`` at ``now``, or ``None``: ask the resolver."""
        entry = self._entries.get(host)
        if entry is None:
            return None
        if entry.error is not None and now < entry.error_until:
            self._entries.move_to_end(host)
            return entry.error.again()  # (the kept one is never raised: see ResolveError.again)
        answer = entry.answer
        if answer is not None and now < entry.fresh_until:
            self._entries.move_to_end(host)
            return replace(answer, ttl=entry.fresh_until - now, source=semconv.RESOLVE_SOURCE_CACHE)
        if answer is not None and now < min(entry.held_until, entry.stale_until):
            self._entries.move_to_end(host)
            return replace(answer, ttl=entry.held_until - now, source=semconv.RESOLVE_SOURCE_STALE)
        if answer is None or now >= entry.stale_until:
            del self._entries[host]
        return None

    def store(self, host: str, answer: Answer, now: float) -> Answer:
        """Keep ``answer`` (its TTL clamped); returns it as the caller should see it."""
        b = self.bounds
        ttl = min(max(answer.ttl, b.min_ttl), b.max_ttl)
        kept = replace(answer, ttl=ttl)
        self._put(host, _Entry(kept, now + ttl, now + ttl + b.serve_stale))
        return kept

    def fail(self, host: str, error: ResolveError, now: float) -> Answer | ResolveError:
        """The resolver raised ``error``: a stale answer to serve, else ``error``, to raise."""
        b = self.bounds
        entry = self._entries.get(host)
        if isinstance(error, NoAddresses):
            self._put(host, _Entry(error=error, error_until=now + b.negative_ttl))
            return error
        if entry is not None and entry.answer is not None and now < entry.stale_until:
            entry.held_until = min(now + b.stale_ttl, entry.stale_until)
            self._entries.move_to_end(host)
            return replace(
                entry.answer, ttl=entry.held_until - now, source=semconv.RESOLVE_SOURCE_STALE
            )
        self._put(host, _Entry(error=error, error_until=now + b.negative_ttl))
        return error

    def forget(self, host: str | None) -> None:
        if host is None:
            self._entries.clear()
        else:
            self._entries.pop(host, None)

    def _put(self, host: str, entry: _Entry) -> None:
        self._entries[host] = entry
        self._entries.move_to_end(host)
        while len(self._entries) > self.bounds.max_entries:
            self._entries.popitem(last=False)


class _Handover:
    """A flight's result when its leader was cancelled: look again."""


_HANDOVER = _Handover()
_Flight = concurrent.futures.Future[Answer | _Handover]


class CachingResolver:
    """A cache in front of ``inner`` (see the module docstring for every rule).

    ``min_ttl`` / ``max_ttl`` bound the TTL an answer is kept for; ``negative_ttl`` how long
    "no address" and failures are kept; ``serve_stale`` how long past its TTL an answer may
    still be served when ``inner`` fails (0: never), each time for ``stale_ttl`` seconds;
    ``max_entries`` how many names are kept. ``wait`` bounds how long a caller waits for
    another's lookup of the same name. ``clock`` is a monotonic clock in seconds.
    """

    def __init__(
        self,
        inner: Resolver,
        *,
        min_ttl: float = 5.0,
        max_ttl: float = 3600.0,
        negative_ttl: float = 5.0,
        serve_stale: float = 86400.0,
        stale_ttl: float = 30.0,
        max_entries: int = 1000,
        wait: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._table = _Table(
            _Bounds(
                min_ttl=min_ttl,
                max_ttl=max_ttl,
                negative_ttl=negative_ttl,
                serve_stale=serve_stale,
                stale_ttl=stale_ttl,
                max_entries=max_entries,
            )
        )
        if not 0 < wait < math.inf:
            raise ValueError(f"CachingResolver(wait=...) takes seconds > 0, got {wait!r}")
        self._wait = wait
        self._clock = clock
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        renew_in_child(self, CachingResolver._forked)

    def _forked(self) -> None:
        """In a fork's child (``_fork``): a free lock, and no lookup in flight (those were
        the parent's threads': one joined here would wait for an answer that never comes)."""
        self._lock = threading.Lock()
        self._flights = {}

    def __repr__(self) -> str:
        return f"CachingResolver({self.inner!r}, {len(self._table)} names)"

    # -- the cache's contents

    def names(self) -> list[str]:
        """The cached names, least recently used first."""
        with self._lock:
            return self._table.names()

    def forget(self, host: str | None = None) -> None:
        """Drop ``host``'s entry (every entry without one)."""
        with self._lock:
            self._table.forget(None if host is None else normalize_host(host))

    # -- resolving

    # A leader's error is set on its flight, and its traceback holds the frames it came up
    # through: none of them may hold the flight (or the error) once it is raised, or both
    # would wait for the cyclic collector. So the leader's outcome is settled without a raise
    # (``_settle`` takes the flight from ``_flights`` itself), raised by ``answered`` alone,
    # and ``resolve`` lets go of the flight ``_begin`` gave it on its way out.

    def resolve(self, host: str) -> Answer:
        name = normalize_host(host)
        flight: _Flight | None = None
        try:
            for _ in range(HANDOVERS):
                cached, flight, leads = self._begin(name)
                if cached is not None:
                    return cached
                assert flight is not None
                if leads:
                    return self._lead(name)
                try:
                    # The leader's error is read, not raised (as result() would): each waiter
                    # raises its own, as a look-up of a held error does (ResolveError.again).
                    error = flight.exception(timeout=self._wait)
                except concurrent.futures.TimeoutError:
                    raise self._waited_too_long(name) from None
                if error is not None:
                    raise error.again() if isinstance(error, ResolveError) else error
                outcome = flight.result()
                if isinstance(outcome, Answer):
                    return outcome
            raise self._waited_too_long(name)
        finally:
            flight = None  # (see above)

    async def aresolve(self, host: str) -> Answer:
        name = normalize_host(host)
        flight: _Flight | None = None
        try:
            for _ in range(HANDOVERS):
                cached, flight, leads = self._begin(name)
                if cached is not None:
                    return cached
                assert flight is not None
                if leads:
                    return await self._alead(name)
                try:
                    # a waiter cancelled must not cancel the flight the others wait for
                    outcome: Answer | _Handover | ResolveError = await wait_future(flight, self._wait)
                except TimeoutError:
                    raise self._waited_too_long(name) from None
                except ResolveError as leaders:  # each waiter raises its own, as resolve()'s do
                    outcome = leaders.again()
                if isinstance(outcome, ResolveError):
                    try:
                        raise outcome
                    finally:
                        del outcome  # its traceback holds this frame
                if isinstance(outcome, Answer):
                    return outcome
            raise self._waited_too_long(name)
        finally:
            flight = None  # (see resolve)

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()

    # -- shared by both

    def _begin(self, name: str) -> tuple[Answer | None, _Flight | None, bool]:
        """A cached answer (an error is raised), or the flight to lead or to wait for."""
        with self._lock:
            cached = self._table.lookup(name, self._clock())
            if isinstance(cached, ResolveError):
                try:
                    raise cached
                finally:
                    del cached  # its traceback holds this frame
            if cached is not None:
                return cached, None, False
            flight = self._flights.get(name)
            if flight is not None:
                return None, flight, False
            flight = self._flights[name] = concurrent.futures.Future()
            return None, flight, True

    def _lead(self, name: str) -> Answer:
        try:
            answer = self.inner.resolve(name)
        except BaseException as exc:
            return answered(self._settle_error(name, exc))
        return answered(self._settle(name, answer))

    async def _alead(self, name: str) -> Answer:
        try:
            answer = await self.inner.aresolve(name)
        except BaseException as exc:
            return answered(self._settle_error(name, exc))
        return answered(self._settle(name, answer))

    def _settle_error(self, name: str, exc: BaseException) -> Answer | BaseException:
        """The leader's resolver raised: a ``ResolveError`` is the outcome (maybe a stale
        answer); a bug is passed on to the waiters; a cancellation hands over to them. The
        leader raises what comes back, if an error (``answered``)."""
        if isinstance(exc, ResolveError):
            return self._settle(name, exc)
        with self._lock:
            flight = self._flights.pop(name, None)
        if flight is not None:  # (None in a fork's child: the flight was the parent's)
            if isinstance(exc, Exception):
                flight.set_exception(exc)
            else:
                flight.set_result(_HANDOVER)
        return exc

    def _settle(self, name: str, outcome: Answer | ResolveError) -> Answer | ResolveError:
        """Store the leader's outcome and hand it to the waiters of its flight (the one
        ``_begin`` made for it): the answer, or the error for the leader to raise."""
        with self._lock:
            flight = self._flights.pop(name, None)
            now = self._clock()
            if isinstance(outcome, Answer):
                settled: Answer | ResolveError = self._table.store(name, outcome, now)
            else:
                settled = self._table.fail(name, outcome, now)
        if flight is not None:  # (as in _settle_error)
            if isinstance(settled, ResolveError):
                flight.set_exception(settled)
            else:
                flight.set_result(settled)
        return settled

    def _waited_too_long(self, name: str) -> ResolveTimeout:
        return ResolveTimeout(
            f"waited {self._wait} s for another caller's lookup of {name!r}", host=name
        )

