"""The agent's OpenTelemetry set-up: explicit SDK providers, never the global ones.

One :class:`Telemetry` owns a ``MeterProvider`` and a ``TracerProvider`` with:

- a Prometheus reader (:class:`agent.prometheus_text.PrometheusTextReader`, which
  renders the text exposition itself; served at ``/metrics`` by :mod:`agent.server`);
- optionally OTLP exporters (gRPC or HTTP) behind bounded queues; every span or
  metric batch that is dropped or fails to export is counted in
  ``failover.agent.telemetry.dropped``.

OTLP is configured by ``[exporters.otlp]`` in agent.toml and by the SDK's own ``OTEL_*``
variables (endpoints, protocol, headers, timeouts, ``OTEL_BSP_*``,
``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_{TRACES,METRICS}_EXPORTER``, ``OTEL_SDK_DISABLED``):
a key the file sets wins, a variable the environment sets comes next (the exporters and
processors read it themselves), the agent's defaults last. ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` win over the agent's ``service.name``.

The failover client receives :attr:`Telemetry.client_meter_provider`, a thin
wrapper that adds ``probe.location`` to every data point it records, so the
client's own metrics carry the probe's location like the agent's; when ``/metrics`` is the
only reader, its counters and gauges skip the SDK (:mod:`failover_agent.client_meter`). The agent's own meter
(scope ``failover_agent``) carries the package version and the schema URL.

Views shape what the failover client of the pool probes records (:func:`agent_views`): its
two histograms, ``failover.request.duration`` and ``http.client.request.duration``, are
dropped. A pool probe is one logical request: its outcome is ``failover.requests``, its
attempts are counted in ``failover.attempts`` (by result and ``error.type``), and each domain's
latency on the same path is the pinned probe's ``failover.probe.duration`` and phase gauges;
the spans, when exported, keep every attempt's duration. A histogram per domain and error
type was 5 series each (3 buckets, ``_sum``, ``_count``) and the SDK's largest per-series
state: without them a domain is named by at most 20 series in the default configuration
(``tests/agent/test_agent_cardinality.py`` counts them on a real run).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, cast

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_EXPORT_TIMEOUT,
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_BSP_SCHEDULE_DELAY,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_METRIC_EXPORT_INTERVAL,
    OTEL_METRIC_EXPORT_TIMEOUT,
    OTEL_SDK_DISABLED,
)
from opentelemetry.sdk.metrics import MeterProvider, ObservableGauge
from opentelemetry.sdk.metrics._internal.exemplar import ExemplarReservoir
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import DropAggregation, View
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from pytest_failover import __version__ as AGENT_VERSION
from pytest_failover.semconv import (
    AGENT_SCOPE,
    CLIENT_SCOPE,
    DURATION_BUCKETS,
    FAILOVER_AGENT_TELEMETRY_DROPPED,
    FAILOVER_REQUEST_DURATION,
    HTTP_CLIENT_REQUEST_DURATION,
    PROBE_LOCATION,
    SCHEMA_URL,
    SERVICE_NAME,
    SIGNAL_METRICS,
    SIGNAL_SPANS,
)

from .client_meter import ClientMeterProvider
from .config import OtlpConfig
from .prometheus_text import PrometheusTextReader, cardinality_limits

__all__ = [
    "AGENT_VERSION",
    "DROPPED_CLIENT_HISTOGRAMS",
    "DURATION_BUCKETS",
    "OtelEnvironmentError",
    "Telemetry",
    "agent_resource",
    "agent_views",
    "otlp_protocol",
    "otlp_wanted",
    "sdk_disabled",
]

log = logging.getLogger("failover_agent.telemetry")

# DURATION_BUCKETS (the semantic conventions' recommended buckets) live in pytest_failover.semconv.


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
        # the SDK's bounded deque (its size from agent.toml, OTEL_BSP_MAX_QUEUE_SIZE or 2048)
        self._queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)

    def on_end(self, span: ReadableSpan) -> None:
        queue = self._queue
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
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


# --- agent.toml and the OTEL_* environment ----------------------------------------------
#
# Precedence, setting by setting: a key written in agent.toml, then the OTEL_* variable
# (read by the SDK's exporters and processors themselves: the agent passes None), then the
# agent's own default (OtlpConfig's). Headers are merged: the environment's, then the file's.

_AGENT_DEFAULTS: Mapping[str, Any] = {
    name: info.default for name, info in OtlpConfig.model_fields.items() if name != "endpoint"
}
_SIGNAL_ENV: Mapping[str, str] = {SIGNAL_SPANS: "TRACES", SIGNAL_METRICS: "METRICS"}
"""Our signal names and the word the OTEL_* variables use for them."""
_PROTOCOLS: Mapping[str, Literal["grpc", "http"]] = {"grpc": "grpc", "http/protobuf": "http"}


class OtelEnvironmentError(ValueError):
    """An OTEL_* variable the agent cannot honour (the message names it and its value)."""


def _env(*names: str) -> str | None:
    """The first of ``names`` set to a non-blank value, as the SDK reads them."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: the SDK's providers hand out no-op tracers and meters."""
    return (_env(OTEL_SDK_DISABLED) or "").lower() == "true"


