"""The agent's own /metrics renderer against the official OpenTelemetry Prometheus exporter.

Both readers sit on one MeterProvider and see the same data points; every series the
official exporter renders must come out of ours with the same name, labels (empty
values aside: Prometheus ignores them) and value, and nothing else may.
"""

from __future__ import annotations

import re

from failover_agent.prometheus_text import PrometheusTextReader
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

Series = tuple[str, frozenset[tuple[str, str]]]


def _series(text: str) -> dict[Series, float]:
    out: dict[Series, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if v != "")
            key = (sample.name, labels)
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))


def test_same_series_as_the_official_exporter() -> None:
    registry = CollectorRegistry(auto_describe=True)
    official = PrometheusMetricReader(registry=registry)
    ours = PrometheusTextReader()
    provider = MeterProvider(
        resource=Resource.create({"service.name": "t", "probe.location": "here"}),
        metric_readers=[official, ours],
        views=[View(instrument_name="probe.duration",
                    aggregation=ExplicitBucketHistogramAggregation((0.01, 0.1, 1.0)))],
    )
    meter = provider.get_meter("failover_agent")
    client = provider.get_meter("pytest_failover", "1.2", schema_url="https://opentelemetry.io/schemas/1.26.0")
    duration = meter.create_histogram("probe.duration", unit="s", description="per phase")
    for i, seconds in enumerate((0.002, 0.05, 0.5, 3.0, 0.05)):
        duration.record(seconds, {"phase": "total", "server.address": f"h{i % 2}", "n": i % 2})
    requests = client.create_counter("failover.requests", description='quote " and \\ and\nnewline')
    requests.add(3, {"failover.pool": "a", "odd": 'x"y\\z'})
    requests.add(1, {"failover.pool": "b", "flag": True})
    client.create_up_down_counter("in.flight").add(-2, {"k": "v"})
    client.create_histogram("plain").record(7)
    big = client.create_counter("big.total", unit="By")
    big.add(12_345_678_901)

    def gauge(_: CallbackOptions) -> list[Observation]:
        return [Observation(1.5e-7, {"a": "1"}), Observation(-3, {"a": "2"}),
                Observation(1_700_000_000.25, {"a": "3"})]

    meter.create_observable_gauge("expiry", [gauge], unit="s")
    meter.create_observable_counter("dropped", [lambda _: [Observation(4, {"signal": "spans"})]])

    expected_text = generate_latest(registry).decode()
    got_text = ours.render().decode()
    expected, got = _series(expected_text), _series(got_text)
    assert got == expected
    assert len(got) > 20
    assert _types(got_text) == _types(expected_text)
    # the histogram kept its three buckets, cumulative
    assert got[("probe_duration_seconds_bucket",
                frozenset({("phase", "total"), ("server_address", "h0"), ("n", "0"), ("le", "0.1"),
                           ("otel_scope_name", "failover_agent")}))] == 2
    provider.shutdown()


def test_empty_provider_renders_target_info_only() -> None:
    ours = PrometheusTextReader()
    provider = MeterProvider(metric_readers=[ours])
    text = ours.render().decode()
    assert all(line.startswith(("#", "target_info")) for line in text.splitlines())
    provider.shutdown()
