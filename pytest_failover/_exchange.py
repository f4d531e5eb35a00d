"""One logical request through the failover loop: everything but the I/O.

:class:`Exchange` is what the sync and async transports share: the request's plan
(it is one, a :class:`~pytest_failover._plan.RequestPlan`), rewriting the request onto
the attempt's domain, how much of a body to read and what to make of it,
classification, telemetry, and carrying out the core's ending (the response, a stale
copy, the fallback, or the error). The transports' two loops in ``_transport.py`` only
send, read, sleep and close.

No HTTP library is imported here: the front-end hands each exchange its
:class:`~pytest_failover._lib.HTTPLib` (httpx's or httpx2's), whose classes build the
requests, responses, body streams and errors of that library.
"""

from __future__ import annotations

import datetime
import inspect
import logging
import operator
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import context as otel_context

from . import semconv
from ._classify import Outcome, OutcomeKind, classify_exception, classify_response
from ._exceptions import CircuitOpen, Failover
from ._lib import InMemory
from ._looplag import lateness
from ._plan import DONE, RequestPlan
from ._pools import PoolCore
from ._sockets import carried, connection, cut_phase, extra_socket, told
from ._telemetry import RequestTrace, redact_url
from ._values import (
    DEFAULT_OPTIONS,
    RESPONSE,
    Attempt,
    AttemptRecord,
    Ending,
    HedgeThrottled,
    RequestOptions,
    Stop,
    Wait,
    ending,
    new_tuple,
    reports,
    stale_may_answer,
)

_monotonic = time.monotonic  # the kernel's clock, which TCP_INFO's times are on

if TYPE_CHECKING:
    from ._lib import HTTPLib, Request, Response
    from ._pool import Domain
    from ._state import State

__all__ = [
    "WHOLE",
    "AsyncExchange",
    "Exchange",
    "FailoverResult",
    "Fallback",
    "Lane",
    "enter",
    "in_memory",
    "leave",
]

logger = logging.getLogger("pytest_failover")

# Called with the request and the front-end's FailoverError (its library's, as the
# response it returns): one fallback may serve front-ends of several libraries.
Fallback = Callable[[Any, Any], Any]


class FailoverResult(NamedTuple):
    """``response.extensions["failover"]``: how the response was obtained."""

    pool: str
    domain: str | None  # the domain that answered (None for a fallback)
    attempts: tuple[AttemptRecord, ...]
    outcome: str  # success | failure | stale | fallback
    stale: bool = False
    fallback: bool = False


# failover.attempt.result for each kind of outcome
_RESULTS = {
    OutcomeKind.SUCCESS: semconv.RESULT_SUCCESS,
    OutcomeKind.ANSWER: semconv.RESULT_ANSWER,
    OutcomeKind.THROTTLED: semconv.RESULT_FAILURE,
    OutcomeKind.FAILURE: semconv.RESULT_FAILURE,
    OutcomeKind.DROPPED: semconv.RESULT_DROPPED,  # (a drop counted against the domain is a FAILURE)
}


_OUTCOME_SUCCESS = semconv.OUTCOME_SUCCESS
# A lane's record of its success, and a hedgeable one's hedge token, globals: CPython 3.11
# never specialises an attribute read on a class (``RequestPlan.answered_alone``), so it was
# looked up in full at each request.
_answered_alone = RequestPlan.answered_alone
_noted = RequestPlan.noted
_DROPPED = OutcomeKind.DROPPED

_EVENT_STREAM = b"text/event-stream"

_SUCCESS = frozenset(range(200, 300))  # the statuses whose body Exchange.reads may read

_timedelta = datetime.timedelta  # (days, seconds): a response's ``elapsed``

# What :meth:`Exchange.reads` answers for a body whose length is declared within the limit
# and that is not encoded: read it all, with no count (the connection ends it at that
# length), into the response's content (:meth:`Exchange.read_whole`).
WHOLE = -1

_REDIRECTS = frozenset((301, 302, 303, 307, 308))  # the statuses httpx follows


# (lowercased name, value) of each of a ``Headers``' (raw name, lowercased name, value) triples.
_NAME_VALUE = operator.itemgetter(1, 2)


def _fits_in_memory_repeated(raw: list[tuple[bytes, bytes, bytes]], limit: int) -> bool:
    """May a 2xx body be read into memory (the rules of :meth:`Exchange.reads`), for headers
    that name a header twice."""
    found: bytes | None = None
    conflict = False
    for _, key, value in raw:
        if key == b"content-length":
            conflict = found is not None
            found = value
        elif key == b"content-type" and value.lower().startswith(_EVENT_STREAM):
            return False
    return conflict or found is None or not found.isdigit() or int(found) <= limit


def in_memory(response: Response) -> bool:
    """Is ``response``'s body in memory: read by the transport, or made from bytes?"""
    return response.is_stream_consumed or isinstance(response.stream, InMemory)


# httpx's four timeouts, none of them set.
_UNLIMITED: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"))


# The capped timeouts of each (timeouts, attempt time) seen lately. A client sends the same
# timeouts again and again (the OpenAI SDK's 600 s with a 5 s connect, on every call), and
# its first attempts all have their pool's first time: capping them afresh was a third of
# what the transport added to an SDK call (100 of 1,024 opcodes).
_CAPS: dict[tuple[Any, ...], dict[str, float]] = {}
_CAPS_KEPT = 256

# For each attempt time, the timeouts last found within it. A client sends the same four
# on every request (httpx's ``Timeout.as_dict()``, a new dict each time): one comparison
# at C level (``Lane.aim``) stands for the three tests, 15 opcodes a request fewer. A
# copy, as the request's own may be changed by whoever holds it.
_WITHIN: dict[float, dict[str, Any]] = {}


