"""Beside opentelemetry-instrumentation-httpx, each attempt is one CLIENT span and one
duration data point (ours), and the suppression key silences the transport."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Pool
from pytest_failover.semconv import CLIENT_SCOPE, HTTP_CLIENT_REQUEST_DURATION

from .servers import LoopbackServer, closed_port


class Sdk:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def client_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.kind is SpanKind.CLIENT]

    def duration_scopes(self) -> list[str]:
        """The scope of every ``http.client.request.duration`` data point."""
        data = self.reader.get_metrics_data()
        return [
            sm.scope.name
            for rm in (data.resource_metrics if data else [])
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == HTTP_CLIENT_REQUEST_DURATION
            for _ in metric.data.data_points
        ]


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    sdk = Sdk()
    HTTPXClientInstrumentor().instrument(
        tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider
    )
    yield sdk
    HTTPXClientInstrumentor().uninstrument()
    sdk.tracer_provider.shutdown()
    sdk.meter_provider.shutdown()


def _pool(servers: dict[str, LoopbackServer]) -> tuple[Pool, str]:
    dead = f"http://127.0.0.1:{closed_port()}"
    return Pool("api", [dead, servers["a"].url()]), dead


def _kwargs(sdk: Sdk) -> dict[str, Any]:
    return {"tracer_provider": sdk.tracer_provider, "meter_provider": sdk.meter_provider}


def test_the_instrumentation_is_live_for_a_plain_client(servers: dict[str, LoopbackServer], sdk: Sdk) -> None:
    """The premise of the tests below: instrumented, a plain httpx client makes a CLIENT span."""
    with httpx.Client() as client:
        assert client.get(servers["a"].url() + "/v1/ping").status_code == 200
    [span] = sdk.client_spans()
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "opentelemetry.instrumentation.httpx"


def test_sync_each_attempt_is_one_client_span(servers: dict[str, LoopbackServer], sdk: Sdk) -> None:
    pool, dead = _pool(servers)
    with httpx.Client(transport=FailoverTransport([pool], **_kwargs(sdk))) as client:
        assert client.get(dead + "/v1/ping").status_code == 200
    spans = sdk.client_spans()
    assert len(spans) == 2  # the refused attempt and the answered one
    assert {s.instrumentation_scope.name for s in spans if s.instrumentation_scope} == {CLIENT_SCOPE}
    assert sdk.duration_scopes() == [CLIENT_SCOPE, CLIENT_SCOPE]


def test_async_each_attempt_is_one_client_span(servers: dict[str, LoopbackServer], sdk: Sdk) -> None:
    pool, dead = _pool(servers)

    async def go() -> int:
        async with httpx.AsyncClient(transport=AsyncFailoverTransport([pool], **_kwargs(sdk))) as client:
            return (await client.get(dead + "/v1/ping")).status_code

    assert asyncio.run(go()) == 200
    spans = sdk.client_spans()
    assert len(spans) == 2
    assert {s.instrumentation_scope.name for s in spans if s.instrumentation_scope} == {CLIENT_SCOPE}
    assert sdk.duration_scopes() == [CLIENT_SCOPE, CLIENT_SCOPE]


def test_the_instrumentation_speaks_again_after_an_attempt(
    servers: dict[str, LoopbackServer], sdk: Sdk
) -> None:
    """The suppression lasts one attempt: a plain request afterwards is instrumented."""
    pool, dead = _pool(servers)
    with httpx.Client(transport=FailoverTransport([pool], **_kwargs(sdk))) as client:
        client.get(dead + "/v1/ping")
    with httpx.Client() as plain:
        plain.get(servers["a"].url() + "/v1/ping")
    scopes = [s.instrumentation_scope.name for s in sdk.client_spans() if s.instrumentation_scope]
    assert scopes.count("opentelemetry.instrumentation.httpx") == 1


def test_suppressed_instrumentation_silences_the_transport(
    servers: dict[str, LoopbackServer], sdk: Sdk
) -> None:
    """What an exporter does for its own requests: no span, no metric from us either."""
    pool, dead = _pool(servers)
    with httpx.Client(transport=FailoverTransport([pool], **_kwargs(sdk))) as client, suppress_instrumentation():
        assert client.get(dead + "/v1/ping").status_code == 200
    assert sdk.spans.get_finished_spans() == ()
    assert sdk.duration_scopes() == []
