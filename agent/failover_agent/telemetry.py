"""The agent's OpenTelemetry set-up: explicit SDK providers, never the global ones.

One :class:`Telemetry` owns a ``MeterProvider`` and a ``TracerProvider`` with:

- a Prometheus reader (:class:`agent.prometheus_text.PrometheusTextReader`, which
  renders the text exposition itself; served at ``/metrics`` by :mod:`agent.server`);
- optionally OTLP exporters (gRPC or HTTP) behind bounded queues; every span or
  metric batch that is dropped or fails to export is counted in
  ``failover.agent.telemetry.dropped``.

The failover client receives :attr:`Telemetry.client_meter_provider`, a thin
wrapper that adds ``probe.location`` to every data point it records, so the
client's own metrics carry the probe's location like the agent's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import Histogram, MeterProvider, ObservableGauge
from opentelemetry.sdk.metrics._internal.exemplar import ExemplarReservoir
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from pytest_failover.semconv import (
    AGENT_SCOPE,
    CLIENT_SCOPE,
    DURATION_BUCKETS,
    FAILOVER_AGENT_TELEMETRY_DROPPED,
    FAILOVER_PROBE_DURATION,
    PROBE_DURATION_BUCKETS,
    PROBE_LOCATION,
    SERVICE_NAME,
    SIGNAL_METRICS,
    SIGNAL_SPANS,
    UNIT_SECONDS,
)

from .config import OtlpConfig
from .prometheus_text import PrometheusTextReader, cardinality_limits

__all__ = ["DURATION_BUCKETS", "PROBE_DURATION_BUCKETS", "Telemetry"]

log = logging.getLogger("failover_agent.telemetry")

# DURATION_BUCKETS (the semantic conventions' recommended buckets) and PROBE_DURATION_BUCKETS
# (their 1-2.5-5 subset, for the probes' domain x phase histogram) live in pytest_failover.semconv.


class _NoExemplars(ExemplarReservoir):
    """The agent's own instruments record outside any span: exemplars would stay empty,
    yet the default reservoirs cost a collect per series (0.15 s per scrape at 1,000 domains)."""

    def __init__(self, **_: Any) -> None:
        pass

    def offer(self, value: float, time_unix_nano: int, attributes: Any, context: Any) -> None:
        return None

    def collect(self, point_attributes: Any) -> list[Any]:
        return []


def _no_exemplars(_aggregation: type) -> Callable[..., ExemplarReservoir]:
    return _NoExemplars


class _DropCounter:
    """Thread-safe counts of telemetry items lost, per signal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {SIGNAL_SPANS: 0, SIGNAL_METRICS: 0}

        self._failing: set[str] = set()

    def add(self, signal: str, n: int) -> None:
        with self._lock:
            self.counts[signal] = self.counts.get(signal, 0) + n

    def export_result(self, signal: str, ok: bool, lost: int) -> None:
        """Count a failed export; log once when exports start failing and once when they recover."""
        with self._lock:
            was_failing = signal in self._failing
            if ok:
                self._failing.discard(signal)
            else:
                self._failing.add(signal)
                self.counts[signal] = self.counts.get(signal, 0) + lost
        if not ok and not was_failing:
            log.warning("OTLP %s export failing; dropped items are counted in %s",
                        signal, FAILOVER_AGENT_TELEMETRY_DROPPED)
        elif ok and was_failing:
            log.info("OTLP %s export recovered", signal)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class _CountingSpanExporter(SpanExporter):
    """Counts the spans of every failed export, then forwards the result."""

    def __init__(self, inner: SpanExporter, drops: _DropCounter) -> None:
        self._inner = inner
        self._drops = drops

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter bug must not kill the batch thread
            log.exception("span export raised")
            result = SpanExportResult.FAILURE
        self._drops.export_result(SIGNAL_SPANS, result is SpanExportResult.SUCCESS, len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _BoundedSpanProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor that counts the spans its full queue drops."""

    def __init__(self, exporter: SpanExporter, drops: _DropCounter, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._drops = drops
        self._max = int(kwargs.get("max_queue_size") or 2048)

    def on_end(self, span: ReadableSpan) -> None:
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        if queue is not None and len(queue) >= self._max:
            self._drops.add(SIGNAL_SPANS, 1)
        super().on_end(span)


class _CountingMetricExporter(MetricExporter):
    """Counts the data points of every failed metric export."""

    def __init__(self, inner: MetricExporter, drops: _DropCounter) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._drops = drops

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            log.exception("metric export raised")
            result = MetricExportResult.FAILURE
        ok = result is MetricExportResult.SUCCESS
        points = 0 if ok else sum(
            len(m.data.data_points)
            for rm in metrics_data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        )
        self._drops.export_result(SIGNAL_METRICS, ok, points)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis)


def _otlp_exporters(cfg: OtlpConfig) -> tuple[SpanExporter, MetricExporter]:
    endpoint = cfg.endpoint.rstrip("/")
    headers = dict(cfg.headers)
    if cfg.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GM
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GS

        return (
            GS(endpoint=endpoint, insecure=cfg.insecure, headers=headers, timeout=cfg.timeout),
            GM(endpoint=endpoint, insecure=cfg.insecure, headers=headers, timeout=cfg.timeout),
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HM
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HS

    return (
        HS(endpoint=f"{endpoint}/v1/traces", headers=headers, timeout=cfg.timeout),
        HM(endpoint=f"{endpoint}/v1/metrics", headers=headers, timeout=cfg.timeout),
    )


class Telemetry:
    """Explicit meter and tracer providers for one agent, with their exporters."""

    def __init__(
        self,
        *,
        location: str,
        prometheus: bool = True,
        otlp: OtlpConfig | None = None,
        span_exporters: Iterable[SpanExporter] = (),
        metric_readers: Iterable[MetricReader] = (),
        service_name: str = "failover-agent",
    ) -> None:
        self.location = location
        self.drops = _DropCounter()
        resource = Resource.create({SERVICE_NAME: service_name, PROBE_LOCATION: location})
        readers: list[MetricReader] = list(metric_readers)
        self.prometheus: PrometheusTextReader | None = None
        if prometheus:
            self.prometheus = PrometheusTextReader()
            readers.append(self.prometheus)
        self.tracer_provider = TracerProvider(resource=resource)
        span_exporters = list(span_exporters)
        self.spans_exported = bool(span_exporters) or otlp is not None
        for exporter in span_exporters:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        if otlp is not None:
            span_exporter, metric_exporter = _otlp_exporters(otlp)
            self.tracer_provider.add_span_processor(
                _BoundedSpanProcessor(
                    _CountingSpanExporter(span_exporter, self.drops),
                    self.drops,
                    max_queue_size=otlp.max_queue_size,
                    max_export_batch_size=otlp.max_export_batch_size,
                    schedule_delay_millis=otlp.schedule_delay * 1000,
                    export_timeout_millis=otlp.timeout * 1000,
                )
            )
            readers.append(
                PeriodicExportingMetricReader(
                    _CountingMetricExporter(metric_exporter, self.drops),
                    export_interval_millis=otlp.export_interval * 1000,
                    export_timeout_millis=otlp.timeout * 1000,
                    cardinality_limits=cardinality_limits(),
                )
            )
        views = [
            View(
                instrument_name=FAILOVER_PROBE_DURATION,
                meter_name=AGENT_SCOPE,
                aggregation=ExplicitBucketHistogramAggregation(PROBE_DURATION_BUCKETS),
                exemplar_reservoir_factory=_no_exemplars,
            ),
            View(instrument_type=ObservableGauge, meter_name=AGENT_SCOPE,
                 exemplar_reservoir_factory=_no_exemplars),
            View(
                instrument_type=Histogram,
                instrument_unit=UNIT_SECONDS,
                meter_name=CLIENT_SCOPE,
                aggregation=ExplicitBucketHistogramAggregation(DURATION_BUCKETS),
            )
        ]
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers, views=views)
        self.client_meter_provider = LabelledMeterProvider(
            self.meter_provider, {PROBE_LOCATION: location}
        )
        self._shut = False

    @property
    def client_tracer_provider(self) -> trace_api.TracerProvider:
        """What the failover client traces with: the SDK provider when spans go somewhere,
        else a no-op one (building spans nobody exports costs ~5 % of the agent's CPU)."""
        if self.spans_exported:
            return self.tracer_provider
        return trace_api.NoOpTracerProvider()

    def prometheus_chunks(self) -> list[bytes]:
        """The same text in pieces of about 256 KiB (collects on call)."""
        if self.prometheus is None:
            return []
        return self.prometheus.render_chunks()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Flush and stop every exporter, within about ``timeout`` seconds."""
        if self._shut:
            return
        self._shut = True
        millis = int(timeout * 1000)
        try:
            self.tracer_provider.force_flush(millis)
            self.tracer_provider.shutdown()
        except Exception:
            log.exception("tracer provider shutdown failed")
        try:
            self.meter_provider.shutdown(timeout_millis=millis)
        except Exception:
            log.exception("meter provider shutdown failed")


# --- a meter provider that adds fixed attributes to every data point -----------------


def _merge(extra: Mapping[str, Any], attributes: Any) -> dict[str, Any]:
    merged = dict(attributes or {})
    for key, value in extra.items():
        merged.setdefault(key, value)
    return merged


class _Sync:
    def __init__(self, inner: Any, extra: Mapping[str, Any]) -> None:
        self._inner = inner
        self._extra = extra

    def add(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        self._inner.add(amount, _merge(self._extra, attributes), context)

    def record(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        self._inner.record(amount, _merge(self._extra, attributes), context)

    def set(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        self._inner.set(amount, _merge(self._extra, attributes), context)


def _wrap_callbacks(
    callbacks: Sequence[Callable[[CallbackOptions], Iterable[Observation]]] | None,
    extra: Mapping[str, Any],
) -> list[Callable[[CallbackOptions], Iterable[Observation]]]:
    def wrap(cb: Callable[[CallbackOptions], Iterable[Observation]]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def wrapped(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(o.value, _merge(extra, o.attributes), o.context) for o in cb(options)]

        return wrapped

    return [wrap(cb) for cb in callbacks or ()]


class _LabelledMeter:
    def __init__(self, inner: metrics_api.Meter, extra: Mapping[str, Any]) -> None:
        self._inner = inner
        self._extra = extra

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not name.startswith("create_"):
            return attr
        observable = name.startswith("create_observable_")

        def create(*args: Any, **kwargs: Any) -> Any:
            if observable:
                if len(args) > 1:
                    args = (args[0], _wrap_callbacks(args[1], self._extra), *args[2:])
                elif "callbacks" in kwargs:
                    kwargs["callbacks"] = _wrap_callbacks(kwargs["callbacks"], self._extra)
                return attr(*args, **kwargs)
            return _Sync(attr(*args, **kwargs), self._extra)

        return create


class LabelledMeterProvider(metrics_api.MeterProvider):
    """Wraps a MeterProvider so that every data point also carries ``extra`` attributes."""

    def __init__(self, inner: metrics_api.MeterProvider, extra: Mapping[str, Any]) -> None:
        self._inner = inner
        self._extra = dict(extra)

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> metrics_api.Meter:
        meter = self._inner.get_meter(name, version, schema_url, attributes)
        return _LabelledMeter(meter, self._extra)  # type: ignore[return-value]