def _capped(timeouts: dict[str, Any], limit: float) -> dict[str, float]:
    """httpx's four timeouts of ``timeouts``, each capped at ``limit`` (an unset one is
    ``limit``): a new dict, as the request's own may be changed by whoever holds it."""
    if timeouts == _UNLIMITED:  # none set (requests' default): each is the attempt's time
        return dict.fromkeys(_UNLIMITED, limit)
    key = (*timeouts.items(), limit)
    capped = _CAPS.get(key)
    if capped is None:
        capped = {name: limit if timeouts.get(name) is None else min(timeouts[name], limit) for name in _UNLIMITED}
        if len(_CAPS) >= _CAPS_KEPT:
            _CAPS.clear()
        _CAPS[key] = capped
    return capped.copy()


def enter(attempt: Attempt) -> object:
    """Run in the attempt's context (in the thread or task that sends it); the token
    to :func:`leave` with."""
    return otel_context.attach(attempt.quiet)


def leave(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]  # the Token attach() gave


# httpcore's trace events (``connection.<step>.started``) that open a new connection.
_CONNECTS = frozenset({"connection.connect_tcp.started", "connection.connect_unix_socket.started"})


class _Told:
    """httpx's ``trace`` extension for one attempt (:meth:`Exchange._told_connection`):
    what httpcore's events say of its connection, new once it connects, else, at the first
    event of a request on it, a kept-alive one; and the caller's own trace, called on."""

    __slots__ = ("attempt", "theirs")

    def __init__(self, attempt: Attempt, theirs: Callable[[str, Any], Any] | None) -> None:
        self.attempt = attempt
        self.theirs = theirs

    def note(self, event: str) -> None:
        attempt = self.attempt
        if event in _CONNECTS:
            attempt.new_connection = True
        elif attempt.new_connection is None:
            attempt.new_connection = False

    def __call__(self, event: str, info: Any) -> Any:
        self.note(event)
        return None if self.theirs is None else self.theirs(event, info)


class _AsyncTold(_Told):
    """The async client's (httpcore awaits what the trace returns)."""

    __slots__ = ()

    async def __call__(self, event: str, info: Any) -> None:
        self.note(event)
        if self.theirs is not None:
            await self.theirs(event, info)


