"""The sync and async failover transports: thin loops over the decision core.

Both classes wrap an inner httpx transport and add nothing to its surface.
Everything they share (routing, rewriting, classification, telemetry, the end
of a request) lives in :class:`_Exchange`; the two ``handle_request`` loops
differ only where I/O happens: sending, reading, sleeping and closing.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx

from ._classify import Outcome, OutcomeKind, classify_exception, classify_response
from ._core import _DONE, Attempt, AttemptRecord, FailoverCore, PoolCore, RequestOptions, Stop, _new
from ._exceptions import AllDomainsFailed, CircuitOpenError, FailoverError
from ._policy import Policy
from ._pool import Domain, Pool
from ._stale import StaleCache
from ._state import TransportState
from ._sticky import StickyFile
from ._telemetry import RequestTrace, Telemetry, redact_url

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .control import ControlDocument

__all__ = ["AsyncFailoverTransport", "FailoverResult", "FailoverTransport", "Fallback"]

logger = logging.getLogger("pytest_failover")

Fallback = Callable[
    [httpx.Request, FailoverError], httpx.Response | Awaitable[httpx.Response]
]


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
    OutcomeKind.SUCCESS: "success",
    OutcomeKind.ANSWER: "answer",
    OutcomeKind.THROTTLED: "failure",
    OutcomeKind.FAILURE: "failure",
}


class _TrackedStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """Wraps a body that cannot be replayed, to know whether any of it was read."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream) -> None:
        self.inner = inner
        self.started = False

    def __iter__(self) -> Iterator[bytes]:
        self.started = True
        if not isinstance(self.inner, httpx.SyncByteStream):
            raise RuntimeError("this request body can only be sent by an async transport")
        yield from self.inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.started = True
        if not isinstance(self.inner, httpx.AsyncByteStream):
            raise RuntimeError("this request body can only be sent by a sync transport")
        async for chunk in self.inner:
            yield chunk

    def close(self) -> None:
        if isinstance(self.inner, httpx.SyncByteStream):
            self.inner.close()

    async def aclose(self) -> None:
        if isinstance(self.inner, httpx.AsyncByteStream):
            await self.inner.aclose()


class _FailoverBase:
    """Construction and state shared by both transports."""

    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        *,
        region: str | None = None,
        fallback: Fallback | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = FailoverCore(pools if isinstance(pools, Sequence) else [pools], policy, region=region)
        self._fallback = fallback
        self._clock = clock
        self._telemetry = Telemetry(tracer_provider, meter_provider)
        self._telemetry.initial_breaker_states(
            (name, pc.pool.domains) for name, pc in self._core.pools.items()
        )
        self._stale = StaleCache()
        self._sticky: dict[str, StickyFile] = {}
        self._restore_sticky()

    def _restore_sticky(self) -> None:
        files: dict[str, StickyFile] = {}
        for name, pool_core in self._core.pools.items():
            path = pool_core.policy.sticky_path
            if path is None:
                continue
            sticky = files.setdefault(path, StickyFile(path))
            self._sticky[name] = sticky
        loaded = {path: f.load() for path, f in files.items()}
        now = self._clock()
        for name, sticky in self._sticky.items():
            url = loaded[sticky.path].get(name)
            if url is None:
                continue
            pool_core = self._core.pools[name]
            try:
                domain = Domain.parse(url)
            except ValueError:
                domain = None
            if domain is None or domain not in pool_core.order:
                logger.warning("sticky file %s: %r is not a domain of pool %r; ignored", sticky.path, url, name)
                continue
            pool_core.restore_serving(domain, now)

    def state(self) -> TransportState:
        """A snapshot of every pool: breakers, enabled domains, serving domain, budget."""
        return self._core.state(self._clock())

    def apply_control(self, doc: ControlDocument) -> None:
        """Apply a verified control document; raises ``ControlError`` and changes
        nothing if it names unknown pools or domains, disables every domain of a
        pool, or does not increase the version."""
        self._core.apply_control(doc)

    def _begin(self, request: httpx.Request) -> _Exchange | None:
        options = RequestOptions.from_extensions(request.extensions)
        route = self._core.route(request.url, options)
        if route is None:
            return None
        pool_core, pinned, origin = route
        return _Exchange(self, request, pool_core, pinned, origin, options)


