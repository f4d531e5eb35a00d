"""Capture the spans and metrics the failover client emitted during one test.

The pytest fixture ``failover_telemetry`` hands out a :class:`FailoverTelemetry`.
Behind it, one in-memory span exporter and one in-memory metric reader are
installed per process, the first time a test asks for them:

* tracing: if no global tracer provider is set, an SDK ``TracerProvider`` is
  installed globally; if one is set already (an SDK provider from the project's
  ``conftest.py`` or from ``--failover-otlp-endpoint``), the exporter is added to
  it as one more span processor. Either way :attr:`FailoverTelemetry.tracer_provider`
  is a provider that feeds the same exporter, for transports given one explicitly.
* metrics: an SDK ``MeterProvider`` with a delta-temporality in-memory reader is
  installed globally if none is set. A reader cannot be added to an existing
  provider (an OpenTelemetry rule), so if one is set already only transports built
  with ``meter_provider=failover_telemetry.meter_provider`` are measured;
  :attr:`FailoverTelemetry.captures_global_metrics` says which case holds.

Each test sees only what was emitted between its start and its end. The gauges
(``failover.breaker.state``, ``failover.shared.state``) are read at each collection
from every live client: a client an earlier test dropped without closing lives on in a
reference cycle until the garbage collector runs, so a capture starts with a
collection (``gc.collect()``, when a gauge was given a client since the last one) and
never reads such a client; one kept open across tests (in a module-scoped fixture, say)
is live and is read. The helpers read the span and metric names of the failover
client (see the project's telemetry table): :meth:`FailoverTelemetry.requests`,
:meth:`~FailoverTelemetry.attempts`, :meth:`~FailoverTelemetry.switches`,
:meth:`~FailoverTelemetry.breaker_transitions`, :attr:`~FailoverTelemetry.outcome`,
:meth:`~FailoverTelemetry.metric`.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

try:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        MeterProvider,
        ObservableCounter,
        ObservableUpDownCounter,
        UpDownCounter,
    )
    from opentelemetry.sdk.metrics import _Gauge as SyncGauge  # the SDK exports it only privately
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        HistogramDataPoint,
        InMemoryMetricReader,
        MetricsData,
        NumberDataPoint,
        Sum,
    )
    from opentelemetry.sdk.metrics.export import Histogram as HistogramData
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "failover_telemetry needs the OpenTelemetry SDK: pip install 'pytest-failover[simulator]'"
    ) from exc

from . import semconv
from ._telemetry import observed_ever, observes_any
from .semconv import (
    ERROR_TYPE,
    EVENT_BREAKER_TRANSITION,
    EVENT_SWITCH,
    FAILOVER_ATTEMPT,
    FAILOVER_ATTEMPT_RESULT,
    FAILOVER_BREAKER_FROM,
    FAILOVER_BREAKER_TO,
    FAILOVER_DOMAIN,
    FAILOVER_FROM,
    FAILOVER_OUTCOME,
    FAILOVER_POOL,
    FAILOVER_REASON,
    FAILOVER_TO,
    HTTP_REQUEST_METHOD,
    HTTP_REQUEST_RESEND_COUNT,
    HTTP_RESPONSE_STATUS_CODE,
    REQUEST_SPAN_PREFIX,
    SERVER_ADDRESS,
    URL_FULL,
)

__all__ = [
    "Attempt",
    "BreakerTransition",
    "FailoverTelemetry",
    "LogicalRequest",
    "MetricPoint",
    "Switch",
    "capture_for_test",
]

AttributeValue = (
    str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int] | Sequence[float]
)
MetricKind = semconv.MetricKind

#: Metric names the failover client emits (meter ``pytest_failover``).
CLIENT_METRICS = semconv.CLIENT_METRIC_NAMES

#: Keyword shortcuts accepted by :meth:`FailoverTelemetry.metric` for dotted attribute names.
ATTRIBUTE_ALIASES: Mapping[str, str] = {
    "pool": FAILOVER_POOL,
    "domain": FAILOVER_DOMAIN,
    "outcome": FAILOVER_OUTCOME,
    "result": FAILOVER_ATTEMPT_RESULT,
    "reason": FAILOVER_REASON,
    "breaker_from": FAILOVER_BREAKER_FROM,
    "breaker_to": FAILOVER_BREAKER_TO,
    "method": HTTP_REQUEST_METHOD,
    "status_code": HTTP_RESPONSE_STATUS_CODE,
    "error_type": ERROR_TYPE,
    "server_address": SERVER_ADDRESS,
}


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """The client moved a logical request from one domain to another (event ``failover.switch``)."""

    pool: str
    from_domain: str
    to_domain: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerTransition:
    """A domain's circuit breaker changed state (event ``failover.breaker.transition``)."""

    pool: str
    domain: str
    from_state: str
    to_state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One network attempt (a CLIENT span named after the method)."""

    number: int
    pool: str
    domain: str
    method: str
    url: str
    server_address: str | None
    status_code: int | None
    error_type: str | None
    resend_count: int
    failed: bool
    span: ReadableSpan = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogicalRequest:
    """One request as the application saw it (an INTERNAL span ``failover {pool}``)."""

    pool: str
    method: str
    url: str
    outcome: str
    attempts: tuple[Attempt, ...]
    domain: str | None
    status_code: int | None
    error_type: str | None
    switches: tuple[Switch, ...]
    breaker_transitions: tuple[BreakerTransition, ...]
    span: ReadableSpan = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricPoint:
    """One metric series, summed over the test.

    ``value`` is the sum of the increments (counters), the sum of the observed
    values (histograms) or the last value (gauges); ``count`` is the number of
    observations for histograms and ``None`` otherwise.
    """

    name: str
    kind: MetricKind
    attributes: Mapping[str, AttributeValue]
    value: float
    count: int | None


# --------------------------------------------------------------------------- process-wide install


class _Installation:
    """The exporter, reader and providers, built once per process."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        processor = SimpleSpanProcessor(self.exporter)
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(processor)
        current_tracing = trace.get_tracer_provider()
        if isinstance(current_tracing, trace.ProxyTracerProvider):
            trace.set_tracer_provider(self.tracer_provider)
            self.captures_global_traces = True
        elif isinstance(current_tracing, TracerProvider):
            current_tracing.add_span_processor(processor)
            self.captures_global_traces = True
        else:
            self.captures_global_traces = False

        delta = AggregationTemporality.DELTA
        self.reader = InMemoryMetricReader(
            preferred_temporality={
                Counter: delta,
                UpDownCounter: delta,
                Histogram: delta,
                ObservableCounter: delta,
                ObservableUpDownCounter: delta,
                # Cumulative sync gauges repeat their last value forever, which would
                # leak one test's breaker states into the next.
                SyncGauge: delta,
            }
        )
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        current_metrics = metrics.get_meter_provider()
        if type(current_metrics).__name__ == "_ProxyMeterProvider":
            metrics.set_meter_provider(self.meter_provider)
        self.captures_global_metrics = metrics.get_meter_provider() is self.meter_provider
        self.lock = threading.Lock()