class Lane:
    """A request before it needs a plan: the fast lane.

    Most requests are answered at their first attempt by the domain their pool serves.
    Such a request has nothing to decide beyond the pool's choice, and nothing to keep
    beyond its one attempt's record, so it goes without a plan: the loops send the
    attempt a lane holds (:attr:`attempt`), and its success ends it (:meth:`ends`). Anything
    else, a failure, an answer that is not a plain success, a success that moves the pool,
    or the caller leaving, hands the request to an :class:`Exchange` (its plan) with that
    attempt in it (:meth:`Exchange.adopting`), which goes on as if it had sent the attempt
    itself. A lane takes a request with no options, whose body can be sent again, to a
    plain pool (``PoolCore.plain``: the pool's choice alone decides the first attempt),
    while the stale cache is off for it; the exchange takes the others from the start.
    While telemetry records (``Telemetry.silent`` says it does not), the request is a
    :class:`TracedLane`, which records what the exchange would. A lane takes a hedging
    pool's that is plain otherwise (``PoolCore.lane_hedges``) too, in the async loops and
    in a sync one whose race can cut a socket: a hedgeable one's attempt is :attr:`racing`
    (sent with its first hedge armed), and the race builds its exchange only when that
    hedge falls due (``ThreadRace.sent``, ``async_race``).

    The lane is an exchange's base: what both need to send an attempt and read its answer
    (the request, its rewrite onto the attempt's domain, the body read) lives here once.
    A request the lane answers builds no plan, no lists of records and no steps: it ran a
    quarter fewer of the library's opcodes than one the exchange answers at its first
    attempt when the lane came in (744 against 996 for httpx sync).

    A lane is made in two steps, ``Lane()`` and :meth:`start`: a class with no
    ``__init__`` is made in C alone, where a call of one with an ``__init__`` runs it from
    C (a frame the interpreter cannot run inline, and a tuple of its arguments): 1,200
    instructions a request more (callgrind).
    """

    _stale = False  # the stale cache may store and serve this request (see PoolCore.reading)
    attempt: Attempt | None = None  # the first attempt, when the lane takes the request alone
    # ... or when it sends it with its first hedge armed (a hedgeable request in a pool that
    # is plain but for hedging, ``PoolCore.lane_hedges``: ``SyncLoop._raced``, ``AsyncLoop._raced``)
    racing: Attempt | None = None
    trace: RequestTrace | None = None  # the request's telemetry (a TracedLane's, an exchange's)
    # The caller's request points at another domain than the URL asked for (``aim``); set
    # only by a rewrite, read once the answer is in (``as_asked``).
    _moved = False

    def start(
        self,
        state: State,
        lib: HTTPLib,
        request: Request,
        core: PoolCore,
        origin: Domain | None,
        now: float,
    ) -> None:
        """The lane of ``request`` to ``core``'s pool at ``now``, and its first attempt,
        aimed, in :attr:`attempt` when the lane takes the request alone: the pool's choice
        is not a probe, and the stale cache is off for the request. In a hedging pool a
        hedgeable request's (one the pool may send again: ``PoolCore.idempotent``, its body
        replayable as every lane's is) is in :attr:`racing` instead, and has earned the
        hedge throttle its token (``RequestPlan.noted``, as a plan's first attempt does).
        With neither, the exchange takes it from the start (``Exchange.adopting``)."""
        self._state = state
        self.lib = lib
        self._origin = origin  # the pool domain the request's URL points at, if any
        self.request = request
        self.original_url = request.url
        self.core = core
        self.started_at = now
        self._moved = False  # (read by every lane's end: an attribute of its own, see new_attempt)
        method = request.method
        reading = core.idempotent_reading.get(method)  # most requests' methods: no call
        if reading is None:  # one its headers may make idempotent (an Idempotency-Key)
            resendable = core.idempotent(method, request.headers)
            reading = (resendable, *core.reading[resendable][method == "GET"])
        resendable, self.body_limit, self._loads, stale = reading
        if stale:
            self._stale = True
            return
        attempt = core.first_attempt(now, core.orders[0])
        if attempt is not None:
            self.attempt = self.aim(attempt, request)
            if core.hedging is not None and resendable:  # it may hedge: see ``racing``
                self.racing, self.attempt = attempt, None
                with core.lock:
                    _noted(core, attempt, True)

    @property
    def clock(self) -> Callable[[], float]:
        """The front-end's monotonic clock."""
        return self._state.clock

    def ends(self, attempt: Attempt, response: Response, wait: bool) -> bool:
        """Does ``response``, the answer to ``attempt`` (:attr:`attempt`), end the request here (``wait``:
        the front-end may wait for the disk)? It does when it is a success the pool records
        as nothing new (``RequestPlan.answered_alone``): it then carries its result."""
        core = self.core
        outcome = core.successes.get(response.status_code)
        if outcome is None:  # not a success the status alone decides
            return False
        clock = self._state.clock  # (a callable in a slot: called where it is read, not a method look-up)
        now = clock()
        if not _answered_alone(core, attempt, now):
            return False
        attempt.outcome = outcome
        attempt.duration = now - attempt.sent_at
        _deliver(self._state, core, response, attempt.domain.url, (attempt.report(),), _OUTCOME_SUCCESS, wait)
        if self._moved:
            self.as_asked(response, attempt.domain)
        return True

    def as_asked(self, response: Response, domain: Domain) -> None:
        """``response``, from ``domain``, another domain than the URL asked for's, made the
        answer of the URL asked for, where the client reads it as such (the aiohttp
        middleware's ``_as_asked`` does the same for aiohttp). To the client the pool is one
        site:

        - the request points back at the URL asked for (:meth:`restore`): the client files
          the answer's cookies, joins a relative redirect and logs the request by
          ``response.request.url``, which is the request itself, where a bare client has
          the URL asked for (the result's ``domain`` says which domain answered);
        - a redirect to ``domain``'s own origin is made one to the origin asked for (same
          path and query): the client judges a ``Location`` by the URL asked for, and would
          drop the request's ``Authorization`` for another origin, where a bare client that
          asked that domain keeps it. It then follows it through the pool."""
        if self._moved:
            self.restore()
        if response.status_code not in _REDIRECTS:
            return
        location = response.headers.get("Location")
        http = self.lib.module
        try:
            target = http.URL(location) if location else None
        except http.InvalidURL:  # not a URL: the client raises its own error for it
            return
        if target is None or not target.is_absolute_url:
            return
        origin = (domain.scheme, domain.host, domain.port)
        url = self.original_url
        if (target.scheme, target.host, target.port) == origin != (url.scheme, url.host, url.port):
            moved = url.copy_with(raw_path=target.raw_path, fragment=target.fragment or None)
            response.headers["Location"] = str(moved)

    def restore(self) -> None:
        """Point the caller's request, which the attempts pointed at their domains, back at
        the URL asked for: it is the client's, the one an answer carries and an error
        names."""
        request = self.request
        request.url = url = self.original_url
        request.headers["Host"] = url.netloc.decode("ascii")
        self._moved = False

    def aim(self, attempt: Attempt, request: Request) -> Attempt:
        """Point ``request`` at the attempt's domain, with the attempt's timeouts; the
        attempt, which sends it."""
        domain = attempt.domain
        # (at the URL's own domain: no rewrite; a condition written in the expression, not
        # kept in a name, and the attempt's time read where it is compared: 5 opcodes a
        # request fewer)
        url = (
            self.original_url
            if domain is self._origin or domain == self._origin
            else domain.rewrite(self.original_url)
        )
        if url is not request.url:
            request.url = url
            request.headers["Host"] = domain.netloc
            if request is self.request:  # (a hedge's copy is its own)
                self._moved = url is not self.original_url
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        # httpx's four, each set and within the attempt's time: as last time, or else tested
        # (C-level tests: a loop over the four cost 40 opcodes a request; a raised and caught
        # TypeError for requests' None cost its adapter 15,000 instructions a request, callgrind)
        if timeouts != _WITHIN.get(attempt.timeout):
            values = timeouts.values()
            if len(timeouts) != 4 or None in values or max(values) > attempt.timeout:  # cap each at it
                request.extensions = {**request.extensions, "timeout": _capped(timeouts, attempt.timeout)}
            else:
                if len(_WITHIN) >= _CAPS_KEPT:
                    _WITHIN.clear()
                _WITHIN[attempt.timeout] = timeouts.copy()
        attempt.request = request
        return attempt

    def reads(self, response: Response) -> int:
        """How much of ``response``'s body the transport reads into memory before the
        outcome is known: :data:`WHOLE` (all of it, uncounted), a count of bytes (at most
        :attr:`body_limit`) or 0 to hand it over unread. The transport reads it (its own
        I/O), then hands the bytes to :meth:`read_whole` or :meth:`read_in`, or to
        :meth:`continued` past the count.

        Only a 2xx body is read, and only one that declares no length or one within the
        limit (a value that is not a plain number, or two values, declare none: h11
        refuses a conflicting pair), and is not an event stream (``Content-Type:
        text/event-stream``: server-sent events, an LLM's tokens): each event reaches the
        caller as it comes, and a connection that breaks mid-stream reaches the caller
        too, never replayed elsewhere. Nor one the inner transport read already (an
        in-process one): nothing is left to break. A body whose length is declared within
        the limit and that is not encoded (no ``Content-Encoding``) is read :data:`WHOLE`:
        the connection holds it to that length (h11, h2, ``http.client`` and aiohttp's
        parser end the body there), so no count is kept and the sync loop reads it at C
        level, and its bytes are its content (:meth:`read_whole`). Any other body is
        counted as it comes: one of no declared length, one sent with
        ``Transfer-Encoding`` (its chunks end it, not the length), an encoded one.

        Every request asks, so the headers are the library's own list of byte triples (raw
        name, lowercased name, value: every httpx since 0.18, and httpx2), read into a dict
        at C level (``map``); a name given twice (``Set-Cookie``, a conflicting length)
        takes the loop over the triples instead. ``headers.get`` encodes the key and
        decodes each match (1.9 µs against 0.23 µs for a scan of the list, timeit)."""
        limit = self.body_limit
        if not limit or response.status_code not in _SUCCESS or response.is_stream_consumed:
            return 0
        raw = response.headers._list
        named = dict(map(_NAME_VALUE, raw))
        # (a body that would be counted: not for a limit that reads only whole, ``WholeOnly``)
        if len(named) < len(raw):
            return limit if limit.__class__ is int and _fits_in_memory_repeated(raw, limit) else 0
        if named.get(b"content-type", b"").lower().startswith(_EVENT_STREAM):
            return 0
        if b"transfer-encoding" in named:  # its chunks end it: a length beside them declares nothing
            return limit if limit.__class__ is int else 0
        length = named.get(b"content-length")
        if length is None or not length.isdigit():  # no length declared: counted as it comes
            return limit if limit.__class__ is int else 0
        if int(length) > limit:
            return 0
        if b"content-encoding" in named:  # counted, and decoded by the client
            return limit if limit.__class__ is int else 0
        return WHOLE

    def read_whole(self, response: Response, body: bytes) -> Response:
        """``response`` with its ``body`` in memory, a body :meth:`reads` answered
        :data:`WHOLE`: not encoded, so its bytes are its content. The library's own read
        is done here, as it would do it: the content, the bytes downloaded and ``elapsed``
        set, the raw bytes left to stream again (``iter_raw``). The client's read is then
        a look-up: reading the bytes again through its decoders and chunkers cost httpx
        59,000 instructions, more than the transport adds to the whole request (callgrind,
        loopback). The response stays open, as one streamed and not read yet: ``iter_raw``
        works, and ``close()`` closes it."""
        stream = self.lib.InMemory  # of the front-end's library (a class in a slot: see ends)
        response.stream = stream(body)
        response._content = body
        response._num_bytes_downloaded = len(body)
        # httpx's ``elapsed`` setter is a property's frame: its attribute, as it sets it
        clock = self._state.clock
        response._elapsed = _timedelta(0, clock() - self.started_at)
        return response

    def read_in(self, response: Response, body: bytes) -> Response:
        """``response`` with its ``body`` (all of it) in memory: a mid-body failure could
        still fail over, the stale cache may store it, the app-error check may read it
        (the caller closed its stream). The same response, its stream replaced: a new
        ``httpx.Response`` cost 87,000 instructions, as much again as the transport adds to
        a whole request (callgrind, in process). Left unread unless the exchange looks at
        the body (``_loads``); then decoded into ``content``, the raw bytes left to stream
        again."""
        response.stream = self.lib.InMemory(body)  # of the front-end's library
        if self._loads:
            response.read()
            response._elapsed = _timedelta(0, self._state.clock() - self.started_at)  # (see read_whole)
            response.is_stream_consumed = response.is_closed = False  # as if unread: iter_raw() works
        return response

    def continued(self, response: Response, chunks: list[bytes], rest: Any, stream: Any) -> Response:
        """``response`` (a body over :meth:`reads`' count) streaming the ``chunks`` read so
        far, then ``rest`` of ``stream``, untouched and uncached."""
        response.stream = self.lib.Continued(chunks, rest, stream)
        return response

    def timed_out(self, attempt: Attempt, exc: BaseException | None) -> Any:
        """The error for an attempt cut at its time limit: the library's own timeout for
        the phase the cut found it in (``ConnectTimeout`` for a connect, which sent nothing;
        ``ReadTimeout`` for a read), as the library raises it when its timeout goes first.
        The phase is read from the cut (``exc``'s cause: the cancellation, whose frames say
        where it landed; :func:`~pytest_failover._sockets.cut_phase`)."""
        kind = cut_phase(self.lib.core, exc.__cause__ if exc is not None else None)
        error: BaseException = getattr(self.lib.module, kind)(
            f"attempt {attempt.number} on {attempt.domain} took longer than its {attempt.timeout:.3f} s",
            request=self.request,
        )
        error.__cause__ = exc
        return error

    def stray(self, attempt: Attempt, exc: OSError) -> Any:
        """The error for a raw ``OSError`` the inner transport let out instead of its
        library's (httpcore's anyio backend lets an ``ssl.SSLError`` out of a read): the
        library's ``ReadError``, so the attempt fails as any read does (bytes may have left)
        and the caller never sees an error outside its library's family."""
        error: BaseException = self.lib.module.ReadError(
            f"attempt {attempt.number} on {attempt.domain}: {type(exc).__name__}: {exc}", request=self.request
        )
        error.__cause__ = exc
        return error

    # -- telemetry (a request with a trace: a TracedLane's, or an exchange's) --------------

    def _started(self, trace: RequestTrace, attempt: Attempt) -> None:
        """``attempt`` goes out: its span, and the context to send it in (:func:`enter`)."""
        attempt.span, attempt.quiet = trace.attempt_started(attempt, attempt.request)

    def _peer(self, attempt: Attempt, response: Response) -> None:
        """Name the address a response came from on its attempt's span, if it has one and
        a pool resolves (a pooled connection's too, which the resolving backend did not
        open for this attempt); before the span ends."""
        dialer = self._state.dialer
        if attempt.span is None or dialer is None:
            return
        peer = dialer.peer(response)
        if peer is not None:
            address, source = peer
            attempt.span.set_attributes({semconv.NETWORK_PEER_ADDRESS: address, semconv.FAILOVER_RESOLVE_SOURCE: source})

    @staticmethod
    def _ended(trace: RequestTrace, attempt: Attempt, exception: BaseException | None) -> None:
        """``attempt`` ended (its outcome and duration recorded): its span and metrics."""
        outcome = attempt.outcome
        trace.attempt_ended(
            attempt,
            attempt.span,
            race=attempt.race,
            duration=attempt.duration,
            result=_RESULTS[outcome.kind],
            status=outcome.status,  # a response's status code, None for an error
            error_type=outcome.error_type,
            exception=exception,
        )

    def _finished_trace(
        self,
        trace: RequestTrace,
        outcome: str,
        domain: str | None,
        status: int | None,
        error_type: str | None,
        attempts: int,
    ) -> None:
        """The request ended with ``outcome`` after ``attempts`` attempts: its span and metrics."""
        trace.finish(
            outcome=outcome,
            duration=self.clock() - self.started_at,
            attempts=attempts,
            domain=domain,
            status=status,
            error_type=error_type,
        )