class _Exchange:
    """One logical request through the failover loop: everything but the I/O."""

    __slots__ = (
        "_attempt",
        "_attempt_started",
        "_clock",
        "_finished",
        "_origin",
        "_owner",
        "_reads_body",
        "_traced",
        "_tracked",
        "error",
        "original_url",
        "plan",
        "policy",
        "pool_core",
        "request",
        "response",
        "started_at",
        "stop",
        "trace",
    )

    def __init__(
        self,
        owner: _FailoverBase,
        request: httpx.Request,
        pool_core: PoolCore,
        pinned: Domain | None,
        origin: Domain | None,
        options: RequestOptions,
    ) -> None:
        self._owner = owner
        self._origin = origin  # the pool domain the request's URL points at, if any
        self._clock = owner._clock
        self.request = request
        self.pool_core = pool_core
        self.policy = pool_core.policy
        self.original_url = request.url
        stream = request.stream
        replayable = isinstance(stream, httpx.ByteStream)
        self._tracked: _TrackedStream | None = None
        if not replayable:
            self._tracked = _TrackedStream(stream)
            request.stream = self._tracked
        self.started_at = self._clock()
        self.plan = owner._core.begin(
            pool_core, request.method, request.headers, options, replayable, pinned, self.started_at
        )
        self.trace: RequestTrace = owner._telemetry.start(pool_core.name, request.method, request.url)
        self._traced = self.trace.live  # without an SDK, skip even the calls
        policy = self.policy
        # Must a 2xx body be read before the outcome is known? For the app-error
        # check, the stale cache, and so that a re-sendable request whose connection
        # breaks mid-body fails over instead of handing the caller a broken stream.
        self._reads_body = (
            policy.is_app_error is not None
            or (policy.stale_on_failure and self.plan.method == "GET")
            or (policy.read_body and self.plan.may_resend)
        )
        self._attempt: Attempt | None = None
        self._attempt_started = 0.0
        self.response: httpx.Response | None = None
        self.error: httpx.TransportError | None = None
        self.stop: Stop | None = None
        self._finished = False

    # -- the loop's steps ------------------------------------------------------------

    def next_attempt(self) -> Attempt | None:
        plan = self.plan
        if plan.done:  # answered: no need to ask
            self.stop = _DONE
            return None
        decision = plan.next(self._clock())
        if decision.events and self._traced:
            self.trace.events(decision.events)
        if isinstance(decision, Stop):
            self.stop = decision
            return None
        if decision.number > 1:
            self._log_retry(decision)
        return decision

    def prepare(self, attempt: Attempt) -> httpx.Request:
        """Point the request at the attempt's domain, with the attempt's timeouts."""
        request = self.request
        domain = attempt.domain
        url = self.original_url if domain is self._origin else domain.rewrite(self.original_url)
        if url is not request.url:
            request.url = url
            request.headers["Host"] = domain.netloc
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        limit = attempt.timeout
        try:  # all four set, none above the limit
            within = len(timeouts) == 4 and max(timeouts.values()) <= limit
        except TypeError:  # one of them is None: no limit
            within = False
        if not within:
            request.extensions = {
                **request.extensions,
                "timeout": {
                    key: limit if timeouts.get(key) is None else min(timeouts[key], limit)
                    for key in ("connect", "read", "write", "pool")
                },
            }
        self._attempt = attempt
        if self._traced:
            self.trace.attempt_started(attempt, request)
        self._attempt_started = self._clock()
        return request

    def wants_body(self, response: httpx.Response) -> bool:
        """Must the body be read before the outcome is known?"""
        return self._reads_body and 200 <= response.status_code < 300

    def on_response(self, response: httpx.Response) -> None:
        outcome = classify_response(response, self.policy)
        self.response = response
        self.error = None
        self._record(outcome, response.status_code)
        policy = self.policy
        if (
            outcome.kind is OutcomeKind.SUCCESS
            and policy.stale_on_failure
            and self.plan.method == "GET"
            and len(response.content) <= policy.stale_max_bytes
        ):
            self._owner._stale.store(self.pool_core.name, self.original_url, response, self._clock())

    def on_error(self, exc: httpx.TransportError) -> None:
        started = self._tracked.started if self._tracked is not None else False
        outcome = classify_exception(exc, body_started=started)
        self.response = None
        self.error = exc
        self._record(outcome, None, exc)

    def _record(
        self, outcome: Outcome, status: int | None, exception: BaseException | None = None
    ) -> None:
        attempt = self._attempt
        assert attempt is not None
        self._attempt = None
        now = self._clock()
        duration = now - self._attempt_started
        events = self.plan.record(outcome, now, duration)
        if not self._traced:
            return
        self.trace.attempt_ended(
            attempt,
            duration=duration,
            result=_RESULTS[outcome.kind],
            status=status,
            error_type=outcome.error_type,
            exception=exception,
        )
        if events:
            self.trace.events(events)

    def _log_retry(self, attempt: Attempt) -> None:
        last = self.plan.records[-1]
        logger.warning(
            "pool %s: %s %s attempt %d on %s failed (%s); attempt %d on %s in %.3f s",
            self.pool_core.name,
            self.plan.method,
            redact_url(self.original_url),
            last.number,
            last.domain,
            last.error_type,
            attempt.number,
            attempt.domain.url,
            attempt.delay,
        )

    # -- the end ---------------------------------------------------------------------

    def finish(self) -> httpx.Response | Awaitable[httpx.Response]:
        """The response to return, a fallback's (possibly awaitable) response, or raise."""
        stop = self.stop
        assert stop is not None
        records = tuple(self.plan.records)
        response = self.response
        if response is not None:
            last = self.plan.last_outcome
            assert last is not None
            outcome = "failure" if last.retryable else "success"
            domain = records[-1].domain
            self._end(outcome, domain=domain, status=response.status_code, error_type=last.error_type)
            response.extensions["failover"] = _new(
                FailoverResult, (self.pool_core.name, domain, records, outcome, False, False)
            )
            if self._owner._sticky:
                self._persist_sticky()
            return response
        error = self._error(stop, records)
        error_type = "circuit_open" if not records else (records[-1].error_type or stop.reason)
        stale = self._stale_response()
        if stale is not None:
            self._end("stale", domain=None, status=stale.status_code, error_type=error_type)
            stale.extensions["failover"] = FailoverResult(
                pool=self.pool_core.name, domain=None, attempts=records, outcome="stale", stale=True
            )
            return stale
        fallback = self._owner._fallback
        if fallback is not None:
            self._end("fallback", domain=None, status=None, error_type=error_type)
            return self._fallback(fallback, error, records)
        outcome = "circuit_open" if isinstance(error, CircuitOpenError) else "failure"
        self._end(outcome, domain=None, status=None, error_type=error_type)
        raise error

    def _error(self, stop: Stop, records: tuple[AttemptRecord, ...]) -> FailoverError:
        pool = self.pool_core.name
        url = redact_url(self.original_url)
        if not records:
            error: FailoverError = CircuitOpenError(
                f"pool {pool!r}: every domain is open or disabled; {self.plan.method} {url} was not sent",
                pool=pool,
                reason=stop.reason,
                request=self.request,
            )
        else:
            tried = "; ".join(f"{r.domain}: {r.error_type}" for r in records)
            error = AllDomainsFailed(
                f"pool {pool!r}: {self.plan.method} {url} failed after {len(records)} "
                f"attempt(s) ({stop.reason}): {tried}",
                pool=pool,
                attempts=records,
                reason=stop.reason,
                request=self.request,
            )
        error.__cause__ = self.error
        return error

    def _stale_response(self) -> httpx.Response | None:
        if not (self.policy.stale_on_failure and self.plan.method == "GET"):
            return None
        return self._owner._stale.get(
            self.pool_core.name, self.original_url, self._clock(), max_age=self.policy.stale_max_age
        )

    def _fallback(
        self, fallback: Fallback, error: FailoverError, records: tuple[AttemptRecord, ...]
    ) -> httpx.Response | Awaitable[httpx.Response]:
        result = fallback(self.request, error)
        info = FailoverResult(
            pool=self.pool_core.name, domain=None, attempts=records, outcome="fallback", fallback=True
        )
        if inspect.isawaitable(result):

            async def mark() -> httpx.Response:
                response = await result
                response.extensions["failover"] = info
                return response

            return mark()
        result.extensions["failover"] = info
        return result

    def _end(self, outcome: str, *, domain: str | None, status: int | None, error_type: str | None) -> None:
        self._finished = True
        if not self._traced:
            return
        self.trace.finish(
            outcome=outcome,
            duration=self._clock() - self.started_at,
            attempts=len(self.plan.records),
            domain=domain,
            status=status,
            error_type=error_type,
        )

    def _persist_sticky(self) -> None:
        sticky = self._owner._sticky.get(self.pool_core.name)
        serving = self.pool_core.serving
        if sticky is not None and serving is not None:
            sticky.save({self.pool_core.name: serving.url})

    # -- leaving early (cancellation, a bug below us) ----------------------------------

    def abandon(self) -> None:
        """The loop was left by an exception: release a probe, end the spans. After
        ``finish()`` (which may itself raise the request's error) there is nothing to do."""
        if self._finished:
            return
        if self._attempt is not None:
            self.trace.attempt_abandoned()
            self._attempt = None
        self.trace.events(self.plan.abandon(self._clock()))
        self._end("failure", domain=None, status=None, error_type="cancelled")


