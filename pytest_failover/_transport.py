"""The sync and async failover loops: thin loops over the decision core.

Each wraps an inner transport and adds nothing to its surface. Everything the two
share lives in :class:`~pytest_failover._exchange.Exchange` and its base
:class:`~pytest_failover._exchange.Lane` (no I/O) and in the core (the decisions); the
two loops here differ only where I/O happens: sending, reading, sleeping, closing, and
bounding an attempt's time. A request starts in the fast lane when it can (its first
attempt sent with no plan) and moves into the failover loop when it needs one.

The loops name no HTTP library: they are generic over the request, response and inner
transport types, and the public transports are thin declarations over them, one pair
per library, each with its :class:`~pytest_failover._lib.HTTPLib`:
``pytest_failover.FailoverTransport`` (httpx, in ``_httpx.py``) and
``pytest_failover.httpx2.FailoverTransport`` (httpx2). The constructor is written once,
here.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar, cast

from ._classify import LIBRARIES
from ._core import ORIGIN
from ._deadline import GRACE, arm, async_limit, disarm
from ._exchange import (
    WHOLE,
    AsyncExchange,
    Exchange,
    FailoverResult,
    Fallback,
    Lane,
    TracedLane,
    enter,
    leave,
)
from ._fork import renew_in_child
from ._policy import Policy
from ._pool import Pool
from ._race import ThreadRace, async_race
from ._snapshot import TransportState
from ._sockets import watch
from ._state import AsyncTransportOptions, State, TransportOptions, spelt_out
from ._values import DEFAULT_OPTIONS, Attempt, RequestOptions, Stop, Wait

if TYPE_CHECKING:
    from typing import Self

    from typing_extensions import Unpack

    from ._core import Route
    from ._lib import HTTPLib
    from .control import ControlDocument

__all__ = ["AsyncLoop", "FailoverResult", "Fallback", "SyncLoop"]

# A request's route and options, worked out by a front-end that routes its native request.
Routed: TypeAlias = "tuple[Route, RequestOptions]"


class _SyncInner(Protocol):
    """What the sync loop calls of its inner transport (an ``httpx.BaseTransport``, an
    ``httpx2.BaseTransport``)."""

    def handle_request(self, request: Any) -> Any: ...

    def close(self) -> None: ...


class _AsyncInner(Protocol):
    """What the async loop calls of its inner transport."""

    async def handle_async_request(self, request: Any) -> Any: ...

    async def aclose(self) -> None: ...


Req = TypeVar("Req")  # the library's Request
Resp = TypeVar("Resp")  # and Response
Inner = TypeVar("Inner", bound=_SyncInner)  # its BaseTransport
AsyncInner = TypeVar("AsyncInner", bound=_AsyncInner)  # its AsyncBaseTransport


class _FailoverBase:
    """Construction and state shared by both transports: a :class:`~pytest_failover._state.State`
    of their own, or another front-end's (``sharing``)."""

    _state: State
    _lib: ClassVar[HTTPLib]  # the library the front-end speaks (set by each declaration)
    _library: HTTPLib  # the same, the instance's own (see _begin)
    _asynchronous = False  # an event loop's front-end: never blocks on the disk
    _exchange: ClassVar[type[Exchange]] = Exchange  # (AsyncExchange for an event loop's)
    # Do the requests of a pool that is plain but for hedging (``PoolCore.lane_hedges``)
    # take the lane, a hedgeable one with its first hedge armed? The async loop's do (a
    # hedge that wins interrupts the attempt's task: ``AsyncLoop._raced``); the sync loop's
    # when its race can cut a loser's socket (``SyncLoop._raced``).
    _lane_hedges = False
    # When close() or aclose() ran (the state's clock); read only when an attempt failed.
    _closed_at = -math.inf

    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        **options: Unpack[AsyncTransportOptions],
    ) -> None:
        shared = options.get("shared")
        if shared is not None:
            kind = getattr(shared, "asynchronous", None)  # RedisHealth False, AsyncRedisHealth True
            if self._asynchronous and kind is None:
                raise TypeError(
                    f"{type(self).__name__}(shared=...) takes RedisHealth or AsyncRedisHealth, got {type(shared).__name__}"
                )
            if not self._asynchronous and kind is not False:
                raise TypeError(
                    f"{type(self).__name__}(shared=...) takes RedisHealth, got {type(shared).__name__}"
                    + (" (its tasks need an event loop; RedisHealth serves every front-end)" if kind else "")
                )
        self._library = self._lib  # (see _begin)
        self._state = State(pools, policy, **options)
        self._state.join(self)  # (its shared health is closed when the last front-end is)

    def state(self) -> TransportState:
        """A snapshot of every pool: breakers, enabled domains, serving domain, budget;
        and shared health, if configured."""
        return self._state.snapshot()

    def _closed_under(self, attempt: Attempt, exc: BaseException) -> None:
        """Raise ``RuntimeError`` from ``exc`` if this front-end was closed (by another
        thread or task) while ``attempt``, which failed with ``exc``, was in flight: its
        connection was closed under it, the caller's doing, which says nothing about
        the domain. As the ``TransportError`` it is, the loop would blame the domain and
        try the next one (a transport shared by threads, each with a client that closes
        it on leaving its ``with``, opened healthy domains' breakers, every front-end's
        sharing them); as an error of the caller's own it ends the request, nothing
        blamed. ``RuntimeError`` is the library's own for a client used once closed
        (the aiohttp middleware's twin: ``_session_closed``). An attempt sent after the
        close is not: the inner pool opens connections again, as without failover."""
        if attempt.sent_at < self._closed_at:
            raise RuntimeError(f"{type(self).__name__} was closed while this request was in flight") from exc

    def apply_control(self, doc: ControlDocument) -> None:
        """Apply a verified control document; raises ``ControlError`` and changes
        nothing if it names unknown pools or domains, disables every domain of a
        pool, or does not increase the version."""
        self._state.apply_control(doc)

    # -- one state, several front-ends (``sharing``) --------------------------------------

    def _share(self, source: _FailoverBase) -> None:
        """Serve from ``source``'s state instead of new state: the same core (breakers,
        budget, serving domain, control), telemetry, stale cache, sticky files, fallback,
        clock and shared health, which stays open until the last of its front-ends closes."""
        state = source._state
        shared = state.shared
        if shared is not None and shared.asynchronous:
            raise TypeError(
                f"{type(self).__name__}.sharing: this state's shared health is AsyncRedisHealth, whose "
                "tasks live in one event loop, so no other front-end may share it; build the state "
                "with shared=RedisHealth(url) instead (every front-end takes it, async ones too): its "
                "threads serve sharers of every kind, in any thread and event loop"
            )
        fallback = state.fallback
        if not self._asynchronous and fallback is not None and _is_async(fallback):
            raise TypeError(
                f"{type(self).__name__}.sharing: the shared fallback is async and this front-end is "
                "sync; give the first front-end a sync fallback (async front-ends take one too)"
            )
        self._library = self._lib  # (see _begin)
        self._state = state
        state.join(self)

    def _begin(self, request: Any, routed: Routed | None = None) -> Lane | None:
        """The lane or the exchange of ``request`` (an exchange is a lane: ``lane.attempt``
        is None in it), or None when it passes through. ``routed``: its route and options,
        when the front-end worked them out already (the requests and aiohttp front-ends
        route their native request first, to pass it through as it is)."""
        state = self._state
        if routed is None:
            if "failover" in request.extensions:
                options = RequestOptions.from_extensions(request.extensions)
                route = state.core.route(request.url, options)
            else:  # no options, as most requests have: their URL's route, if made (no call)
                options = DEFAULT_OPTIONS
                route = state.core.routes.get(ORIGIN(request.url._uri_reference)) or state.core.route(request.url, options)
            if route is None:
                return None
        else:
            route, options = routed
        pool_core, pinned, origin = route
        # The class's ``_lib``, which each front-end keeps as its own too: on CPython 3.11 a
        # look-up through an instance is never specialised for a name the class binds to an
        # object of a mutable class (an HTTPLib), the instance's own or not
        lib = self._library
        if (
            (pool_core.plain or (self._lane_hedges and pool_core.lane_hedges))
            and options is DEFAULT_OPTIONS
            and isinstance(request.stream, lib.ByteStream)
        ):
            # (a TracedLane while telemetry records: it does what the exchange would)
            lane = (Lane if state.telemetry.silent() else TracedLane)()
            clock = state.clock  # (a callable in a slot: called where it is read, see Lane.ends)
            lane.start(state, lib, request, pool_core, origin, clock())
            return lane if lane.attempt is not None or lane.racing is not None else self._exchange.adopting(lane)
        return self._exchange(state, lib, request, pool_core, pinned, origin, options)

    def _handed(self, lane: Lane, attempt: Attempt, response: Any, error: BaseException | None) -> Exchange:
        """The exchange that takes ``lane``'s request over once its first attempt ended
        with ``response`` or ``error`` (the library's ``TransportError``), reported to it:
        the loop goes on from its next step (``Exchange.adopting``)."""
        exchange = self._exchange.adopting(lane)
        exchange.arrived(attempt, response, error)
        return exchange