class TracedLane(Lane):
    """A lane while telemetry records: its request's trace starts with it, its attempt's
    span as the attempt is aimed, and a success it ends records both as the exchange would
    (the same calls: :meth:`Lane._started`, :meth:`Lane._ended`,
    :meth:`Lane._finished_trace`). A request it hands over keeps its trace
    (``Exchange.adopting``). A class of its own, so that the silent lane, most requests'
    where no SDK is installed, asks nothing of telemetry."""

    def start(
        self,
        state: State,
        lib: HTTPLib,
        request: Request,
        core: PoolCore,
        origin: Domain | None,
        now: float,
    ) -> None:
        self.trace = trace = state.telemetry.start(core.name, request.method, request.url)
        Lane.start(self, state, lib, request, core, origin, now)
        attempt = self.attempt or self.racing
        if trace is not None and attempt is not None:
            self._started(trace, attempt)

    def ends(self, attempt: Attempt, response: Response, wait: bool) -> bool:
        if not Lane.ends(self, attempt, response, wait):
            return False
        trace = self.trace
        if trace is not None:
            self._peer(attempt, response)
            self._ended(trace, attempt, None)
            self._finished_trace(
                trace, _OUTCOME_SUCCESS, attempt.domain.url, response.status_code, attempt.outcome.error_type, 1
            )
        return True


