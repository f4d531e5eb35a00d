"""A steered request says so on its span: ``failover.steering``."""

from __future__ import annotations

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from pytest_failover import FailoverTransport, Pool
from pytest_failover.semconv import FAILOVER_STEERING, STEERING_AFFINITY, STEERING_WEIGHT

from .servers import LoopbackServer


def _steering_of_each_request(pool: Pool, extensions: dict[str, object] | None = None) -> list[object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with httpx.Client(transport=FailoverTransport([pool], tracer_provider=provider)) as client:
        for _ in range(3):
            assert client.get(pool.domains[0].url + "/v1/ping", extensions=extensions or {}).status_code == 200
    provider.shutdown()
    return [
        (span.attributes or {}).get(FAILOVER_STEERING)
        for span in exporter.get_finished_spans()
        if span.kind is SpanKind.INTERNAL
    ]


def test_a_weighted_canary_request_carries_the_weight(servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"].url(), servers["b"].url()
    assert _steering_of_each_request(Pool("api", [a, b], weights={b: 100})) == [STEERING_WEIGHT] * 3


def test_an_affinity_key_carries_affinity(servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"].url(), servers["b"].url()
    # One affinity domain, behind the primary: the key always puts it first, whatever the
    # ports (a ranking that keeps the pool's own order changes nothing, and says nothing).
    pool = Pool("api", [a, b], affinity_domains=[b])
    steering = _steering_of_each_request(pool, {"failover": {"affinity": "user-42"}})
    assert steering == [STEERING_AFFINITY] * 3


def test_an_unsteered_request_has_no_steering(servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"].url(), servers["b"].url()
    assert _steering_of_each_request(Pool("api", [a, b])) == [None] * 3
