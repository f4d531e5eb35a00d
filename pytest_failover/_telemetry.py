"""OpenTelemetry spans and metrics of the failover client (API only, no SDK).

One INTERNAL span per logical request (``failover {pool}``) with a CLIENT child
span per attempt (``{method}``), following the HTTP semantic conventions, and
the metrics listed in the README. Instruments are created once per transport;
attributes are passed at span start; attempt spans are skipped when the logical
span is not recorded (no SDK, or sampled out). Nothing here ever sees a query
string, credentials, ``Authorization`` or cookies: URLs are redacted first.

What no request changes is built once per pool, method and domain (:class:`_Labels`) and
copied per attempt. Measured with an SDK tracer and meter provider (in memory), one
happy-path GET over httpcore's in-memory network, against the hand-written dicts before
(issue 27): the package's own opcodes 2,025 both ways (calls 51 -> 50), all frames 25,181
-> 25,157 opcodes (1,216 -> 1,209 calls; one ``set_attributes`` at the end, not five);
time, both versions in one process, 30 alternating batches of 200: 396 against 402 µs
median, paired ratio 1.004, within the noise. The gain is one home per attribute set,
not speed.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sized
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from opentelemetry import context, metrics, propagate, trace

# The instrumentations' suppression keys, which the API defines under private names
# (opentelemetry-instrumentation imports them from there too; every API since 1.13 has
# them). The first means "emit nothing for this work"; the second "an HTTP client span
# is already being made", so instrumentation-httpx under an attempt stays quiet and
# each attempt is one CLIENT span and one duration data point: ours.
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as SUPPRESS_HTTP_KEY
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as SUPPRESS_KEY
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import __version__
from ._values import BreakerEvent, BudgetRejected, Event, HedgeThrottled, SlowCall, Switch
from .semconv import (
    BAD_OUTCOMES,
    CLIENT_SCOPE,
    DURATION_BUCKETS,
    ERROR_APP,
    ERROR_CANCELLED,
    ERROR_TYPE,
    EVENT_BREAKER_TRANSITION,
    EVENT_RETRY_BUDGET_REJECTED,
    EVENT_SWITCH,
    FAILOVER_ATTEMPT,
    FAILOVER_ATTEMPT_RESULT,
    FAILOVER_ATTEMPTS,
    FAILOVER_ATTEMPTS_ATTRIBUTE,
    FAILOVER_BREAKER_FROM,
    FAILOVER_BREAKER_STATE,
    FAILOVER_BREAKER_TO,
    FAILOVER_BREAKER_TRANSITIONS,
    FAILOVER_DOMAIN,
    FAILOVER_FROM,
    FAILOVER_HEDGE,
    FAILOVER_HEDGE_OUTCOME,
    FAILOVER_HEDGES,
    FAILOVER_OUTCOME,
    FAILOVER_POOL,
    FAILOVER_REASON,
    FAILOVER_REQUEST_DURATION,
    FAILOVER_REQUESTS,
    FAILOVER_RESOLVE_DURATION,
    FAILOVER_RESOLVE_FAILURES,
    FAILOVER_RETRY_BUDGET_REJECTIONS,
    FAILOVER_SLOW_CALLS,
    FAILOVER_STEERING,
    FAILOVER_SWITCHES,
    FAILOVER_TO,
    HEDGE_CANCELLED,
    HEDGE_THROTTLED,
    HTTP_CLIENT_REQUEST_DURATION,
    HTTP_METHOD_OTHER,
    HTTP_REQUEST_METHOD,
    HTTP_REQUEST_RESEND_COUNT,
    HTTP_RESPONSE_STATUS_CODE,
    KNOWN_HTTP_METHODS,
    REQUEST_SPAN_PREFIX,
    SCHEMA_URL,
    SERVER_ADDRESS,
    SERVER_PORT,
    UNIT_ATTEMPT,
    UNIT_CALL,
    UNIT_HEDGE,
    UNIT_NONE,
    UNIT_REQUEST,
    UNIT_RESOLUTION,
    UNIT_RETRY,
    UNIT_SECONDS,
    UNIT_SWITCH,
    UNIT_TRANSITION,
    URL_FULL,
)

# Where the API keeps the global providers: private, so tolerate their absence. Read
# on every request while no SDK is installed: 0.05 µs, where the public getters cost
# 2.8 µs (their os.environ look-ups; timeit), 0.4 % of a loopback request.
try:
    from opentelemetry import trace as _trace_globals
    from opentelemetry.metrics import _internal as _metrics_globals
except ImportError:  # pragma: no cover - then the public (slower) check is used
    _trace_globals = _metrics_globals = None  # type: ignore[assignment]  # modules, or None without them


_GLOBALS_READABLE = hasattr(_trace_globals, "_TRACER_PROVIDER") and hasattr(
    _metrics_globals, "_METER_PROVIDER"
)
_PROVIDER_ENV = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Meter, MeterProvider, ObservableGauge
    from opentelemetry.trace import Span, TracerProvider

    from ._core import FailoverCore
    from ._lib import URL, Request
    from ._pool import Domain
    from ._values import Attempt

__all__ = ["Readings", "RequestTrace", "Telemetry", "redact_url"]

_VERSION = __version__  # the scope version: the package's

_Owner = TypeVar("_Owner")
Series = dict[Hashable, Observation]
"""A gauge's reading at one collection, by series (what names it)."""
_EVERY_READINGS: list[Readings[Any]] = []  # each built once, at a module's import