class Exchange(Lane, RequestPlan):
    """One logical request through the failover loop: everything but the I/O.

    An exchange is its request's plan (:class:`~pytest_failover._plan.RequestPlan`: the
    decisions) and adds the client's side: the request and its rewrites, the body read,
    classification, telemetry and the ending. One object per request: a separate plan
    cost a second object and a call through it at every step. A request starts in an
    exchange, or in a :class:`Lane` that hands it over (:meth:`adopting`).

    What a request sets before it reads it, or only on a rare path, starts as a class
    attribute (as in the plan): a request answered at its first attempt writes each of
    these at most once and never reads a default.
    """

    _tracked: Any = None  # an unreplayable body, watched (the library's ``Tracked``)
    _told: type[_Told] = _Told  # the trace that tells a resend's connection (an event loop's: _AsyncTold)
    _original: Request  # with _stale: the request as the caller made it
    _answered_by: Domain  # the domain of the response kept (set with it)
    response: Response | None = None
    error: BaseException | None = None  # the last attempt's, a TransportError of the library
    stop: Stop = DONE  # why no attempt follows (set when the plan stops for another reason)
    _finished = False  # the request's telemetry has ended (read by abandon only)
    _blocking = True  # its front-end may wait for the disk (a sync one: see AsyncExchange)

    def __init__(
        self,
        state: State,
        lib: HTTPLib,
        request: Request,
        core: PoolCore,
        pinned: Domain | None,
        origin: Domain | None,
        options: RequestOptions,
    ) -> None:
        now = state.clock()
        stream = request.stream
        replayable = isinstance(stream, lib.ByteStream)
        if not replayable:
            self._tracked = lib.Tracked(stream)
            request.stream = self._tracked
        RequestPlan.__init__(self, core, request.method, request.headers, options, replayable, pinned, now)
        # A lane's facts (``Lane.start`` chooses the first attempt too; a call cost 26
        # opcodes a request)
        self._state = state
        self.lib = lib
        self._origin = origin
        self.request = request
        self.original_url = url = request.url
        self.body_limit, self._loads, stale = core.reading[self.resendable][self.method == "GET"]
        self.trace = trace = state.telemetry.start(core.name, self.method, url)
        if trace is not None and self._orders[2] is not None:
            trace.steered(self._orders[2])
        if stale:
            self._stale = True
            # The stale cache keys on the request as the caller made it, before rewrites.
            self._original = lib.Request(self.method, url, headers=request.headers)

    @classmethod
    def adopting(cls, lane: Lane) -> Exchange:
        """The exchange of ``lane``'s request, which needs a plan after all: with the lane's
        first attempt (:attr:`attempt` or :attr:`racing`) in flight, if it sent one (the
        caller reports its end; its throttle token is earned already), or none (the lane did
        not take the request: it starts here). A lane's trace, if any (a
        :class:`TracedLane`'s), goes on with it."""
        self = cls.__new__(cls)
        facts = vars(self)
        facts.update(vars(lane))
        attempt = facts.pop("attempt", None) or facts.pop("racing", None)
        request = self.request
        RequestPlan.__init__(self, self.core, request.method, request.headers, DEFAULT_OPTIONS, True, None, self.started_at)
        if attempt is not None:
            self._took(attempt)
        elif self._stale:  # as __init__ keeps it
            self._original = self.lib.Request(self.method, self.original_url, headers=request.headers)
        return self

    # -- the loop's steps ------------------------------------------------------------

    def next_step(self) -> Attempt | Wait | Stop:
        """The next attempt, a wait for another request's probe, or stop (:meth:`next`, now)."""
        return self.next(self._state.clock())

    def _stepped(self, decision: Attempt | Wait | Stop) -> Attempt | Wait | Stop:
        """Report what ``decision`` caused (its events, a retry's log line); keep why the
        request stops."""
        if self.trace is not None and decision.events:
            self.trace.events(decision.events)
        if isinstance(decision, Attempt):
            if decision.number > 1:
                self._log_retry(decision)
        elif isinstance(decision, Stop):
            self.stop = decision
        return decision

    def prepare(self, attempt: Attempt) -> Attempt:
        """Aim the request at the attempt's domain (:meth:`Lane.aim`; a hedge gets a copy
        of the request: the attempt it races is still sending it); the attempt, ready to
        send. With telemetry the transports send it between :func:`enter` and :func:`leave`
        (its span's context: instrumentation-httpx stays silent, as the attempt's span is
        ours); without, ``quiet`` is None and they skip both."""
        if attempt.delay and (decided := self.resume(attempt, self.clock())) is not None:
            self._log_moved(attempt, decided)  # it waited, and a domain works again since
        self.aim(attempt, self.request if not attempt.hedge else self._copy())
        if attempt.delay:  # it waited: it goes out now, and has its whole time from here
            attempt.sent_at = self.clock()
        elif self._drops and self.last_outcome.kind is _DROPPED:  # type: ignore[union-attr]  # an attempt ended: it has one
            self._told_connection(attempt)  # the resend of a drop (never delayed)
        trace = self.trace
        if trace is not None:
            self._started(trace, attempt)
        return attempt

    def _told_connection(self, attempt: Attempt) -> None:
        """Have the inner transport tell whether ``attempt`` goes out on a new connection
        (``attempt.new_connection``, which :meth:`RequestPlan.dropped` reads should it drop
        too), through httpx's ``trace`` extension: httpcore's events, one of which is the
        TCP connect of a new connection. A caller's own trace is still called; an inner
        transport that calls none leaves it unknown (None): the requests adapter's (urllib3
        opens a new connection for the request after a failed one anyway) and the aiohttp
        middleware's (aiohttp tells nobody; its own session sends again once, as this does)."""
        request = attempt.request
        theirs = request.extensions.get("trace")
        if isinstance(theirs, _Told):  # an earlier resend's
            theirs = theirs.theirs
        request.extensions = {**request.extensions, "trace": self._told(attempt, theirs)}

    def _copy(self) -> Request:
        request = self.request
        copied: Request = self.lib.Request(
            request.method,
            request.url,
            headers=request.headers.copy(),
            stream=request.stream,
            extensions=dict(request.extensions),
        )
        return copied

    # -- hedging ---------------------------------------------------------------------

    def hedge_now(self) -> Attempt | None:
        """The hedge to send now, or None (no domain fits, or the throttle said no)."""
        decision = self.hedge(self.clock())
        if isinstance(decision, HedgeThrottled):
            if self.trace is not None:
                self.trace.events((decision,))
            return None
        return decision

    def cut(self, attempt: Attempt) -> None:
        """Another attempt won while ``attempt`` was on the wire: it is cut off (the
        transport closes its connection), and counted as cancelled (:meth:`cancel`)."""
        now = self.clock()
        events = self.cancel(attempt, now, now - attempt.sent_at, sent=attempt.sending)
        shared = self._state.shared
        if shared is not None and (events or attempt.probe):
            shared.recorded(self.core, attempt.domain, attempt.probe, events, abandoned=True)
        if self.trace is not None:
            self.trace.attempt_cancelled(attempt, attempt.span)
            self.trace.events(events)

    def on_response(self, attempt: Attempt, response: Response) -> None:
        outcome = self.core.outcomes.get(response.status_code)
        if outcome is None:  # its headers or body have a say (Retry-After, the app-error check)
            outcome = classify_response(response, self.core.policy)
        self.response = response
        self._answered_by = attempt.domain  # not the last record: a cut loser's may follow
        self.error = None
        self._peer(attempt, response)  # before _record ends the span
        if self._looks_slow(attempt):  # how much of it was the client's own
            attempt.waited = self._client_held(attempt)
        self._record(attempt, outcome, None)
        if self._stale and outcome.kind is OutcomeKind.SUCCESS and in_memory(response):
            self._state.stale.store(
                self.core.name,
                self._original,
                response,
                self.clock(),
                max_bytes=self.core.policy.stale_max_bytes,
            )

    def reads(self, response: Response) -> int:
        """:meth:`Lane.reads`; and in a pool with ``SlowCalls``, for the only attempt in
        flight, what the kernel will be asked about: its socket, and how many requests its
        connection carried (to tell a new one, and one that carried another since). The
        kernel is asked once the answer is in, while the connection is still the
        attempt's, and only if the call looks slow by then: as the loop closes a body it read (:meth:`_body_closed`,
        through ``_lib.BodyEnd``: httpcore's connection goes back to its pool as its stream
        closes, urllib3's as its last byte is read, with no request on it yet), else at
        :meth:`on_response`. Of a hedged request's attempts, each on its own (:func:`_heading`)."""
        limit = Lane.reads(self, response)
        if self.core.slow_calls is not None and self._state.clock is _monotonic:
            sock = extra_socket(response)
            attempt = None if sock is None else _heading(self.flying, response)
            if attempt is not None:
                attempt.sock = sock
                attempt.connection = conn = connection(response)
                attempt.carried = carried(conn)
                if limit:  # the loop reads the body, then closes it
                    response.stream = self.lib.BodyEnd(response.stream, partial(self._body_closed, attempt))
        return limit

    def _body_closed(self, attempt: Attempt) -> None:
        """The loop closes the body it read of ``attempt``'s answer: the time from here on is
        the client's; the kernel is asked now if the call looks slow already."""
        now = attempt.closed_at = _monotonic()
        if self._looks_slow(attempt, now):
            self._ask_kernel(attempt, now)

    def _ask_kernel(self, attempt: Attempt, now: float) -> None:
        """What the kernel says of ``attempt``'s connection (``_sockets.told``): when its
        answer came (``Attempt.came_at``), and how long it waited in the client before its
        request left, less what its connection's set-up may have taken the domain
        (``Attempt.before``)."""
        moved_on = attempt.carried > 0 and carried(attempt.connection) != attempt.carried
        word = told(attempt.sock, attempt.carried, now, moved_on=moved_on)
        if word is None:
            return
        attempt.came_at = word.came_at
        if word.left_at is not None and word.setup is not None and word.left_at - attempt.sent_at > word.setup:
            attempt.before = word.left_at - attempt.sent_at - word.setup

    def _client_held(self, attempt: Attempt) -> float:
        """How long the client itself held up ``attempt``, which ends now (``Attempt.waited``):
        before its request left (``Attempt.before``), and after its answer came or, if
        later, after the loop closed its body (each a lower bound). The kernel is asked now
        unless it was as the body closed (the connection has gone back to its pool since:
        its time after is the client's anyway)."""
        now = _monotonic()
        if attempt.sock is not None and attempt.closed_at is None:
            self._ask_kernel(attempt, now)
        after = 0.0 if attempt.closed_at is None else now - attempt.closed_at
        if attempt.came_at is not None and now - attempt.came_at > after:
            after = now - attempt.came_at
        return attempt.before + after

    def _looks_slow(self, attempt: Attempt, now: float | None = None) -> bool:
        """Has ``attempt``, of a pool with ``SlowCalls``, taken longer than its threshold so
        far (by ``now``), by the kernel's clock? The kernel is then asked how much of that
        time was the client's own (``Attempt.waited``). Not with an injected clock: its
        seconds are not the kernel's."""
        slow_calls = self.core.policy.slow_calls
        if slow_calls is None or self._state.clock is not _monotonic:
            return False
        return (_monotonic() if now is None else now) - attempt.sent_at > slow_calls.threshold

    def on_error(self, attempt: Attempt, exc: BaseException) -> None:
        started = self._tracked.started if self._tracked is not None else False
        outcome = classify_exception(exc, body_started=started, head_came=attempt.head_came)
        self.response = None
        self.error = exc
        self._record(attempt, outcome, exc)

    def arrived(
        self, attempt: Attempt, response: Response | None, error: BaseException | None
    ) -> Response | None:
        """``attempt`` ended with ``response`` or ``error``: report it. The answer, if any."""
        if error is not None:
            self.on_error(attempt, error)
            return None
        assert response is not None
        self.on_response(attempt, response)
        return response

    def _record(self, attempt: Attempt, outcome: Outcome, exception: BaseException | None) -> None:
        now = self._state.clock()
        duration = now - attempt.sent_at
        events = self.answer(attempt, outcome, now, duration)
        shared = self._state.shared
        if shared is not None and (events or attempt.probe or outcome.failed):  # news for the fleet
            shared.recorded(self.core, attempt.domain, attempt.probe, events, failed=outcome.failed)
        trace = self.trace
        if trace is None:
            return
        self._ended(trace, attempt, exception)
        if events:
            trace.events(events)

    def _log_retry(self, attempt: Attempt) -> None:
        if not logger.isEnabledFor(logging.WARNING):  # nobody listens: not even the redaction
            return
        last = self.records[-1]
        logger.warning(
            "pool %s: %s %s attempt %d on %s failed (%s); attempt %d on %s in %.3f s",
            self.core.name,
            self.method,
            redact_url(self.original_url),
            last.number,
            last.domain,
            last.outcome.error_type,
            attempt.number,
            attempt.domain.url,
            attempt.delay,
        )

    def _log_moved(self, attempt: Attempt, decided: Domain) -> None:
        logger.warning(
            "pool %s: %s %s attempt %d goes to %s, not %s: it works again since the attempt was decided",
            self.core.name,
            self.method,
            redact_url(self.original_url),
            attempt.number,
            attempt.domain.url,
            decided.url,
        )

    # -- the end ---------------------------------------------------------------------

    def finish(self) -> Any:
        """The response to return, a fallback's (possibly awaitable) response, or raise
        (``Any``: the front-end's library's ``Response``, or an awaitable of one)."""
        records = reports(self.records)
        response = self.response
        if response is not None and not self._stale:  # no stored copy to weigh: ending() says RESPONSE
            return self._answer(response, records)
        if self._moved:  # a stored copy, a fallback's answer or an error: for the request asked
            self.restore()
        status = None if response is None else response.status_code
        stale = self._stale_response() if self._stale and stale_may_answer(status) else None
        decided = ending(status, stale is not None, self._state.fallback is not None)
        if decided is RESPONSE:
            assert response is not None
            return self._answer(response, records)
        error = self._error(self.stop, records)
        error_type = semconv.OUTCOME_CIRCUIT_OPEN if not records else (records[-1].error_type or self.stop.reason)
        if decided is Ending.STALE:
            assert stale is not None
            stale.extensions["failover"] = self._reported(semconv.OUTCOME_STALE, None, stale.status_code, error_type, records)
            return self._timed(stale)
        if decided is Ending.FALLBACK:
            return self._fallback(error, self._reported(semconv.OUTCOME_FALLBACK, None, None, error_type, records))
        outcome = semconv.OUTCOME_CIRCUIT_OPEN if isinstance(error, CircuitOpen) else semconv.OUTCOME_FAILURE
        self._end(outcome, None, None, error_type)
        try:
            raise error
        finally:
            # Its traceback holds this frame: kept as a local, the error made a cycle that
            # left each failed request (121 objects) to the cyclic GC.
            del error

    def _answer(self, response: Response, records: tuple[AttemptRecord, ...]) -> Response:
        """Return ``response``, the last answer: a success, an answer, or a final server error."""
        last = self.last_outcome
        assert last is not None
        outcome = semconv.OUTCOME_FAILURE if last.retryable else semconv.OUTCOME_SUCCESS
        answered_by = self._answered_by
        domain = answered_by.url
        self._finished = True
        if self._moved or answered_by is not self._origin:  # (a hedge's answer: its own copy moved)
            self.as_asked(response, answered_by)
        if self.trace is not None:
            self._end(outcome, domain, response.status_code, last.error_type)
        return _deliver(self._state, self.core, response, domain, records, outcome, self._blocking)

    def _error(self, stop: Stop, records: tuple[AttemptRecord, ...]) -> Failover:
        """The library's ``CircuitOpenError`` or ``AllDomainsFailed``."""
        pool = self.core.name
        url = redact_url(self.original_url)
        if not records:
            error: Failover = self.lib.CircuitOpenError(
                f"pool {pool!r}: every domain is open or disabled; {self.method} {url} was not sent",
                pool=pool,
                reason=stop.reason,
                request=self.request,
            )
        else:
            tried = "; ".join(f"{r.domain}: {r.error_type}" for r in records)
            error = self.lib.AllDomainsFailed(
                f"pool {pool!r}: {self.method} {url} failed after {len(records)} "
                f"attempt(s) ({stop.reason}): {tried}",
                pool=pool,
                attempts=records,
                reason=stop.reason,
                request=self.request,
            )
        # The error is the new one's cause now, and no longer the exchange's: its traceback
        # holds the frames that hold this exchange, a cycle that left each failed request
        # (121 objects) to the cyclic GC, in an outage for every request.
        error.__cause__, self.error = self.error, None
        return error

    def _stale_response(self) -> Response | None:
        stale: Response | None = self._state.stale.lookup(
            self.core.name,
            self._original,
            self.clock(),
            max_age=self.core.policy.stale_max_age,
            response=self.lib.Response,
        )
        return stale

    def _fallback(self, error: Failover, info: FailoverResult) -> Response | Awaitable[Response]:
        fallback = self._state.fallback
        assert fallback is not None
        result = fallback(self.request, error)
        if isinstance(result, self.lib.Response):
            result.extensions["failover"] = info
            return self._timed(result)
        if not inspect.isawaitable(result):
            raise self._not_a_response(result)

        async def mark(pending: Awaitable[Response]) -> Response:
            response = await pending
            if not isinstance(response, self.lib.Response):
                raise self._not_a_response(response)
            response.extensions["failover"] = info
            return self._timed(response)

        return mark(result)

    def _not_a_response(self, result: object) -> TypeError:
        """The error for a fallback's answer of another kind (another library's response)."""
        kind, lib = type(result), self.lib.name
        return TypeError(
            f"the fallback returned a {kind.__module__}.{kind.__qualname__}, not a {lib}.Response "
            f"(the front-end speaks {lib}: build the fallback's response with {lib})"
        )

    def _timed(self, response: Response) -> Response:
        """``response`` (a stale copy, a fallback's), with its ``elapsed`` (the whole
        request) when its body is in already (see :meth:`reads`)."""
        if response.is_closed:
            response.elapsed = datetime.timedelta(seconds=self.clock() - self.started_at)
        return response

    def _reported(
        self,
        outcome: str,
        domain: str | None,
        status: int | None,
        error_type: str | None,
        records: tuple[AttemptRecord, ...],
    ) -> FailoverResult:
        """End the request's telemetry with ``outcome``; the result the response carries."""
        self._end(outcome, domain, status, error_type)
        stale, fallback = outcome == semconv.OUTCOME_STALE, outcome == semconv.OUTCOME_FALLBACK
        return new_tuple(FailoverResult, (self.core.name, domain, records, outcome, stale, fallback))

    def _end(self, outcome: str, domain: str | None, status: int | None, error_type: str | None) -> None:
        self._finished = True
        if self.trace is not None:
            self._finished_trace(self.trace, outcome, domain, status, error_type, len(self.records))

    # -- leaving early (cancellation, a bug below us) ----------------------------------

    def give_up(self) -> None:
        """The loop was left by an exception: release a probe (:meth:`abandon`), end the
        spans. After ``finish()`` (which may itself raise the request's error) there is
        nothing to do."""
        # The last attempt's error is no longer the request's: the frames its traceback
        # holds hold this exchange (a cycle, when the request raises another error).
        self.error = None
        if self._finished:
            return
        decided = self._decided  # an attempt answer() decided is released as one in flight
        in_flight = (*self.in_flight, decided) if isinstance(decided, Attempt) else self.in_flight
        events = self.abandon(self.clock())
        shared = self._state.shared
        if shared is not None:
            for i, attempt in enumerate(in_flight):  # the events go out once, with the first
                if attempt.probe or (events and i == 0):
                    shared.recorded(
                        self.core, attempt.domain, attempt.probe, events if i == 0 else (), abandoned=True
                    )
        if self.trace is not None:
            for attempt in in_flight:
                self.trace.attempt_abandoned(attempt.span)
            self.trace.events(events)
        self._end(semconv.OUTCOME_FAILURE, None, None, semconv.ERROR_CANCELLED)


