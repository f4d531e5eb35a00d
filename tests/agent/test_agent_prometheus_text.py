"""The agent's own /metrics renderer against the official OpenTelemetry Prometheus exporter.

Both readers sit on one MeterProvider and see the same data points; every series the
official exporter renders must come out of ours with the same name, labels (empty
values aside: Prometheus ignores them) and value, and nothing else may.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest
from failover_agent.checks.readiness import CertInfo, ReadinessResult
from failover_agent.checks.result import ProbeResult
from failover_agent.client_meter import ClientMeterProvider
from failover_agent.metrics import AgentMetrics
from failover_agent.prometheus_text import PrometheusTextReader
from failover_agent.state import AgentState, ControlStatus, DomainStatus, PoolStatus
from failover_agent.telemetry import Telemetry
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, NoOpHistogram, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pytest_failover import Domain, FailoverTransport, Policy, Pool
from pytest_failover._telemetry import Telemetry as ClientTelemetry

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


class _NoDrops:
    def snapshot(self) -> dict[str, int]:
        return {}


def _https_pool_state() -> AgentState:
    """A pool of an https primary and two backups on one host (ports 443 and 8443), every
    check reported: the most series a domain can have."""
    now = time.time()
    phases = {"dns": 0.001, "connect": 0.002, "tls": 0.01, "ttfb": 0.02, "transfer": 0.001, "total": 0.034}
    state = AgentState(location="lab")
    urls = ("https://api.example.com", "https://api2.example.com", "https://api2.example.com:8443")
    for i, url in enumerate(urls):
        d = DomainStatus("api", url, url.split("//")[1].split(":")[0], is_primary=i == 0)
        d.record(ProbeResult(True, 200, None, 0.034, phases, cert_not_after=now + 86400 * (10 + i)))
        if i:
            checks = {"cert": (True, ""), "cors": (True, ""), "health": (True, "")}
            d.readiness = ReadinessResult(checks, CertInfo(now + 86400 * 30, now + 86400 * 20, True), at=now - 60)
        state.domains[("api", url)] = d
    state.pools["api"] = PoolStatus("api", urls[0], "api.example.com", urls,
                                    last=ProbeResult(True, 200, None, 0.03, served_by=urls[0]))
    state.control = ControlStatus(version=3, issued_at=now)
    return state


def test_a_domain_has_at_most_25_series() -> None:
    """Every series of an https backup with every check on, counted in the rendered text: at most 25,
    and two ports of one host are two domains."""
    reader = PrometheusTextReader()
    provider = MeterProvider(metric_readers=[reader])
    state = _https_pool_state()
    metrics = AgentMetrics(provider, lambda: state, _NoDrops())
    for d in state.domains.values():
        assert d.last is not None
        metrics.record_probe(d, d.last)
    samples = _series(reader.render().decode())
    provider.shutdown()
    per_domain: dict[tuple[str, str], int] = {}
    for _name, labels in samples:
        label = dict(labels)
        if "server_address" in label:
            key = (label["server_address"], label["server_port"])
            per_domain[key] = per_domain.get(key, 0) + 1
    assert set(per_domain) == {("api.example.com", "443"), ("api2.example.com", "443"), ("api2.example.com", "8443")}
    assert max(per_domain.values()) <= 15, per_domain
    # the worst case, counted (see metrics.py): the probe's duration and its five phases;
    # success, status, serving, certificate expiry, control; three readiness checks
    worst = 1 + 5 + 5 + 3
    assert per_domain[("api2.example.com", "8443")] == worst == 14
    names = {name for name, _ in samples}
    assert "failover_probe_phase_duration_seconds" in names
    assert not any("failover_domain" in dict(labels) or "job" in dict(labels) for _, labels in samples)


def test_certificate_expiry_is_the_freshest_reading_as_a_unix_time() -> None:
    """Every https domain (primary included) reports its chain's earliest expiry as a Unix time:
    the pinned probe's reading, unless the readiness check read the certificate later."""
    reader = PrometheusTextReader()
    provider = MeterProvider(metric_readers=[reader])
    state = _https_pool_state()
    metrics = AgentMetrics(provider, lambda: state, _NoDrops())
    primary, backup, other = state.domains.values()
    assert primary.last is not None and backup.last is not None and other.last is not None
    for d in (primary, backup, other):
        assert d.last is not None
        metrics.record_probe(d, d.last)
    assert other.readiness is not None and other.readiness.cert is not None
    later = other.readiness.cert
    other.readiness = ReadinessResult(other.readiness.checks, later, at=time.time() + 5)
    samples = _series(reader.render().decode())
    provider.shutdown()
    expiry = {dict(labels)["server_port"] + dict(labels)["server_address"]: value
              for (name, labels), value in samples.items() if name == "failover_tls_cert_expiry_timestamp_seconds"}
    assert expiry == {"443api.example.com": primary.last.cert_not_after,
                      "443api2.example.com": backup.last.cert_not_after,
                      "8443api2.example.com": later.chain_not_after}


