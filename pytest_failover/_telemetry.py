"""OpenTelemetry spans and metrics of the failover client (API only, no SDK).

One INTERNAL span per logical request (``failover {pool}``) with a CLIENT child
span per attempt (``{method}``), following the HTTP semantic conventions, and
the metrics listed in the README. Instruments are created once per transport;
attributes are passed at span start; attempt spans are skipped when the logical
span is not recorded (no SDK, or sampled out). Nothing here ever sees a query
string, credentials, ``Authorization`` or cookies: URLs are redacted first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import httpx
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ._breaker import BreakerState
from ._core import BreakerEvent, BudgetRejected, Event, Switch

try:  # where the API keeps the global providers; private, so tolerate its absence
    from opentelemetry import trace as _trace_globals
    from opentelemetry.metrics import _internal as _metrics_globals
except ImportError:  # pragma: no cover - then the public (slower) check is used
    _trace_globals = _metrics_globals = None  # type: ignore[assignment]

_GLOBALS_READABLE = hasattr(_trace_globals, "_TRACER_PROVIDER") and hasattr(
    _metrics_globals, "_METER_PROVIDER"
)
_PROVIDER_ENV = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from ._core import Attempt
    from ._pool import Domain

__all__ = ["RequestTrace", "Telemetry", "redact_url"]

_SCOPE = "pytest_failover"
_VERSION = "0.1.0"
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"

# The semantic conventions' recommended buckets for http.client.request.duration.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)

# Attribute names: the semantic conventions' and ours, in one place.
HTTP_METHOD = "http.request.method"
HTTP_STATUS = "http.response.status_code"
RESEND_COUNT = "http.request.resend_count"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
URL_FULL = "url.full"
ERROR_TYPE = "error.type"
POOL = "failover.pool"
DOMAIN = "failover.domain"
ATTEMPT = "failover.attempt"
ATTEMPTS = "failover.attempts"
OUTCOME = "failover.outcome"
ATTEMPT_RESULT = "failover.attempt.result"
SWITCH_FROM = "failover.from"
SWITCH_TO = "failover.to"
SWITCH_REASON = "failover.reason"
BREAKER_FROM = "failover.breaker.from"
BREAKER_TO = "failover.breaker.to"

_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})


def redact_url(url: httpx.URL) -> str:
    """``scheme://host[:port]/path``: no credentials, no query, no fragment."""
    netloc = url.netloc.decode("ascii")
    path = url.raw_path.decode("ascii").split("?", 1)[0] or "/"
    return f"{url.scheme}://{netloc}{path}"


