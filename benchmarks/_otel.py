"""The OpenTelemetry SDK set-up shared by the benchmarks: real providers, real batch
export, exporters that count instead of sending (so nothing grows and nothing leaves
the machine). The global providers are never set: each variant gets its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Sdk:
    tracer_provider: Any
    meter_provider: Any
    spans: Any  # CountingSpanExporter

    def flush(self) -> None:
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def make_sdk() -> Sdk:
    """TracerProvider + BatchSpanProcessor and MeterProvider + PeriodicExportingMetricReader."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        MetricsData,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class CountingSpanExporter(SpanExporter):
        def __init__(self) -> None:
            self.count = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.count += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    class NullMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__()
            self.points = 0

        def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
            for rm in metrics_data.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        self.points += len(metric.data.data_points)
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    spans = CountingSpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    reader = PeriodicExportingMetricReader(NullMetricExporter(), export_interval_millis=60_000)
    meter_provider = MeterProvider(metric_readers=[reader])
    return Sdk(tracer_provider, meter_provider, spans)