def _heading(flying: list[Attempt], response: Response) -> Attempt | None:
    """The attempt in flight whose answer's head ``response`` is: the one the loop gave it
    to (``Attempt.response``; each attempt of a hedged request comes in a thread or a task
    of its own); None if none holds it (gone from the list: another thread's race cut it
    meanwhile)."""
    for attempt in flying:
        if attempt.response is response:
            return attempt
    return None


def _deliver(
    state: State,
    core: PoolCore,
    response: Response,
    domain: str,
    records: tuple[AttemptRecord, ...],
    outcome: str,
    wait: bool,
) -> Response:
    """``response``, an answer the request returns, with its result (neither stale nor a
    fallback's); the pool's serving domain written to its sticky file, if it has one
    (``wait``: the front-end may wait for the disk)."""
    response.extensions["failover"] = new_tuple(FailoverResult, (core.name, domain, records, outcome, False, False))
    if state.sticky:
        state.persist_sticky(core, wait=wait)
    return response


class AsyncExchange(Exchange):
    """The exchange of an event loop's front-end, which never waits for the disk (a
    class of its own, so that no request passes the flag)."""

    _blocking = False
    _told = _AsyncTold

    def _client_late(self, span: float) -> float:
        return lateness(span)  # its event loop's (``RequestPlan._client_late``)