def _setting(cfg: OtlpConfig | None, key: str, *env: str) -> Any:
    """agent.toml's value if the file sets ``key``; None if one of ``env`` is set (the SDK
    reads it); else the agent's default."""
    if cfg is not None and key in cfg.model_fields_set:
        return getattr(cfg, key)
    if _env(*env) is not None:
        return None
    return _AGENT_DEFAULTS[key]


def _millis(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def otlp_wanted(cfg: OtlpConfig | None, signal: str) -> bool:
    """Whether ``signal`` goes out over OTLP: ``[exporters.otlp]`` in agent.toml, an
    ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT`` or ``OTEL_{TRACES,METRICS}_EXPORTER=otlp``
    turn it on; ``OTEL_{TRACES,METRICS}_EXPORTER=none`` and ``OTEL_SDK_DISABLED=true`` off."""
    word = _SIGNAL_ENV[signal]
    names = {n.strip().lower() for n in (_env(f"OTEL_{word}_EXPORTER") or "").split(",") if n.strip()}
    if "none" in names or sdk_disabled():
        return False
    if names - {"otlp"}:
        log.warning("OTEL_%s_EXPORTER=%s: the agent exports over OTLP only ('otlp' or 'none'); "
                    "%s ignored", word, ",".join(sorted(names)), ",".join(sorted(names - {"otlp"})))
    return (cfg is not None or "otlp" in names
            or _env(OTEL_EXPORTER_OTLP_ENDPOINT, f"OTEL_EXPORTER_OTLP_{word}_ENDPOINT") is not None)


def otlp_protocol(cfg: OtlpConfig | None, signal: str) -> Literal["grpc", "http"]:
    """``protocol`` from agent.toml, else ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL``
    (``grpc`` or ``http/protobuf``), else ``http``."""
    if cfg is not None and "protocol" in cfg.model_fields_set:
        return cfg.protocol
    word = _SIGNAL_ENV[signal]
    names = (f"OTEL_EXPORTER_OTLP_{word}_PROTOCOL", OTEL_EXPORTER_OTLP_PROTOCOL)
    raw = _env(*names)
    if raw is None:
        return cast(Literal["grpc", "http"], _AGENT_DEFAULTS["protocol"])
    if raw not in _PROTOCOLS:
        name = next(n for n in names if _env(n) is not None)
        raise OtelEnvironmentError(
            f"{name}={raw!r}: the agent's OTLP exporters speak 'grpc' or 'http/protobuf'")
    return _PROTOCOLS[raw]


def _grpc_headers(file_headers: Mapping[str, str], word: str) -> dict[str, str]:
    """The environment's headers with the file's on top, as the HTTP exporters merge them."""
    from opentelemetry.util.re import parse_env_headers

    raw = _env(f"OTEL_EXPORTER_OTLP_{word}_HEADERS", OTEL_EXPORTER_OTLP_HEADERS) or ""
    return {**parse_env_headers(raw, liberal=True), **file_headers}


def _otlp_exporter(cfg: OtlpConfig | None, signal: str) -> Any:
    """The OTLP span or metric exporter of ``signal``, built from agent.toml and the environment."""
    word = _SIGNAL_ENV[signal]
    protocol = otlp_protocol(cfg, signal)
    given = cfg.model_fields_set if cfg is not None else set()
    endpoint = cfg.endpoint.rstrip("/") if cfg is not None and cfg.endpoint is not None else None
    headers = dict(cfg.headers) if cfg is not None and "headers" in given else None
    timeout = _setting(cfg, "timeout", f"OTEL_EXPORTER_OTLP_{word}_TIMEOUT", OTEL_EXPORTER_OTLP_TIMEOUT)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GM
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GS

        insecure = cfg.insecure if cfg is not None and "insecure" in given else None
        grpc = GS if signal == SIGNAL_SPANS else GM
        return grpc(endpoint=endpoint, insecure=insecure, timeout=timeout,
                    headers=None if headers is None else _grpc_headers(headers, word))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HM
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HS

    http, path = (HS, "v1/traces") if signal == SIGNAL_SPANS else (HM, "v1/metrics")
    return http(endpoint=None if endpoint is None else f"{endpoint}/{path}", headers=headers, timeout=timeout)


def agent_resource(service_name: str, location: str) -> Resource:
    """The agent's resource: ``service_name`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` name another; ``probe.location`` always the agent's
    ``location`` (every data point carries it too)."""
    defaults = Resource.create({SERVICE_NAME: service_name})  # the SDK's detectors run here
    return defaults.merge(OTELResourceDetector().detect()).merge(Resource({PROBE_LOCATION: location}))


DROPPED_CLIENT_HISTOGRAMS = frozenset({FAILOVER_REQUEST_DURATION, HTTP_CLIENT_REQUEST_DURATION})
"""The failover client's histograms the agent drops (the module docstring says why)."""


def agent_views() -> list[View]:
    """The views of the agent's meter provider (disjoint: an instrument two views match would
    be exported twice): no exemplar reservoirs for the agent's own gauges, none of
    :data:`DROPPED_CLIENT_HISTOGRAMS` (the pool probes' client does not even record them:
    :class:`LabelledMeterProvider` hands it no-op histograms, as the SDK keeps a hashed key
    and attributes per series even of a dropped instrument, 1.5 MiB at 1,000 domains)."""
    return [
        View(instrument_type=ObservableGauge, meter_name=AGENT_SCOPE, exemplar_reservoir_factory=_no_exemplars),
        *(View(instrument_name=name, meter_name=CLIENT_SCOPE, aggregation=DropAggregation())
          for name in sorted(DROPPED_CLIENT_HISTOGRAMS)),
    ]


class _AgentMeterProvider(MeterProvider):
    """The SDK's MeterProvider, naming the agent's own scope in full: the package version
    and the semantic-conventions schema URL, whoever asks for the meter."""

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> metrics_api.Meter:
        if name == AGENT_SCOPE:
            version, schema_url = version or AGENT_VERSION, schema_url or SCHEMA_URL
        return super().get_meter(name, version, schema_url, attributes)


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
        prometheus_scope_info: bool = False,
    ) -> None:
        """``prometheus_scope_info``: the ``otel_scope_*`` labels on ``/metrics``
        (``[exporters.prometheus] scope_info_enabled``)."""
        self.location = location
        self.drops = _DropCounter()
        self.disabled = sdk_disabled()
        if self.disabled:
            log.warning("OTEL_SDK_DISABLED=true: the agent records no metrics and no spans "
                        "(/metrics is empty, nothing goes over OTLP); the checks and the status page run on")
        readers: list[MetricReader] = list(metric_readers)
        self.prometheus: PrometheusTextReader | None = None
        if prometheus:
            self.prometheus = PrometheusTextReader(scope_info=prometheus_scope_info)
            readers.append(self.prometheus)
        resource = agent_resource(service_name, location)
        self.tracer_provider = TracerProvider(resource=resource)
        span_exporters = list(span_exporters)
        for exporter in span_exporters:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        otlp_spans = otlp_wanted(otlp, SIGNAL_SPANS)
        self.spans_exported = not self.disabled and (bool(span_exporters) or otlp_spans)
        if otlp_spans:
            span_exporter = _otlp_exporter(otlp, SIGNAL_SPANS)
            self.tracer_provider.add_span_processor(
                _BoundedSpanProcessor(
                    _CountingSpanExporter(span_exporter, self.drops),
                    self.drops,
                    max_queue_size=_setting(otlp, "max_queue_size", OTEL_BSP_MAX_QUEUE_SIZE),
                    max_export_batch_size=_setting(otlp, "max_export_batch_size", OTEL_BSP_MAX_EXPORT_BATCH_SIZE),
                    schedule_delay_millis=_millis(_setting(otlp, "schedule_delay", OTEL_BSP_SCHEDULE_DELAY)),
                    export_timeout_millis=_millis(_setting(otlp, "timeout", OTEL_BSP_EXPORT_TIMEOUT)),
                )
            )
            log.info("OTLP span export to %s", getattr(span_exporter, "_endpoint", "?"))
        if otlp_wanted(otlp, SIGNAL_METRICS):
            metric_exporter = _otlp_exporter(otlp, SIGNAL_METRICS)
            readers.append(
                PeriodicExportingMetricReader(
                    _CountingMetricExporter(metric_exporter, self.drops),
                    export_interval_millis=_millis(_setting(otlp, "export_interval", OTEL_METRIC_EXPORT_INTERVAL)),
                    export_timeout_millis=_millis(_setting(otlp, "timeout", OTEL_METRIC_EXPORT_TIMEOUT)),
                    cardinality_limits=cardinality_limits(),
                )
            )
            log.info("OTLP metric export to %s", getattr(metric_exporter, "_endpoint", "?"))
        views = agent_views()
        if self.prometheus is not None:
            self.prometheus.resource = resource
        self.sdk_gauges = len(readers) > (self.prometheus is not None)
        """Whether a reader other than ``/metrics`` (OTLP, a test's) needs the agent's gauges in
        the SDK; ``/metrics`` renders them from the state (:meth:`gauge_options`)."""
        self.meter_provider = _AgentMeterProvider(resource=resource, metric_readers=readers, views=views)
        labelled = LabelledMeterProvider(self.meter_provider, {PROBE_LOCATION: location},
                                         dropped=DROPPED_CLIENT_HISTOGRAMS)
        self.client_meter_provider: metrics_api.MeterProvider = labelled
        """What the failover client records with: for ``/metrics`` alone, the client's counters
        and gauges without the SDK (:mod:`failover_agent.client_meter`); else the SDK's provider."""
        if self.prometheus is not None and not self.sdk_gauges and not self.disabled:
            client = ClientMeterProvider(labelled, {PROBE_LOCATION: location})
            self.prometheus.sources["client"] = client.families
            self.client_meter_provider = client
        self._shut = False

    @property
    def client_tracer_provider(self) -> trace_api.TracerProvider:
        """What the failover client traces with: the SDK provider when spans go somewhere,
        else a no-op one (building spans nobody exports costs ~5 % of the agent's CPU)."""
        if self.spans_exported:
            return self.tracer_provider
        return trace_api.NoOpTracerProvider()

    def gauge_options(self) -> dict[str, Any]:
        """How :class:`~failover_agent.metrics.AgentMetrics` of this telemetry serves its gauges:
        ``/metrics`` straight from the state (none while the SDK is disabled), the SDK only for
        the other readers."""
        return {"text": None if self.disabled else self.prometheus, "sdk": self.sdk_gauges}

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
    def __init__(self, inner: metrics_api.Meter, extra: Mapping[str, Any], dropped: frozenset[str]) -> None:
        self._inner = inner
        self._extra = extra
        self._dropped = dropped
        # The SDK hands every creator of an instrument the same instrument (by name, kind,
        # unit); its wrapper is shared likewise (500 pool probes' transports, 500 wrappers each)
        self._sync: dict[int, tuple[Any, _Sync]] = {}

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
            if name == "create_histogram" and (args[0] if args else kwargs.get("name")) in self._dropped:
                return metrics_api.NoOpHistogram(args[0] if args else kwargs["name"])
            instrument = attr(*args, **kwargs)
            known = self._sync.get(id(instrument))
            if known is None or known[0] is not instrument:
                known = self._sync[id(instrument)] = (instrument, _Sync(instrument, self._extra))
            return known[1]

        return create