class SyncLoop(_FailoverBase, Generic[Req, Resp, Inner]):
    """A ``BaseTransport`` that fails over between the domains of its pools.

    ``FailoverTransport(pools, policy=None, transport=None)`` wraps
    ``HTTPTransport()`` (its library's) by default. Requests to hosts outside every pool
    pass straight through. The core's inputs can be injected, for tests:
    ``clock`` (monotonic seconds: breakers, backoff, deadlines), ``wall_clock``
    (Unix time, read only for pools with ``time_orders``) and ``random`` (a
    float in [0, 1): jitter and weight draws).
    """

    _transport: Inner

    @spelt_out(TransportOptions)
    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        transport: Inner | None = None,
        **options: Unpack[TransportOptions],
    ) -> None:
        super().__init__(pools, policy, **options)
        self._inner(transport)

    @classmethod
    def sharing(cls, other: FrontEnd, transport: Inner | None = None) -> Self:
        """A transport over ``other``'s state (any failover front-end: a transport of
        either library, a requests adapter, an aiohttp middleware): one set of breakers,
        budget, serving domain, control document, stale cache and telemetry for both. It
        sends through its own ``transport`` (``HTTPTransport()`` by default)."""
        self = cls.__new__(cls)
        self._share(_state_of(other, f"{cls.__name__}.sharing"))
        self._inner(transport)
        return self

    def _inner(self, transport: Inner | None) -> None:
        self._transport = _sync_inner(self._state, self._lib, transport)
        self._hedgers = self._thread_race()  # each sync front-end its own
        if transport is None:  # a pool of connections of its own making: see _forked
            renew_in_child(self, SyncLoop._forked)

    def _forked(self) -> None:
        """In a fork's child (``_fork``): an inner transport of its own, as this one built
        the parent's. The parent's pool of kept-alive connections would carry both
        processes' requests, and their answers would mix; it is left alone (closing a
        connection may say so to its server: an HTTP/2 GOAWAY, under the parent too), and the
        child's copies of its sockets close when it is collected."""
        self._transport = _sync_inner(self._state, self._lib, None)
        self._hedgers = self._thread_race()

    def _thread_race(self) -> ThreadRace | None:
        """The hedging threads of this front-end (``Hedging.threads``: the largest of
        its pools' policies), or None when no pool hedges. Its requests to a pool that is
        plain but for hedging take the lane when the race can cut a loser's socket."""
        pools = self._state.core.pools.values()
        threads = [pc.policy.hedging.threads for pc in pools if pc.policy.hedging is not None]
        if not threads:
            return None
        race = ThreadRace(max(threads), self._transport, self._exchange.adopting)
        self._lane_hedges = race.cuts
        return race

    def handle_request(self, request: Req, routed: Routed | None = None) -> Resp:
        """``routed``: the request's route and options, when a front-end over this
        transport (the requests adapter) worked them out already (see ``_begin``)."""
        lane = self._begin(request, routed)
        if lane is None:
            return cast("Resp", self._transport.handle_request(request))
        attempt = lane.attempt
        if attempt is None:  # an exchange from the start, or a lane racing its hedges
            if (racing := lane.racing) is not None:
                return self._raced(lane, racing)
            return self._run(lane)  # type: ignore[arg-type]  # an Exchange (no cast() call)
        # The fast lane (``Lane``): the first attempt, sent before the request has a plan.
        try:
            response: Any = self._send(lane, attempt)
        except self._lib.TransportError as exc:
            return self._run(self._handed(lane, attempt, None, exc))
        except BaseException:
            self._exchange.adopting(lane).give_up()
            raise
        if lane.ends(attempt, response, True):
            return response  # type: ignore[no-any-return]  # the library's Response: Resp (no cast() call)
        return self._run(self._handed(lane, attempt, response, None), response)

    def _raced(self, lane: Lane, attempt: Attempt) -> Resp:
        """A hedgeable request in the lane: its first attempt (``Lane.racing``), sent from
        this thread with its first hedge armed (``ThreadRace.sent``). When the hedge falls
        due meanwhile the race has built the request's exchange, which goes on from its
        answer; else the attempt ended alone, as a lane's does in :meth:`handle_request`."""
        hedgers = self._hedgers
        assert hedgers is not None  # (a lane races only in a loop that hedges: _lane_hedges)
        hedges, response, error = hedgers.sent(self._send, lane, attempt, lane.core.hedge_delay(attempt.domain))
        try:
            if hedges is not None:  # the race decides; its exchange goes on
                exchange = hedges.exchange
                try:
                    response = hedges.finish(attempt, response, error)
                except BaseException:
                    exchange.give_up()
                    raise
                return self._run(exchange, response)
            if response is not None and lane.ends(attempt, response, True):  # (error is None)
                return response  # type: ignore[return-value]  # the library's Response: Resp (no cast() call)
            return self._run(self._handed(lane, attempt, response, error), response)
        finally:
            del error  # its traceback holds ThreadRace.sent's frame, which holds this one

    def _run(self, exchange: Exchange, response: Any = None) -> Resp:
        """The failover loop of one request: its answer, a stored copy, the fallback's, or
        raise. An exchange a lane handed over has recorded its first attempt (``response``:
        that attempt's answer, if any) and goes on from its next step."""
        try:
            step = exchange.next_step() if exchange.records else exchange.first()
            while not isinstance(step, Stop):
                if step.delay > 0.0:
                    time.sleep(step.delay)
                if not isinstance(step, Wait):
                    if response is not None:
                        response.close()  # a retryable answer we are moving past
                    # The attempt (and its hedges, if it may hedge), sent from this frame
                    # as the async loop's are.
                    hedgers = self._hedgers
                    if hedgers is not None and exchange.hedgeable and (delay := exchange.hedge_delay()) is not None:
                        response = hedgers.race(self._send, exchange, step, delay)
                    else:
                        exchange.prepare(step)
                        try:
                            response = self._send(exchange, step)
                        except self._lib.TransportError as exc:
                            response = None  # every attempt failed
                            exchange.on_error(step, exc)
                        else:
                            exchange.on_response(step, response)
                    if exchange.done:  # answered: nothing left to decide
                        break
                step = exchange.next_step()
            result: Resp = exchange.finish()
            if result is not response:  # a stored copy, or the fallback's answer
                if response is not None:
                    response.close()  # a final server error it answers instead
                if not isinstance(result, self._lib.Response):
                    raise TypeError(f"{type(self).__name__}: the fallback returned an awaitable; use a sync fallback")
            return result
        except BaseException:
            exchange.give_up()
            if response is not None:  # a retryable answer held while waiting to retry: its body unread
                response.close()
            raise

    def _send(self, exchange: Lane, attempt: Attempt) -> Any:
        """Send one attempt and read what the exchange needs of its body, all within
        the attempt's time (raises the attempt's ``TransportError``)."""
        token = enter(attempt) if attempt.quiet is not None else None
        # The watchdog bounds the whole attempt at its time: the headers too, with httpx's
        # own inner transport (its pool tells the request's socket), and the body the
        # transport reads (the response's). Connecting is bounded by httpx's own timeouts,
        # capped at the attempt's time: the watchdog finds no socket to cut there. Its
        # answer, once its head came, is ``attempt.response`` (what the handlers close);
        # ``cut``, set by the disarm whatever happens, says the watchdog shut its socket.
        ticket = arm(attempt.sent_at + attempt.timeout, attempt)
        try:
            try:
                response: Any = self._transport.handle_request(attempt.request)
                attempt.response = response
                limit = exchange.reads(response)
                if limit is WHOLE:  # its length declared: read at C level, no count
                    body = b"".join(response.stream)
                elif limit:
                    counted = self._read(exchange, response, limit)
            finally:
                cut = disarm(ticket)
            if cut:  # and yet an answer: the client took the cut for its end (http.client, for a head)
                raise self._lib.module.ReadError("the watchdog cut this attempt at its time")
            # A body read in memory is closed once disarmed: closing hands its connection
            # back to the pool, and a cut must never reach a connection that may serve
            # another request by then (``_Watchdog.disarm``).
            if limit is WHOLE:
                response.stream.close()
                response = exchange.read_whole(response, body)
            elif limit and counted is not None:
                response.stream.close()
                response = exchange.read_in(response, b"".join(counted))
        except self._lib.TransportError as exc:
            if attempt.response is not None:
                attempt.head_came = True
                attempt.response.close()
            if cut:
                raise exchange.timed_out(attempt, exc) from exc
            self._closed_under(attempt, exc)
            raise
        except OSError as exc:  # a raw one the inner transport let out (Exchange.stray)
            if attempt.response is not None:
                attempt.head_came = True
                attempt.response.close()
            raise exchange.stray(attempt, exc) from exc
        except BaseException:  # the caller's own stack's (a stream that refuses its body): the
            # answer is closed now. Dropped unclosed, one whose body was never read kept its
            # connection busy in httpcore's pool for good (the async loop's rule too)
            if attempt.response is not None:
                attempt.response.close()
            raise
        finally:
            if token is not None:
                leave(token)
        return response

    @staticmethod
    def _read(exchange: Lane, response: Any, limit: int) -> list[bytes] | None:
        """Read ``response``'s body of no declared length, counting up to ``limit`` bytes
        (``Exchange.reads``): its chunks, all of them (the caller closes the stream), or
        None past the count (``response`` then streams what was read, then the rest)."""
        stream = response.stream
        rest = iter(stream)
        chunks: list[bytes] = []
        size = 0
        for chunk in rest:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                exchange.continued(response, chunks, rest, stream)
                return None
        return chunks

    def close(self) -> None:
        self._closed_at = self._state.clock()
        if self._hedgers is not None:
            self._hedgers.close()
        self._transport.close()
        shared = self._state.shared
        if self._state.leave(self) and shared is not None:  # the last of its front-ends
            shared.close()