_installation: _Installation | None = None
_install_lock = threading.Lock()


def _install() -> _Installation:
    global _installation
    with _install_lock:
        if _installation is None:
            _installation = _Installation()
        return _installation


_swept = -1  # ``observed_ever()`` at the last sweep


def _sweep() -> None:
    """Collect an earlier test's client dropped unclosed: it lives on in a reference cycle,
    and the observed gauges would read its breakers until the next automatic collection.
    A full collection costs tens of milliseconds (23 ms in this project's test process,
    more in a large application's heap), so it runs only when a gauge was given a client
    since the last sweep and one is read now: a session's client kept open costs no test
    a collection."""
    global _swept
    ever = observed_ever()
    if ever != _swept:
        _swept = ever
        if observes_any():
            gc.collect()


@contextmanager
def capture_for_test() -> Iterator[FailoverTelemetry]:
    """Install the in-memory exporter and reader if needed; yield a capture cleared for one test."""
    installation = _install()
    telemetry = FailoverTelemetry(installation)
    _sweep()
    telemetry.clear()
    try:
        yield telemetry
    finally:
        telemetry.clear()


# --------------------------------------------------------------------------- the fixture's value


def _attr_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _attr_str(value: object) -> str | None:
    return None if value is None else str(value)


class FailoverTelemetry:
    """What the failover client emitted during the current test.

    Use it through the ``failover_telemetry`` fixture. Reading helpers return
    frozen records in the order the spans started.
    """

    def __init__(self, installation: _Installation) -> None:
        self._installation = installation
        self._points: dict[tuple[str, frozenset[tuple[str, object]]], MetricPoint] = {}

    # -- providers ---------------------------------------------------------------

    @property
    def tracer_provider(self) -> TracerProvider:
        """A tracer provider whose spans this capture sees; pass it to ``FailoverTransport``."""
        return self._installation.tracer_provider

    @property
    def meter_provider(self) -> MeterProvider:
        """A meter provider whose metrics this capture sees; pass it to ``FailoverTransport``."""
        return self._installation.meter_provider

    @property
    def captures_global_traces(self) -> bool:
        """Whether spans made through the global tracer provider are captured."""
        return self._installation.captures_global_traces

    @property
    def captures_global_metrics(self) -> bool:
        """Whether metrics made through the global meter provider are captured."""
        return self._installation.captures_global_metrics

    def clear(self) -> None:
        """Forget every span and metric recorded so far."""
        self._installation.exporter.clear()
        with self._installation.lock:
            self._installation.reader.get_metrics_data()  # delta: drains what was recorded
            self._points.clear()

    # -- spans -------------------------------------------------------------------

    def spans(self) -> list[ReadableSpan]:
        """Every finished span of this test (the client's and any other), by start time."""
        finished = self._installation.exporter.get_finished_spans()
        return sorted(finished, key=lambda span: span.start_time or 0)

    def requests(self, pool: str | None = None) -> list[LogicalRequest]:
        """The logical requests (one per ``client.get(...)``), optionally of one pool."""
        spans = self.spans()
        children: dict[int, list[Attempt]] = {}
        for span in spans:
            attempt = _attempt_from_span(span)
            if attempt is not None and span.parent is not None:
                children.setdefault(span.parent.span_id, []).append(attempt)
        found = []
        for span in spans:
            request = _request_from_span(span, children)
            if request is not None and (pool is None or request.pool == pool):
                found.append(request)
        return found

    def attempts(self, pool: str | None = None, *, domain: str | None = None) -> list[Attempt]:
        """Every network attempt, optionally of one pool and/or one domain (base URL)."""
        found = []
        for span in self.spans():
            attempt = _attempt_from_span(span)
            if attempt is None:
                continue
            if pool is not None and attempt.pool != pool:
                continue
            if domain is not None and attempt.domain != domain:
                continue
            found.append(attempt)
        return found

    def switches(self, pool: str | None = None) -> list[Switch]:
        """Every domain switch, in order."""
        return [switch for request in self.requests(pool) for switch in request.switches]

    def breaker_transitions(
        self, pool: str | None = None, *, domain: str | None = None
    ) -> list[BreakerTransition]:
        """Every circuit-breaker transition, in order, optionally of one domain (base URL)."""
        return [
            transition
            for request in self.requests(pool)
            for transition in request.breaker_transitions
            if domain is None or transition.domain == domain
        ]

    def outcomes(self, pool: str | None = None) -> list[str]:
        """The outcome of every logical request: success, failure, circuit_open, fallback, stale."""
        return [request.outcome for request in self.requests(pool)]

    @property
    def outcome(self) -> str:
        """The outcome of the last logical request; an error if the client made none."""
        requests = self.requests()
        if not requests:
            raise LookupError(
                "failover_telemetry saw no failover request in this test. "
                + self._no_data_hint()
            )
        return requests[-1].outcome

    def _no_data_hint(self) -> str:
        if self.captures_global_traces:
            return (
                "Was the request sent through a FailoverTransport before the assertion, "
                "and did the span end (response read or closed)?"
            )
        return (
            "A non-SDK global tracer provider is installed, so only transports built "
            "with tracer_provider=failover_telemetry.tracer_provider are captured."
        )

    # -- metrics -----------------------------------------------------------------

    def metric_points(self, name: str | None = None) -> list[MetricPoint]:
        """Every metric series recorded during this test, optionally of one metric name."""
        self._collect()
        return [point for key, point in self._points.items() if name is None or key[0] == name]

    def metric(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        /,
        **aliases: AttributeValue,
    ) -> float:
        """The metric's total over the series whose attributes include the given ones.

        Counters give the sum of increments, histograms the number of
        observations, gauges the last value (one series must match). Dotted
        attribute names go in ``attributes``; the keywords are shortcuts
        (``pool=``, ``domain=``, ``outcome=``, ``result=``, ``reason=``,
        ``method=``, ``status_code=``, ``error_type=``, ``server_address=``,
        ``breaker_from=``, ``breaker_to=``). A name that is neither a client
        metric nor recorded in this test is an error (catches typos).
        """
        wanted = dict(attributes or {})
        for alias, value in aliases.items():
            if alias not in ATTRIBUTE_ALIASES:
                raise TypeError(
                    f"metric() got an unknown keyword {alias!r}; use one of "
                    f"{sorted(ATTRIBUTE_ALIASES)} or pass a mapping of attribute names"
                )
            wanted[ATTRIBUTE_ALIASES[alias]] = value
        points = self.metric_points()
        if name not in CLIENT_METRICS and not any(point.name == name for point in points):
            raise ValueError(
                f"unknown metric {name!r}: the failover client emits "
                f"{sorted(CLIENT_METRICS)}; recorded in this test: "
                f"{sorted({point.name for point in points})}"
            )
        matching = [
            point
            for point in points
            if point.name == name
            and all(point.attributes.get(key) == value for key, value in wanted.items())
        ]
        if not matching:
            return 0
        kind = matching[0].kind
        if kind == "gauge":
            if len(matching) > 1:
                raise ValueError(
                    f"{len(matching)} series of gauge {name!r} match {wanted}; "
                    f"narrow them: {[dict(point.attributes) for point in matching]}"
                )
            return matching[0].value
        if kind == "histogram":
            return sum(point.count or 0 for point in matching)
        return sum(point.value for point in matching)

    def _collect(self) -> None:
        with self._installation.lock:
            data = self._installation.reader.get_metrics_data()
            if data is not None:
                self._merge(data)

    def _merge(self, data: MetricsData) -> None:
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        self._merge_point(metric.name, metric.data, point)

    def _merge_point(self, name: str, data: object, point: object) -> None:
        attributes = dict(getattr(point, "attributes", None) or {})
        key = (name, frozenset((k, _hashable(v)) for k, v in attributes.items()))
        previous = self._points.get(key)
        if isinstance(data, HistogramData) and isinstance(point, HistogramDataPoint):
            count = point.count + (previous.count or 0 if previous else 0)
            value = point.sum + (previous.value if previous else 0)
            self._points[key] = MetricPoint(
                name=name, kind="histogram", attributes=attributes, value=value, count=count
            )
        elif isinstance(data, Sum) and isinstance(point, NumberDataPoint):
            kind: MetricKind = "counter" if data.is_monotonic else "updowncounter"
            if data.aggregation_temporality == AggregationTemporality.DELTA:
                value = point.value + (previous.value if previous else 0)
            else:
                value = point.value
            self._points[key] = MetricPoint(
                name=name, kind=kind, attributes=attributes, value=value, count=None
            )
        elif isinstance(data, Gauge) and isinstance(point, NumberDataPoint):
            self._points[key] = MetricPoint(
                name=name, kind="gauge", attributes=attributes, value=point.value, count=None
            )