def _method(method: str) -> str:
    return method if method in _KNOWN_METHODS else "_OTHER"


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
        self._pools: list[tuple[str, tuple[Domain, ...]]] = []
        self.tracer = trace.get_tracer(
            _SCOPE, _VERSION, tracer_provider=tracer_provider, schema_url=_SCHEMA_URL
        )
        meter = metrics.get_meter(
            _SCOPE, _VERSION, meter_provider=meter_provider, schema_url=_SCHEMA_URL
        )
        self.attempt_duration = meter.create_histogram(
            "http.client.request.duration",
            unit="s",
            description="Duration of HTTP client requests (one per attempt).",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.requests = meter.create_counter(
            "failover.requests", unit="{request}", description="Logical requests, by outcome."
        )
        self.request_duration = meter.create_histogram(
            "failover.request.duration",
            unit="s",
            description="Duration of logical requests, retries and waits included.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.attempts = meter.create_counter(
            "failover.attempts", unit="{attempt}", description="Attempts sent to a domain."
        )
        self.switches = meter.create_counter(
            "failover.switches", unit="{switch}", description="Changes of the domain serving a pool."
        )
        self.transitions = meter.create_counter(
            "failover.breaker.transitions",
            unit="{transition}",
            description="Circuit breaker state changes.",
        )
        self.breaker_state = meter.create_gauge(
            "failover.breaker.state",
            description="Circuit breaker state: 0 closed, 1 half-open, 2 open.",
        )
        self.budget_rejections = meter.create_counter(
            "failover.retry_budget.rejections",
            unit="{retry}",
            description="Retries refused because the pool's retry budget was spent.",
        )

    def initial_breaker_states(self, pools: Iterable[tuple[str, Iterable[Domain]]]) -> None:
        self._pools = [(pool, tuple(domains)) for pool, domains in pools]
        if not self._active:
            return  # recorded once real providers appear
        for pool, domains in self._pools:
            for domain in domains:
                self.breaker_state.set(
                    BreakerState.CLOSED.gauge,
                    {POOL: pool, DOMAIN: domain.url, SERVER_ADDRESS: domain.host},
                )

    def start(self, pool: str, method: str, url: httpx.URL) -> RequestTrace:
        if not self._active:
            # The state of most processes: no SDK, so the API's two globals are still
            # unset. Read in place, as this runs on every request.
            unset = (
                _GLOBALS_READABLE
                and _trace_globals._TRACER_PROVIDER is None
                and _metrics_globals._METER_PROVIDER is None
            )
            if unset or not self._sdk_installed():
                return _SILENT
        return RequestTrace(self, pool, _method(method), url)

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
        else:  # pragma: no cover
            installed = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        if installed:
            self._active = True
            self.initial_breaker_states(self._pools)
        return self._active


class RequestTrace:
    """The telemetry of one logical request."""

    __slots__ = ("_attempt_span", "_method", "_pool", "_span", "_t")
    live = True  # False for the silent stand-in used while no SDK is installed

    def __init__(self, telemetry: Telemetry, pool: str, method: str, url: httpx.URL) -> None:
        self._t = telemetry
        self._pool = pool
        self._method = method
        self._attempt_span: Span | None = None
        self._span = span = telemetry.tracer.start_span(
            f"failover {pool}", kind=SpanKind.INTERNAL, attributes={HTTP_METHOD: method, POOL: pool}
        )
        if span.is_recording():
            span.set_attribute(URL_FULL, redact_url(url))

    # -- attempts ----------------------------------------------------------------------

    def attempt_started(self, attempt: Attempt, request: httpx.Request) -> None:
        if not self._span.is_recording():
            return
        url = request.url
        attributes: dict[str, str | int] = {
            HTTP_METHOD: self._method,
            SERVER_ADDRESS: attempt.domain.host,
            SERVER_PORT: attempt.domain.effective_port,
            URL_FULL: redact_url(url),
            POOL: self._pool,
            DOMAIN: attempt.domain.url,
            ATTEMPT: attempt.number,
        }
        if attempt.number > 1:
            attributes[RESEND_COUNT] = attempt.number - 1
        span = self._t.tracer.start_span(
            self._method,
            context=trace.set_span_in_context(self._span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        self._attempt_span = span
        propagate.inject(request.headers, context=trace.set_span_in_context(span))

    def attempt_ended(
        self,
        attempt: Attempt,
        *,
        duration: float,
        result: str,
        status: int | None,
        error_type: str | None,
        exception: BaseException | None = None,
    ) -> None:
        domain = attempt.domain
        attributes: dict[str, str | int] = {
            HTTP_METHOD: self._method,
            SERVER_ADDRESS: domain.host,
            SERVER_PORT: domain.effective_port,
            POOL: self._pool,
        }
        if status is not None:
            attributes[HTTP_STATUS] = status
        if error_type is not None and error_type != "app_error":
            attributes[ERROR_TYPE] = error_type
        self._t.attempt_duration.record(duration, attributes)
        counted: dict[str, str | int] = {
            POOL: self._pool,
            DOMAIN: domain.url,
            SERVER_ADDRESS: domain.host,
            ATTEMPT_RESULT: result,
        }
        if error_type is not None:
            counted[ERROR_TYPE] = error_type
        self._t.attempts.add(1, counted)
        span, self._attempt_span = self._attempt_span, None
        if span is None:
            return
        if status is not None:
            span.set_attribute(HTTP_STATUS, status)
        if error_type is not None:
            span.set_attribute(ERROR_TYPE, error_type)
        if exception is not None or (status is not None and status >= 400):
            description = None if exception is None else type(exception).__name__
            span.set_status(Status(StatusCode.ERROR, description))
        span.end()

    def attempt_abandoned(self) -> None:
        span, self._attempt_span = self._attempt_span, None
        if span is not None:
            span.set_attribute(ERROR_TYPE, "cancelled")
            span.end()

    # -- events ------------------------------------------------------------------------

    def events(self, events: Iterable[Event]) -> None:
        t = self._t
        for event in events:
            if isinstance(event, BreakerEvent):
                domain = event.domain
                attrs = {POOL: event.pool, DOMAIN: domain.url, SERVER_ADDRESS: domain.host}
                t.transitions.add(
                    1, {**attrs, BREAKER_FROM: event.before.value, BREAKER_TO: event.after.value}
                )
                t.breaker_state.set(event.after.gauge, attrs)
                self._span.add_event(
                    "failover.breaker.transition",
                    {DOMAIN: domain.url, BREAKER_FROM: event.before.value, BREAKER_TO: event.after.value},
                )
            elif isinstance(event, Switch):
                attrs = {
                    POOL: event.pool,
                    SWITCH_FROM: event.before.url,
                    SWITCH_TO: event.after.url,
                    SWITCH_REASON: event.reason,
                }
                t.switches.add(1, attrs)
                self._span.add_event("failover.switch", attrs)
            elif isinstance(event, BudgetRejected):
                t.budget_rejections.add(1, {POOL: event.pool})
                self._span.add_event("failover.retry_budget.rejected", {POOL: event.pool})

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
        attributes: dict[str, str | int] = {POOL: self._pool, HTTP_METHOD: self._method, OUTCOME: outcome}
        if error_type is not None:
            attributes[ERROR_TYPE] = error_type
        self._t.requests.add(1, attributes)
        self._t.request_duration.record(duration, {POOL: self._pool, OUTCOME: outcome})
        span = self._span
        if span.is_recording():
            span.set_attribute(OUTCOME, outcome)
            span.set_attribute(ATTEMPTS, attempts)
            if domain is not None:
                span.set_attribute(DOMAIN, domain)
            if status is not None:
                span.set_attribute(HTTP_STATUS, status)
            if error_type is not None:
                span.set_attribute(ERROR_TYPE, error_type)
            if outcome in ("failure", "circuit_open"):
                span.set_status(Status(StatusCode.ERROR, error_type))
        span.end()


class _SilentTrace(RequestTrace):
    """The request telemetry while no OpenTelemetry SDK is installed: nothing at all."""

    __slots__ = ()
    live = False

    def __init__(self) -> None:
        pass

    def attempt_started(self, attempt: Attempt, request: httpx.Request) -> None:
        pass

    def attempt_ended(
        self,
        attempt: Attempt,
        *,
        duration: float,
        result: str,
        status: int | None,
        error_type: str | None,
        exception: BaseException | None = None,
    ) -> None:
        pass

    def attempt_abandoned(self) -> None:
        pass

    def events(self, events: Iterable[Event]) -> None:
        pass

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
        pass


_SILENT = _SilentTrace()