class FailoverTransport(_FailoverBase, httpx.BaseTransport):
    """An ``httpx.BaseTransport`` that fails over between the domains of its pools.

    ``FailoverTransport(pools, policy=None, transport=None)`` wraps
    ``httpx.HTTPTransport()`` by default. Requests to hosts outside every pool
    pass straight through.
    """

    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        transport: httpx.BaseTransport | None = None,
        *,
        region: str | None = None,
        fallback: Fallback | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            pools,
            policy,
            region=region,
            fallback=fallback,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            clock=clock,
        )
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        exchange = self._begin(request)
        if exchange is None:
            return self._transport.handle_request(request)
        try:  # zero-cost until something raises
            response: httpx.Response | None = None
            while (attempt := exchange.next_attempt()) is not None:
                if response is not None:
                    response.close()  # a retryable answer we are moving past
                    response = None
                if attempt.delay > 0:
                    time.sleep(attempt.delay)
                outgoing = exchange.prepare(attempt)
                try:
                    response = self._transport.handle_request(outgoing)
                except httpx.TransportError as exc:
                    exchange.on_error(exc)
                    continue
                if exchange.wants_body(response):
                    try:
                        response.read()
                    except httpx.TransportError as exc:  # broke mid-body
                        response.close()
                        response = None
                        exchange.on_error(exc)
                        continue
                exchange.on_response(response)
            result = exchange.finish()
            if not isinstance(result, httpx.Response):
                raise TypeError("FailoverTransport: the fallback returned an awaitable; use a sync fallback")
            return result
        except BaseException:
            exchange.abandon()
            raise

    def close(self) -> None:
        self._transport.close()