def observes_any() -> bool:
    """Does an observed gauge read some object now? (A client dropped unclosed in a cycle
    is read until collected: the test capture collects garbage first, only then.)"""
    return any(readings._live for readings in _EVERY_READINGS)


def observed_ever() -> int:
    """How many objects the observed gauges were given to read so far (it only grows)."""
    return sum(readings.added for readings in _EVERY_READINGS)


class Readings(Generic[_Owner]):
    """The live objects an observable gauge reads, whatever meter provider each was built
    with: the breakers of every transport, the shared health of each.

    A gauge set at each change goes unreported once a collection passes without one, in every
    SDK before 1.45 (opentelemetry-python #4512) and under delta temporality in all: a
    dashboard's series and an alert's condition ended a scrape after the change. So these
    gauges are observed. The SDK keeps the callbacks of a gauge's first creator on a meter and
    hands later creators that instrument, dropping theirs: the callback :meth:`gauge` gives
    reads every live object on its own provider (None: the global one, read at the
    collection, as the API's proxy meters do). ``read(owner, series)`` writes an owner's
    observations into the reading; ``read`` merges what two owners say of one series."""

    def __init__(self, read: Callable[[_Owner, Series], None]) -> None:
        self._read = read
        self.added = 0  # owners given so far (two threads' adds may count one: it still grows)
        _EVERY_READINGS.append(self)
        # owner's id -> (a weak reference to it, its meter provider), oldest first: a dict read
        # whole by ``list()`` in C (as ``_state``'s registry is), so a collection in an
        # exporter's thread reads it while another thread builds a transport, with no lock
        self._live: dict[int, tuple[weakref.ref[_Owner], MeterProvider | None]] = {}

    def gauge(self, meter: Meter, provider: MeterProvider | None, name: str, unit: str, description: str) -> ObservableGauge:
        """The gauge ``name`` of ``meter`` (from ``provider``), reading these objects."""
        return meter.create_observable_gauge(
            name, callbacks=[partial(self._observe, provider)], unit=unit, description=description
        )

    def add(self, owner: _Owner, provider: MeterProvider | None) -> None:
        """Read ``owner`` from now on, for as long as it lives (once: add it once)."""
        ref = weakref.ref(owner, self._gone)
        self._live[id(ref)] = (ref, provider)
        self.added += 1

    def _gone(self, ref: weakref.ref[Any]) -> None:
        self._live.pop(id(ref), None)

    def _observe(self, provider: MeterProvider | None, options: CallbackOptions) -> list[Observation]:
        mine = provider if provider is not None else metrics.get_meter_provider()
        series: Series = {}
        for ref, theirs in list(self._live.values()):
            owner = ref()
            if owner is not None and (theirs if theirs is not None else metrics.get_meter_provider()) is mine:
                self._read(owner, series)
        return list(series.values())


def redact_url(url: URL) -> str:
    """``scheme://host[:port]/path``: no credentials, no query, no fragment."""
    netloc = url.netloc.decode("ascii")
    path = url.raw_path.decode("ascii").split("?", 1)[0] or "/"
    return f"{url.scheme}://{netloc}{path}"


def _method(method: str) -> str:
    return method if method in KNOWN_HTTP_METHODS else HTTP_METHOD_OTHER