class LabelledMeterProvider(metrics_api.MeterProvider):
    """Wraps a MeterProvider so that every data point also carries ``extra`` attributes;
    histograms named in ``dropped`` are no-ops (never recorded, so the SDK keeps nothing of them)."""

    def __init__(self, inner: metrics_api.MeterProvider, extra: Mapping[str, Any],
                 dropped: frozenset[str] = frozenset()) -> None:
        self._inner = inner
        self._extra = dict(extra)
        self._dropped = dropped
        self._meters: dict[tuple[str, str | None, str | None], tuple[Any, _LabelledMeter]] = {}

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> metrics_api.Meter:
        meter = self._inner.get_meter(name, version, schema_url, attributes)
        # _LabelledMeter is a Meter by delegation (__getattr__), not by inheritance
        if attributes:  # a meter with attributes is its own scope: not shared
            return _LabelledMeter(meter, self._extra, self._dropped)  # type: ignore[return-value]  # a Meter by delegation
        key = (name, version, schema_url)
        known = self._meters.get(key)
        if known is None or known[0] is not meter:  # the SDK's meters are shared by scope too
            known = self._meters[key] = (meter, _LabelledMeter(meter, self._extra, self._dropped))
        return known[1]  # type: ignore[return-value]  # a Meter by delegation (above)