# --- what the agent's own provider makes of it ------------------------------------------


def _labels_of(text: str) -> set[str]:
    return {key for _, labels in _series(text) for key, _ in labels}


def test_scope_labels_are_left_out_unless_asked_for() -> None:
    """scope_info=False (the agent's default) drops every otel_scope_* label and nothing else;
    the series are the same ones."""
    plain, scoped = PrometheusTextReader(scope_info=False), PrometheusTextReader()
    provider = MeterProvider(metric_readers=[plain, scoped])
    meter = provider.get_meter("failover_agent", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.26.0")
    meter.create_counter("checks").add(2, {"failover.pool": "api"})
    without, with_scope = plain.render().decode(), scoped.render().decode()
    provider.shutdown()
    assert not {k for k in _labels_of(without) if k.startswith("otel_scope_")}
    assert {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"} <= _labels_of(with_scope)
    strip = {(name, frozenset(kv for kv in labels if not kv[0].startswith("otel_scope_"))): v
             for (name, labels), v in _series(with_scope).items()}
    assert _series(without) == strip


def test_the_agent_s_views_shape_the_failover_client_s_metrics() -> None:
    """In the agent, the client's two histograms (failover.request.duration and
    http.client.request.duration) are dropped, its counters kept; the probe's duration is a
    gauge; and /metrics has no scope label (OTLP keeps the scopes)."""
    telemetry = Telemetry(location="lab")
    assert telemetry.prometheus is not None
    client = ClientTelemetry(meter_provider=telemetry.client_meter_provider)
    domain = Domain.parse("https://api.example.com")
    client.request_duration.record(0.2, {"failover.pool": "api", "failover.outcome": "success"})
    client.attempt_duration.record(0.2, {"failover.pool": "api", "server.address": domain.host,
                                         "server.port": 443, "http.request.method": "GET"})
    client.attempts.add(1, {"failover.pool": "api", "server.address": domain.host,
                            "failover.attempt.result": "success"})
    state = _https_pool_state()
    metrics = AgentMetrics(telemetry.meter_provider, lambda: state, _NoDrops())
    for d in state.domains.values():
        assert d.last is not None
        metrics.record_probe(d, d.last)
    text = telemetry.prometheus.render().decode()
    telemetry.shutdown()
    samples = _series(text)
    names = {name for name, _ in samples}
    assert not any(name.startswith("failover_request_duration") for name in names)
    assert not any(name.startswith("http_client_request_duration") for name in names)
    assert not any(name.startswith("failover_probe_duration_seconds_") for name in names)  # no histogram
    assert samples[("failover_attempts_total", frozenset({
        ("failover_pool", "api"), ("server_address", "api.example.com"), ("failover_attempt_result", "success"),
        ("probe_location", "lab")}))] == 1
    durations = {dict(labels)["server_port"]: v for (n, labels), v in samples.items()
                 if n == "failover_probe_duration_seconds"}
    assert set(durations) == {"443", "8443"} and all(v > 0 for v in durations.values())
    assert not {k for k in _labels_of(text) if k.startswith("otel_scope_")}


def test_clients_of_one_labelled_provider_share_their_meter_and_instruments() -> None:
    """Many failover clients on the agent's client meter provider (one per pool) get one
    labelled meter per scope and one wrapper per instrument, whose records still carry the
    location and add up in one series."""
    telemetry = Telemetry(location="lab")
    assert telemetry.prometheus is not None
    provider = telemetry.client_meter_provider
    first, second = ClientTelemetry(meter_provider=provider), ClientTelemetry(meter_provider=provider)
    assert provider.get_meter("x") is provider.get_meter("x") and provider.get_meter("x") is not provider.get_meter("y")
    assert first.attempts is second.attempts
    attrs: dict[str, str | int] = {"failover.pool": "api", "server.address": "api.example.com",
                                   "server.port": 443, "failover.attempt.result": "success"}
    first.attempts.add(1, attrs)
    second.attempts.add(1, attrs)
    samples = _series(telemetry.prometheus.render().decode())
    telemetry.shutdown()
    labels = frozenset({("failover_pool", "api"), ("server_address", "api.example.com"), ("server_port", "443"),
                        ("failover_attempt_result", "success"), ("probe_location", "lab")})
    assert samples[("failover_attempts_total", labels)] == 2


# --- the gauges rendered from the state, not the SDK ---------------------------------------


def _render(state: AgentState, scope_info: bool, *, sdk: bool) -> dict[Series, float]:
    """The agent's /metrics series for ``state`` (but target_info: each Telemetry is its own
    instance), its gauges through the SDK (observable instruments) or read from the state."""
    telemetry = Telemetry(location="lab", prometheus_scope_info=scope_info)
    assert telemetry.prometheus is not None
    metrics = AgentMetrics(telemetry.meter_provider, lambda: state, _NoDrops(),
                           text=None if sdk else telemetry.prometheus, sdk=sdk)
    for d in state.domains.values():
        assert d.last is not None
        metrics.record_probe(d, d.last)
    samples = _series(telemetry.prometheus.render().decode())
    telemetry.shutdown()
    return {series: value for series, value in samples.items() if series[0] != "target_info"}


@pytest.mark.parametrize("scope_info", [False, True])
def test_gauges_from_the_state_render_as_the_sdk_would(scope_info: bool) -> None:
    """/metrics with the gauges read from the state (the agent's way, no SDK state for them)
    has the very series and values the SDK's collection gives, scope labels included."""
    state = _https_pool_state()
    direct = _render(state, scope_info, sdk=False)
    assert direct == _render(state, scope_info, sdk=True)
    assert len([s for s in direct if s[0] == "failover_probe_success"]) == 3
    assert any(("otel_scope_name", "failover_agent") in labels for _, labels in direct) is scope_info


def test_target_info_is_rendered_when_the_sdk_collected_nothing() -> None:
    """A publisher or an agent before its first pool probe: only gauges from the state, and
    target_info still names the resource."""
    state = AgentState(location="lab")
    telemetry = Telemetry(location="lab")
    assert telemetry.prometheus is not None
    AgentMetrics(telemetry.meter_provider, lambda: state, _NoDrops(), **telemetry.gauge_options())
    text = telemetry.prometheus.render().decode()
    telemetry.shutdown()
    assert text.startswith("# HELP target_info Target metadata\n") and 'service_name="failover-agent"' in text


def test_the_agent_keeps_its_gauges_out_of_the_sdk_unless_another_reader_needs_them() -> None:
    """Telemetry with /metrics alone: the gauges are not SDK instruments (an in-memory reader
    added later sees none of them); with another reader (OTLP's place) they are, and /metrics
    still shows each series once."""
    alone = Telemetry(location="lab")
    assert alone.gauge_options() == {"text": alone.prometheus, "sdk": False}
    extra = InMemoryMetricReader()
    both = Telemetry(location="lab", metric_readers=[extra])
    assert both.gauge_options() == {"text": both.prometheus, "sdk": True}
    state = _https_pool_state()
    for telemetry in (alone, both):
        metrics = AgentMetrics(telemetry.meter_provider, lambda: state, _NoDrops(), **telemetry.gauge_options())
        for d in state.domains.values():
            assert d.last is not None
            metrics.record_probe(d, d.last)
    assert alone.prometheus is not None and both.prometheus is not None
    texts = [t.prometheus.render().decode() for t in (alone, both)]  # type: ignore[union-attr]  # asserted above
    data = extra.get_metrics_data()
    alone.shutdown()
    both.shutdown()
    assert _series(texts[0]) == _series(texts[1])
    lines = [line for line in texts[1].splitlines() if line.startswith("failover_probe_success{")]
    assert len(lines) == len(set(lines)) == 3
    assert data is not None
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "failover.probe.success" in names and "failover.probe.phase.duration" in names


def _primary_refuses(request: httpx.Request) -> httpx.Response:
    """An in-process answer: the primaries (``eu``, ``us``) refuse, their backups answer."""
    if "-2." not in request.url.host:
        raise httpx.ConnectError("refused", request=request)
    return httpx.Response(200, request=request)


@pytest.mark.parametrize("scope_info", [False, True])
def test_the_client_s_metrics_skip_the_sdk_for_metrics_alone_and_render_as_it_would(scope_info: bool) -> None:
    """With /metrics alone, the failover client's counters and gauges are kept without the SDK,
    histograms still go through it (its views drop two, keep the resolver's); /metrics shows
    the very series and values the SDK's path (another reader present) gives. The breaker
    gauge is observed: each transport's domains, read as the page is rendered."""
    alone = Telemetry(location="lab", prometheus_scope_info=scope_info)
    extra = InMemoryMetricReader()
    both = Telemetry(location="lab", prometheus_scope_info=scope_info, metric_readers=[extra])
    assert isinstance(alone.client_meter_provider, ClientMeterProvider)
    assert not isinstance(both.client_meter_provider, ClientMeterProvider)
    attempt: dict[str, str | int] = {"failover.pool": "api", "server.address": "api.example.com",
                                     "server.port": 443, "failover.attempt.result": "success"}
    texts = []
    for telemetry in (alone, both):
        client = ClientTelemetry(meter_provider=telemetry.client_meter_provider)
        again = ClientTelemetry(meter_provider=telemetry.client_meter_provider)  # a second pool's transport
        client.attempts.add(1, attempt)
        again.attempts.add(2, dict(reversed(list(attempt.items()))))  # the same series, keys in another order
        client.attempts.add(-1, attempt)  # a counter never goes down: dropped, as the SDK drops it
        client.requests.add(1, {"failover.pool": "api", "failover.outcome": "success"})
        transports = [  # two pools' transports, each with a primary that refuses
            FailoverTransport([Pool(name, [f"https://{name}.example.com", f"https://{name}-2.example.com"])],
                              Policy(breaker_threshold=1), transport=httpx.MockTransport(_primary_refuses),
                              meter_provider=telemetry.client_meter_provider)
            for name in ("eu", "us")
        ]
        httpx.Client(transport=transports[0]).get("https://eu.example.com/")  # its primary's breaker opens
        assert isinstance(client.attempt_duration, NoOpHistogram)  # dropped: the SDK keeps nothing of it
        client.attempt_duration.record(0.2, {"failover.pool": "api"})
        client.resolve_duration.record(0.01, {"failover.pool": "api"})  # kept, through the SDK
        assert telemetry.prometheus is not None
        texts.append(telemetry.prometheus.render().decode())
        for transport in transports:
            transport.close()
        assert "failover_breaker_state{" in telemetry.prometheus.render().decode()  # closed: the last reading,
        assert "failover_breaker_state{" not in telemetry.prometheus.render().decode()  # once
    data = extra.get_metrics_data()
    alone.shutdown()
    both.shutdown()
    series = [{k: v for k, v in _series(text).items() if k[0] != "target_info"} for text in texts]
    assert series[0] == series[1]
    attempts = {labels: v for (name, labels), v in series[0].items()
                if name == "failover_attempts_total" and ("failover_pool", "api") in labels}
    assert list(attempts.values()) == [3]
    breakers = {(dict(labels)["failover_domain"]): v for (name, labels), v in series[0].items()
                if name == "failover_breaker_state"}
    assert breakers == {"https://eu.example.com": 2, "https://eu-2.example.com": 0,
                        "https://us.example.com": 0, "https://us-2.example.com": 0}
    assert any(name.startswith("failover_resolve_duration_seconds_bucket") for name, _ in series[0])
    assert not any(name.startswith("http_client_request_duration") for name, _ in series[0])
    assert texts[0].count("# TYPE failover_attempts_total counter") == 1
    assert data is not None
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "failover.attempts" in names  # the SDK's path, where another reader needs them