class AsyncLoop(_FailoverBase, Generic[Req, Resp, AsyncInner]):
    """The ``AsyncBaseTransport`` twin of :class:`SyncLoop` (wraps its library's
    ``AsyncHTTPTransport()`` by default; works under asyncio and trio)."""

    _asynchronous = True
    _exchange = AsyncExchange
    _lane_hedges = True  # a hedge that wins cancels the attempt's task: any inner transport
    _transport: AsyncInner
    # The inner transport's own error for an attempt out of time, when it can tell the
    # phase (``failover_timeout_error(request)``: the aiohttp middleware's, which knows
    # whether aiohttp sent the request). Then no library timeout goes first to name the
    # phase, and the attempt's guard fires at its time itself, not ``GRACE`` later.
    _phase: Callable[[Any], BaseException] | None = None
    _grace = GRACE

    @spelt_out(AsyncTransportOptions)
    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        transport: AsyncInner | None = None,
        **options: Unpack[AsyncTransportOptions],
    ) -> None:
        super().__init__(pools, policy, **options)
        self._inner(transport)

    @classmethod
    def sharing(cls, other: FrontEnd, transport: AsyncInner | None = None) -> Self:
        """The async twin of ``FailoverTransport.sharing`` (``AsyncHTTPTransport()``
        by default); the state may be used from any thread and event loop at once."""
        self = cls.__new__(cls)
        self._share(_state_of(other, f"{cls.__name__}.sharing"))
        self._inner(transport)
        return self

    def _inner(self, transport: AsyncInner | None) -> None:
        self._transport = inner = _async_inner(self._state, self._lib, transport)
        self._phase = getattr(inner, "failover_timeout_error", None)
        # (the front-end's own, read at every attempt: see new_attempt)
        self._grace = GRACE if self._phase is None else 0.0
        if transport is None:  # a pool of connections of its own making: see _forked
            renew_in_child(self, AsyncLoop._forked)

    def _forked(self) -> None:
        """:meth:`SyncLoop._forked`: the parent's connections belong to its event loop too."""
        self._transport = _async_inner(self._state, self._lib, None)

    def handle_async_request(self, request: Req, routed: Routed | None = None) -> Coroutine[Any, Any, Resp]:
        """``routed``: as :meth:`SyncLoop.handle_request`'s (the aiohttp middleware's)."""
        # Not a coroutine of its own but the one to await (the lane's, the loop's, or the
        # inner transport's): what the caller awaits is the same, with one frame fewer to
        # run again at each resume of the await chain.
        lane = self._begin(request, routed)
        if lane is None:
            return cast("Coroutine[Any, Any, Resp]", self._transport.handle_async_request(request))
        if self._state.shared is not None and not self._state.shared.started:
            self._state.shared.start()  # AsyncRedisHealth: its tasks live in this event loop (the caller's)
        if lane.attempt is None:  # an exchange from the start, or a lane racing its hedges
            if (racing := lane.racing) is not None:
                return self._raced(lane, racing)
            return self._run(lane)  # type: ignore[arg-type]  # an Exchange (no cast() call)
        return self._alone(lane)

    async def _alone(self, lane: Lane) -> Resp:
        """A request in the fast lane (``Lane``): its first attempt, sent before the request
        has a plan (:meth:`SyncLoop.handle_request`, with awaits)."""
        attempt = lane.attempt
        assert attempt is not None
        try:
            response: Any = await self._send(lane, attempt)
        except self._lib.TransportError as exc:
            return await self._run(self._handed(lane, attempt, None, exc))
        except BaseException:
            self._exchange.adopting(lane).give_up()
            raise
        if lane.ends(attempt, response, False):
            return response  # type: ignore[no-any-return]  # the library's Response: Resp (no cast() call)
        return await self._run(self._handed(lane, attempt, response, None), response)

    async def _raced(self, lane: Lane, attempt: Attempt) -> Resp:
        """A hedgeable request in the lane: its first attempt (``Lane.racing``), sent from
        this task with its first hedge armed (``async_race``: one loop timer). When the
        hedge falls due meanwhile the race has built the request's exchange, which goes on
        from its answer; else the attempt ended alone, as a lane's does in :meth:`_alone`."""
        exchange, response, error = await async_race(
            self._send, lane, attempt, lane.core.hedge_delay(attempt.domain), self._exchange.adopting
        )
        try:
            if exchange is not None:  # the race decided; its exchange goes on
                return await self._run(exchange, response)
            if response is not None and lane.ends(attempt, response, False):  # (error is None)
                return response  # type: ignore[return-value]  # the library's Response: Resp (no cast() call)
            return await self._run(self._handed(lane, attempt, response, error), response)
        finally:
            # Its traceback holds async_race's frame, which holds this one on Python 3.12 and
            # 3.13 (a coroutine's frame, done, keeps its caller's: CPython issue 100964).
            del error

    async def _run(self, exchange: Exchange, response: Any = None) -> Resp:
        """The failover loop of one request (:meth:`SyncLoop._run`, with awaits)."""
        try:
            step = exchange.next_step() if exchange.records else exchange.first()
            while not isinstance(step, Stop):
                if step.delay > 0.0:
                    import anyio  # httpx's own dependency; imported only when a wait is due

                    await anyio.sleep(step.delay)
                if not isinstance(step, Wait):
                    if response is not None:
                        await response.aclose()  # a retryable answer we are moving past
                    # The attempt (and its hedges, if it may hedge), sent from this frame:
                    # a coroutine of its own would be one more frame to run again at each
                    # resume of the await chain.
                    if exchange.hedgeable and (delay := exchange.hedge_delay()) is not None:
                        raced, response, error = await async_race(self._send, exchange, exchange.prepare(step), delay)
                        if raced is None:  # no hedge fell due: an unhedged attempt after all
                            response = exchange.arrived(step, response, error)
                    else:
                        exchange.prepare(step)
                        try:
                            response = await self._send(exchange, step)
                        except self._lib.TransportError as exc:
                            response = None  # every attempt failed
                            exchange.on_error(step, exc)
                        else:
                            exchange.on_response(step, response)
                    if exchange.done:  # answered: nothing left to decide
                        break
                step = exchange.next_step()
            result: Resp = exchange.finish()
            if result is not response:  # a stored copy, or the fallback's answer
                if response is not None:
                    await response.aclose()  # a final server error it answers instead
                if not isinstance(result, self._lib.Response):  # an async fallback
                    result = await cast("Awaitable[Resp]", result)
            return result
        except BaseException:
            exchange.give_up()
            if response is not None:  # a retryable answer held while waiting to retry: its body unread
                import anyio  # httpx's own dependency

                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise

    async def _send(self, exchange: Lane, attempt: Attempt) -> Any:
        """Send one attempt and read what the exchange needs of its body, all within
        the attempt's time (raises the attempt's ``TransportError``)."""
        token = enter(attempt) if attempt.quiet is not None else None
        response: Any = None
        try:
            with async_limit(attempt.timeout + self._grace):
                response = attempt.response = await self._transport.handle_async_request(attempt.request)
                limit = exchange.reads(response)
                if limit is WHOLE:  # its length declared: no count
                    chunks: list[bytes] = []
                    async for chunk in response.stream:
                        chunks.append(chunk)
                elif limit:
                    counted = await self._read(exchange, response, limit)
            # A body read in memory is closed out of the attempt's limit: its cut, the task's
            # cancel(), would stop the inner transport's close half-way (httpcore's shields
            # hold against anyio's cancellations only) and leave the pool's request and
            # connection busy for good (a loaded loop, where the limit fires late, cut one
            # in a few hundred requests); and the attempt would fail with its body in hand.
            if limit is WHOLE:
                await response.stream.aclose()
                response = exchange.read_whole(response, b"".join(chunks))
            elif limit and counted is not None:
                await response.stream.aclose()
                response = exchange.read_in(response, b"".join(counted))
        except (self._lib.TransportError, TimeoutError) as exc:
            if response is not None:
                attempt.head_came = True
                await response.aclose()
            if not isinstance(exc, TimeoutError):
                self._closed_under(attempt, exc)
                raise
            phase = self._phase
            raise (exchange.timed_out(attempt, exc) if phase is None else phase(attempt.request)) from exc
        except OSError as exc:  # a raw one the inner transport let out (Exchange.stray)
            if response is not None:
                attempt.head_came = True
                await response.aclose()
            raise exchange.stray(attempt, exc) from exc
        except BaseException:  # cancelled (a hedge won): give the connection back closed
            if response is not None:
                import anyio  # httpx's own dependency

                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise
        finally:
            if token is not None:
                leave(token)
        return response

    @staticmethod
    async def _read(exchange: Lane, response: Any, limit: int) -> list[bytes] | None:
        """Read ``response``'s body of no declared length, counting up to ``limit`` bytes
        (``Exchange.reads``): its chunks, all of them (the caller closes the stream), or
        None past the count (``response`` then streams what was read, then the rest)."""
        stream = response.stream
        rest = stream.__aiter__()
        chunks: list[bytes] = []
        size = 0
        async for chunk in rest:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                exchange.continued(response, chunks, rest, stream)
                return None
        return chunks

    async def aclose(self) -> None:
        self._closed_at = self._state.clock()
        state = self._state
        if state.sticky:  # its pending writes are on disk once it is closed
            import anyio  # httpx's own dependency

            for sticky in set(state.sticky.values()):
                await anyio.to_thread.run_sync(sticky.flush)
        await self._transport.aclose()
        if state.leave(self) and state.shared is not None:  # the last of its front-ends
            await state.shared.aclose()