def _domain_labels(pool: str, domain: Domain) -> dict[str, str]:
    """``failover.pool``, ``failover.domain``, ``server.address``: what names a domain of a
    pool on its counters (attempts, hedges, slow calls, breaker transitions) and gauge."""
    return {FAILOVER_POOL: pool, FAILOVER_DOMAIN: domain.url, SERVER_ADDRESS: domain.host}


_URL_SLOT = ""  # the attempt span template's url.full and failover.attempt, overwritten per attempt
_NUMBER_SLOT = 0


@dataclass(frozen=True, slots=True)
class _Labels:
    """The attributes of one domain that no request of one pool and method changes, built
    once (:meth:`Telemetry.labels`) and shared by every such request, in every thread.

    Read-only: every use copies them and adds what varies (``dict(labels.domain)``, then
    the result). The SDK may keep the mapping it is given, and a cached one that a call
    changed would carry its status or error type to every later attempt. The mappings are
    plain dicts typed as ``Mapping``, so that mypy refuses a write: ``dict()`` copies a
    dict's table in C, where it walks a ``MappingProxyType`` key by key (3.5 times slower),
    and ``{**m, key: value}`` builds a second, temporary dict. Each holds its keys in the
    order the call sites always wrote them: the exported attributes are the same, in the
    same order.
    """

    domain: Mapping[str, str]
    """See :func:`_domain_labels`."""
    span: Mapping[str, str | int]
    """An attempt span's start attributes: method, ``server.*``, ``url.full``, pool, domain
    and ``failover.attempt``, the two that vary holding a placeholder to overwrite (which
    keeps their place)."""
    duration: Mapping[str, str | int]
    """``http.client.request.duration``'s: method, ``server.address``, ``server.port``, pool."""

    @classmethod
    def build(cls, pool: str, method: str, domain: Domain) -> _Labels:
        host, port = domain.host, domain.effective_port
        return cls(
            domain=_domain_labels(pool, domain),
            span={
                HTTP_REQUEST_METHOD: method,
                SERVER_ADDRESS: host,
                SERVER_PORT: port,
                URL_FULL: _URL_SLOT,
                FAILOVER_POOL: pool,
                FAILOVER_DOMAIN: domain.url,
                FAILOVER_ATTEMPT: _NUMBER_SLOT,
            },
            duration={HTTP_REQUEST_METHOD: method, SERVER_ADDRESS: host, SERVER_PORT: port, FAILOVER_POOL: pool},
        )