def _hashable(value: object) -> object:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _attempt_from_span(span: ReadableSpan) -> Attempt | None:
    attributes = span.attributes or {}
    if span.kind != trace.SpanKind.CLIENT or FAILOVER_ATTEMPT not in attributes:
        return None
    return Attempt(
        number=_attr_int(attributes.get(FAILOVER_ATTEMPT)) or 0,
        pool=str(attributes.get(FAILOVER_POOL, "")),
        domain=str(attributes.get(FAILOVER_DOMAIN, "")),
        method=str(attributes.get(HTTP_REQUEST_METHOD, span.name)),
        url=str(attributes.get(URL_FULL, "")),
        server_address=_attr_str(attributes.get(SERVER_ADDRESS)),
        status_code=_attr_int(attributes.get(HTTP_RESPONSE_STATUS_CODE)),
        error_type=_attr_str(attributes.get(ERROR_TYPE)),
        resend_count=_attr_int(attributes.get(HTTP_REQUEST_RESEND_COUNT)) or 0,
        failed=span.status.status_code == trace.StatusCode.ERROR,
        span=span,
    )


def _request_from_span(
    span: ReadableSpan, children: Mapping[int, Sequence[Attempt]]
) -> LogicalRequest | None:
    attributes = span.attributes or {}
    if FAILOVER_OUTCOME not in attributes or not span.name.startswith(REQUEST_SPAN_PREFIX):
        return None
    pool = str(attributes.get(FAILOVER_POOL, span.name.removeprefix(REQUEST_SPAN_PREFIX)))
    switches = []
    transitions = []
    for event in span.events:
        event_attributes = event.attributes or {}
        if event.name == EVENT_SWITCH:
            switches.append(
                Switch(
                    pool=pool,
                    from_domain=str(event_attributes.get(FAILOVER_FROM, "")),
                    to_domain=str(event_attributes.get(FAILOVER_TO, "")),
                    reason=str(event_attributes.get(FAILOVER_REASON, "")),
                )
            )
        elif event.name == EVENT_BREAKER_TRANSITION:
            transitions.append(
                BreakerTransition(
                    pool=pool,
                    domain=str(event_attributes.get(FAILOVER_DOMAIN, "")),
                    from_state=str(event_attributes.get(FAILOVER_BREAKER_FROM, "")),
                    to_state=str(event_attributes.get(FAILOVER_BREAKER_TO, "")),
                )
            )
    own_attempts = sorted(
        children.get(span.context.span_id, ()) if span.context else (),
        key=lambda attempt: attempt.number,
    )
    return LogicalRequest(
        pool=pool,
        method=str(attributes.get(HTTP_REQUEST_METHOD, "")),
        url=str(attributes.get(URL_FULL, "")),
        outcome=str(attributes[FAILOVER_OUTCOME]),
        attempts=tuple(own_attempts),
        domain=_attr_str(attributes.get(FAILOVER_DOMAIN)),
        status_code=_attr_int(attributes.get(HTTP_RESPONSE_STATUS_CODE)),
        error_type=_attr_str(attributes.get(ERROR_TYPE)),
        switches=tuple(switches),
        breaker_transitions=tuple(transitions),
        span=span,
    )