class AsyncFailoverTransport(_FailoverBase, httpx.AsyncBaseTransport):
    """The ``httpx.AsyncBaseTransport`` twin of :class:`FailoverTransport`
    (wraps ``httpx.AsyncHTTPTransport()`` by default; works under asyncio and trio)."""

    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        region: str | None = None,
        fallback: Fallback | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            pools,
            policy,
            region=region,
            fallback=fallback,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            clock=clock,
        )
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = self._begin(request)
        if exchange is None:
            return await self._transport.handle_async_request(request)
        try:  # zero-cost until something raises
            response: httpx.Response | None = None
            while (attempt := exchange.next_attempt()) is not None:
                if response is not None:
                    await response.aclose()  # a retryable answer we are moving past
                    response = None
                if attempt.delay > 0:
                    import anyio  # httpx's own dependency; imported only when a wait is due

                    await anyio.sleep(attempt.delay)
                outgoing = exchange.prepare(attempt)
                try:
                    response = await self._transport.handle_async_request(outgoing)
                except httpx.TransportError as exc:
                    exchange.on_error(exc)
                    continue
                if exchange.wants_body(response):
                    try:
                        await response.aread()
                    except httpx.TransportError as exc:  # broke mid-body
                        await response.aclose()
                        response = None
                        exchange.on_error(exc)
                        continue
                exchange.on_response(response)
            result = exchange.finish()
            if not isinstance(result, httpx.Response):  # an async fallback
                result = await result
            return result
        except BaseException:
            exchange.abandon()
            raise

    async def aclose(self) -> None:
        await self._transport.aclose()