# -- one state, several front-ends (``sharing``) ------------------------------------------


class _FrontEnd:
    """A front-end over a failover transport (the requests adapter, the aiohttp
    middleware): its state, ``state()`` and ``apply_control()`` are its transport's."""

    _transport: _FailoverBase

    def state(self) -> TransportState:
        """A snapshot of every pool: breakers, enabled domains, serving domain, budget;
        and shared health, if configured."""
        return self._transport.state()

    def apply_control(self, doc: ControlDocument) -> None:
        """Apply a verified control document (``FailoverTransport.apply_control``)."""
        self._transport.apply_control(doc)


# What ``sharing`` takes: any failover front-end, whose state the new one serves from.
FrontEnd: TypeAlias = "_FailoverBase | _FrontEnd"


def _state_of(other: object, caller: str) -> _FailoverBase:
    """The transport holding ``other``'s state; a TypeError naming ``caller`` for anything else."""
    if isinstance(other, _FailoverBase):
        return other
    if isinstance(other, _FrontEnd):
        return other._transport
    kind = type(other)
    hint = (
        "; pass the failover transport the client was built with"
        if kind.__name__ in ("Client", "AsyncClient") and kind.__module__.partition(".")[0] in LIBRARIES
        else ""
    )
    raise TypeError(
        f"{caller}: takes the failover front-end whose state to share (a FailoverTransport, "
        f"AsyncFailoverTransport, FailoverAdapter or FailoverMiddleware), got {type(other).__name__}{hint}"
    )