class Telemetry:
    """Tracer and instruments of one transport."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        # Explicit providers, or ones the API will load from the environment.
        self._active = (
            tracer_provider is not None
            or meter_provider is not None
            or any(name in os.environ for name in _PROVIDER_ENV)
        )
        self.meter_provider = meter_provider  # (None: the global one, whenever it is set)
        self._core: FailoverCore | None = None  # whose breakers the gauge reports (:meth:`watch`)
        self._serving: Sized = ()  # its state's front-ends, while any is open (:meth:`watch`)
        self._last: Series | None = None  # (see :meth:`unwatch`)
        self._watched = False  # in ``_BREAKERS`` (:meth:`watch`)
        # (pool, method) -> domain URL -> its labels. Filled lazily, by any thread:
        # setdefault keeps the first of two racing builds (they are equal). A method is one
        # of the few ``KNOWN_HTTP_METHODS`` or ``_OTHER``, so this stays small.
        self._labels: dict[tuple[str, str], dict[str, _Labels]] = {}
        self.tracer = trace.get_tracer(
            CLIENT_SCOPE, _VERSION, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
        )
        meter = metrics.get_meter(
            CLIENT_SCOPE, _VERSION, meter_provider=meter_provider, schema_url=SCHEMA_URL
        )
        self.attempt_duration = meter.create_histogram(
            HTTP_CLIENT_REQUEST_DURATION,
            unit=UNIT_SECONDS,
            description="Duration of HTTP client requests (one per attempt).",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.requests = meter.create_counter(
            FAILOVER_REQUESTS, unit=UNIT_REQUEST, description="Logical requests, by outcome."
        )
        self.request_duration = meter.create_histogram(
            FAILOVER_REQUEST_DURATION,
            unit=UNIT_SECONDS,
            description="Duration of logical requests, retries and waits included.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.attempts = meter.create_counter(
            FAILOVER_ATTEMPTS, unit=UNIT_ATTEMPT, description="Attempts sent to a domain."
        )
        self.switches = meter.create_counter(
            FAILOVER_SWITCHES, unit=UNIT_SWITCH, description="Changes of the domain serving a pool."
        )
        self.transitions = meter.create_counter(
            FAILOVER_BREAKER_TRANSITIONS,
            unit=UNIT_TRANSITION,
            description="Circuit breaker state changes.",
        )
        self.breaker_state = _BREAKERS.gauge(  # observed at each collection (see Readings)
            meter,
            meter_provider,
            FAILOVER_BREAKER_STATE,
            UNIT_NONE,
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
        )
        self.budget_rejections = meter.create_counter(
            FAILOVER_RETRY_BUDGET_REJECTIONS,
            unit=UNIT_RETRY,
            description="Retries refused because the pool's retry budget was spent.",
        )
        self.hedges = meter.create_counter(
            FAILOVER_HEDGES,
            unit=UNIT_HEDGE,
            description="Hedged attempts, by how they ended (and the ones the throttle held back).",
        )
        self.slow_calls = meter.create_counter(
            FAILOVER_SLOW_CALLS, unit=UNIT_CALL, description="Calls slower than the slow-call threshold."
        )
        self.resolve_duration = meter.create_histogram(
            FAILOVER_RESOLVE_DURATION,
            unit=UNIT_SECONDS,
            description="Duration of resolving a pool's host through its resolver, answered or failed.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.resolve_failures = meter.create_counter(
            FAILOVER_RESOLVE_FAILURES,
            unit=UNIT_RESOLUTION,
            description="Resolutions of a pool's host that gave no address.",
        )

    def watch(self, core: FailoverCore, serving: Sized) -> None:
        """Report the breakers of ``core``'s pools on the ``failover.breaker.state`` gauge,
        at every collection from now on, until :meth:`unwatch` or until ``serving`` (the
        front-ends serving from it, held weakly) is empty: the last of them was
        garbage-collected unclosed (it leaves no last reading, and an aiohttp session never
        closes its middleware), for as long as this telemetry lives."""
        self._serving = serving
        self._core = core
        self._last = None  # (read live again: a last reading still due says nothing now)
        if not self._watched:
            self._watched = True
            _BREAKERS.add(self, self.meter_provider)

    def unwatch(self) -> None:
        """The last front-end of the state closed: its domains' series end with the states
        they have now, reported at the next collection only (a test reads its gauge after
        its client closed; an exporter sends the last reading), then no more."""
        core = self._core
        if core is not None:
            last: Series = {}
            _breaker_states(core, last)
            self._last = last
        self._core = None

    def breaker_states(self, into: Series) -> None:
        """Each watched domain's breaker state now, into ``into`` by pool and domain URL
        (or, once unwatched, the states it ended with, once). Two transports that name one
        domain of one pool alike (two states, where ``sharing`` would give them one: a sync
        and an async client built apart, say) make one series, the worse of their states:
        open while either's breaker is open, as an alert on it should say."""
        core = self._core
        if core is not None and self._serving:
            _breaker_states(core, into)
            return
        last, self._last = self._last, None
        for key, observation in (last or {}).items():
            _worse(into, key, observation)

    def domains(self, pool: str, method: str) -> dict[str, _Labels]:
        """The labels built so far for requests of ``pool`` and ``method``, by domain URL
        (the dict later ones are added to)."""
        key = (pool, method)
        found = self._labels.get(key)
        return found if found is not None else self._labels.setdefault(key, {})

    def labels(self, pool: str, method: str, domain: Domain) -> _Labels:
        """The attributes of ``domain`` that no request of ``pool`` and ``method`` changes."""
        domains = self.domains(pool, method)
        found = domains.get(domain.url)
        return found if found is not None else domains.setdefault(domain.url, _Labels.build(pool, method, domain))

    def start(self, pool: str, method: str, url: URL) -> RequestTrace | None:
        """The telemetry of a new logical request, or None when it is :meth:`silent`."""
        return None if self.silent() else RequestTrace(self, pool, _method(method), url)

    def silent(self) -> bool:
        """Would a request started now record nothing? True while no SDK is installed
        (every span and metric call would be a no-op, so the request skips them), and
        in a context that asks for silence."""
        # The state of most processes: no SDK, so the API's two globals are still unset.
        # Read in place, as this runs on every request.
        if not self._active and (
            (
                _GLOBALS_READABLE
                and _trace_globals._TRACER_PROVIDER is None
                and _metrics_globals._METER_PROVIDER is None
            )
            or not self._sdk_installed()
        ):
            return True
        # "emit nothing for this work" (an exporter's own requests, say)
        return bool(context.get_value(SUPPRESS_KEY))

    def _sdk_installed(self) -> bool:
        """Has anyone installed real providers yet? Until then every span and metric
        call would be a no-op, so requests skip telemetry entirely (no attribute dicts,
        no URL redaction). Providers cannot be uninstalled, so True is final. This runs
        on every request while no SDK is installed: it reads the API's two globals
        (the public getters cost microseconds, mostly in ``os.environ`` look-ups)."""
        if _GLOBALS_READABLE:
            installed = (
                _trace_globals._TRACER_PROVIDER is not None
                or _metrics_globals._METER_PROVIDER is not None
            )
        else:  # pragma: no cover - an API without the private globals (see _GLOBALS_READABLE)
            installed = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        if installed:
            self._active = True
        return self._active