def _sync_inner(state: State, lib: HTTPLib, transport: Inner | None) -> Inner:
    """The inner transport: the caller's, or ``lib``'s ``HTTPTransport()``, whose
    connections to the domains of pools with a resolver go through it (``docs/resolve.md``)."""
    if transport is not None:
        _no_resolver(state, transport)
        inner = transport
    elif state.dialer is None:
        inner = cast("Inner", lib.HTTPTransport())
    else:
        from ._dial import resolving_backend
        from ._sockets import resolving_transport

        inner = cast("Inner", resolving_transport(lib, resolving_backend(lib, state.dialer)))
    watch(inner)  # the watchdog may look for its requests' sockets (a cut before the headers)
    return inner


def _async_inner(state: State, lib: HTTPLib, transport: AsyncInner | None) -> AsyncInner:
    """The async twin of :func:`_sync_inner`."""
    if transport is not None:
        _no_resolver(state, transport)
        return transport
    if state.dialer is None:
        return cast("AsyncInner", lib.AsyncHTTPTransport())
    from ._dial import async_resolving_backend
    from ._sockets import async_resolving_transport

    return cast("AsyncInner", async_resolving_transport(lib, async_resolving_backend(lib, state.dialer)))


def _no_resolver(state: State, transport: object) -> None:
    """A resolver works through the inner transport this library builds (or a front-end's
    own, marked ``wires_resolver``: the requests adapter's and the aiohttp middleware's,
    which wire it into their client); with the caller's own, it would silently not be
    used: say so instead."""
    if state.dialer is not None and not getattr(transport, "wires_resolver", False):
        hosts = ", ".join(sorted(state.dialer.resolvers))
        raise ValueError(
            f"Policy.resolver (for {hosts}) works through the inner transport the failover "
            "transport builds; leave transport= unset, or resolve in your own transport"
        )


def _is_async(fallback: Fallback) -> bool:
    """Is ``fallback`` a coroutine function (or an object whose ``__call__`` is one)?"""
    call = type(fallback).__call__  # a function's is never async; an object's may be
    return inspect.iscoroutinefunction(fallback) or inspect.iscoroutinefunction(call)