def _breaker_states(core: FailoverCore, into: Series) -> None:
    """The breaker state of each domain of ``core``'s pools now, into ``into``."""
    for name, pool_core in tuple(core.pools.items()):
        for domain, breaker in tuple(pool_core.breakers.items()):
            _worse(into, (name, domain.url), Observation(breaker.state.gauge, _domain_labels(name, domain)))


def _worse(into: Series, key: Hashable, observation: Observation) -> None:
    """``observation`` into ``into[key]`` unless a worse state (a higher value) is there."""
    held = into.get(key)
    if held is None or held.value < observation.value:
        into[key] = observation


# Every transport's breakers (each state's, while a front-end of it is open).
_BREAKERS: Readings[Telemetry] = Readings(Telemetry.breaker_states)


class RequestTrace:
    """The telemetry of one logical request."""

    __slots__ = ("_domains", "_method", "_pool", "_span", "_t")

    def __init__(self, telemetry: Telemetry, pool: str, method: str, url: URL) -> None:
        self._t = telemetry
        self._pool = pool
        self._method = method
        self._domains = telemetry.domains(pool, method)
        self._span = span = telemetry.tracer.start_span(
            f"{REQUEST_SPAN_PREFIX}{pool}",
            kind=SpanKind.INTERNAL,
            attributes={HTTP_REQUEST_METHOD: method, FAILOVER_POOL: pool},
        )
        if span.is_recording():
            span.set_attribute(URL_FULL, redact_url(url))

    def steered(self, why: str) -> None:
        """The request's order was not the pool's (a ``semconv.STEERINGS`` value)."""
        self._span.set_attribute(FAILOVER_STEERING, why)

    # -- attempts ----------------------------------------------------------------------

    def attempt_started(self, attempt: Attempt, request: Request) -> tuple[Span | None, Context]:
        """The attempt's CLIENT span (None while nothing records) and the context to
        send it in: until it ends, its span and duration are ours, so
        instrumentation-httpx stays silent."""
        quiet = context.set_value(SUPPRESS_HTTP_KEY, True)
        if not self._span.is_recording():
            return None, quiet
        domain = attempt.domain
        labels = self._domains.get(domain.url) or self._t.labels(self._pool, self._method, domain)
        attributes: dict[str, str | int | bool] = dict(labels.span)
        attributes[URL_FULL] = redact_url(request.url)
        attributes[FAILOVER_ATTEMPT] = attempt.number
        if attempt.number > 1:
            attributes[HTTP_REQUEST_RESEND_COUNT] = attempt.number - 1
        if attempt.hedge:
            attributes[FAILOVER_HEDGE] = True
        span = self._t.tracer.start_span(
            self._method,
            context=trace.set_span_in_context(self._span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        propagate.inject(request.headers, context=trace.set_span_in_context(span))
        # The span is the current one while the attempt is sent: what runs below the
        # transport (the resolving network backend, ``_dial.py``) adds to it.
        return span, trace.set_span_in_context(span, quiet)

    def attempt_ended(
        self,
        attempt: Attempt,
        span: Span | None,
        *,
        race: str | None,
        duration: float,
        result: str,
        status: int | None,
        error_type: str | None,
        exception: BaseException | None = None,
    ) -> None:
        domain = attempt.domain
        labels = self._domains.get(domain.url) or self._t.labels(self._pool, self._method, domain)
        attributes = dict(labels.duration)
        if status is not None:
            attributes[HTTP_RESPONSE_STATUS_CODE] = status
        if error_type is not None and error_type != ERROR_APP:
            attributes[ERROR_TYPE] = error_type
        self._t.attempt_duration.record(duration, attributes)
        counted: dict[str, str | int] = dict(labels.domain)
        counted[FAILOVER_ATTEMPT_RESULT] = result
        if error_type is not None:
            counted[ERROR_TYPE] = error_type
        self._t.attempts.add(1, counted)
        if attempt.hedge and race is not None:
            self._hedged(labels, race)
        if span is None:
            return
        if status is not None:
            span.set_attribute(HTTP_RESPONSE_STATUS_CODE, status)
        if error_type is not None:
            span.set_attribute(ERROR_TYPE, error_type)
        if exception is not None or (status is not None and status >= 400):
            description = None if exception is None else type(exception).__name__
            span.set_status(Status(StatusCode.ERROR, description))
        span.end()

    def attempt_cancelled(self, attempt: Attempt, span: Span | None) -> None:
        """Another attempt won while this one was on the wire."""
        if attempt.hedge:
            self._hedged(self._t.labels(self._pool, self._method, attempt.domain), HEDGE_CANCELLED)
        self.attempt_abandoned(span)

    @staticmethod
    def attempt_abandoned(span: Span | None) -> None:
        if span is not None:
            span.set_attribute(ERROR_TYPE, ERROR_CANCELLED)
            span.end()

    def _hedged(self, labels: _Labels, outcome: str) -> None:
        attributes = dict(labels.domain)
        attributes[FAILOVER_HEDGE_OUTCOME] = outcome
        self._t.hedges.add(1, attributes)

    # -- events ------------------------------------------------------------------------

    def events(self, events: Iterable[Event]) -> None:
        t = self._t
        for event in events:
            if isinstance(event, BreakerEvent):
                labels = t.labels(event.pool, self._method, event.domain)
                change = {
                    FAILOVER_BREAKER_FROM: event.before.value,
                    FAILOVER_BREAKER_TO: event.after.value,
                }
                if event.reason is not None:
                    change[FAILOVER_REASON] = event.reason
                t.transitions.add(1, {**labels.domain, **change})
                self._span.add_event(
                    EVENT_BREAKER_TRANSITION, {FAILOVER_DOMAIN: event.domain.url, **change}
                )
            elif isinstance(event, Switch):
                attrs = {
                    FAILOVER_POOL: event.pool,
                    FAILOVER_FROM: event.before.url,
                    FAILOVER_TO: event.after.url,
                    FAILOVER_REASON: event.reason,
                }
                t.switches.add(1, attrs)
                self._span.add_event(EVENT_SWITCH, attrs)
            elif isinstance(event, BudgetRejected):
                t.budget_rejections.add(1, {FAILOVER_POOL: event.pool})
                self._span.add_event(EVENT_RETRY_BUDGET_REJECTED, {FAILOVER_POOL: event.pool})
            elif isinstance(event, HedgeThrottled):
                self._hedged(t.labels(self._pool, self._method, event.domain), HEDGE_THROTTLED)
            elif isinstance(event, SlowCall):
                t.slow_calls.add(1, dict(t.labels(event.pool, self._method, event.domain).domain))

    # -- the end -----------------------------------------------------------------------

    def finish(
        self,
        *,
        outcome: str,
        duration: float,
        attempts: int,
        domain: str | None,
        status: int | None,
        error_type: str | None,
    ) -> None:
        attributes: dict[str, str | int] = {
            FAILOVER_POOL: self._pool,
            HTTP_REQUEST_METHOD: self._method,
            FAILOVER_OUTCOME: outcome,
        }
        if error_type is not None:
            attributes[ERROR_TYPE] = error_type
        self._t.requests.add(1, attributes)
        self._t.request_duration.record(
            duration, {FAILOVER_POOL: self._pool, FAILOVER_OUTCOME: outcome}
        )
        span = self._span
        if span.is_recording():
            ended: dict[str, str | int] = {FAILOVER_OUTCOME: outcome, FAILOVER_ATTEMPTS_ATTRIBUTE: attempts}
            if domain is not None:
                ended[FAILOVER_DOMAIN] = domain
            if status is not None:
                ended[HTTP_RESPONSE_STATUS_CODE] = status
            if error_type is not None:
                ended[ERROR_TYPE] = error_type
            span.set_attributes(ended)  # one call (the SDK takes its lock once), not five
            if outcome in BAD_OUTCOMES:
                span.set_status(Status(StatusCode.ERROR, error_type))
        span.end()

