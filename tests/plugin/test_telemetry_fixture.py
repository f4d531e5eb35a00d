"""The ``failover_telemetry`` fixture: per-test capture of the failover client's spans and metrics."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from pytest_failover import ExponentialBackoff, FailoverTransport, Policy, Pool, telemetry_capture
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.telemetry_capture import FailoverTelemetry, MetricPoint

POLICY = Policy(
    schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
    attempt_timeout=0.5,
    deadline=2.0,
    breaker_threshold=1,
)


def api_pool() -> Pool:
    return Pool("api", ["https://api.example.com", "https://api2.example.com"])


def test_helpers_read_a_failover(
    fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """requests/attempts/switches/breaker transitions/outcome/metric describe what the client did."""
    fake_domains.add("api.example.com")
    fake_domains.add("api2.example.com")
    with httpx.Client(transport=FailoverTransport([api_pool()], POLICY)) as client:
        client.get("https://api.example.com/v1/rooms?token=secret")
        fake_domains.fail("api.example.com", "status", 503)
        client.get("https://api.example.com/v1/rooms")

    [healthy, failed_over] = failover_telemetry.requests("api")
    assert (healthy.method, healthy.url, healthy.outcome) == (
        "GET",
        "https://api.example.com/v1/rooms",
        "success",
    )
    assert [(a.number, a.domain, a.status_code, a.error_type, a.failed) for a in failed_over.attempts] == [
        (1, "https://api.example.com", 503, "503", True),
        (2, "https://api2.example.com", 200, None, False),
    ]
    assert failed_over.attempts[1].resend_count == 1
    assert [(s.from_domain, s.to_domain, s.reason) for s in failover_telemetry.switches()] == [
        ("https://api.example.com", "https://api2.example.com", "503")
    ]
    assert [(t.domain, t.from_state, t.to_state) for t in failover_telemetry.breaker_transitions()] == [
        ("https://api.example.com", "closed", "open")
    ]
    assert failover_telemetry.outcomes() == ["success", "success"]
    assert failover_telemetry.outcome == "success"
    assert failover_telemetry.requests("other") == []
    assert len(failover_telemetry.attempts(domain="https://api2.example.com")) == 1

    assert failover_telemetry.metric("failover.requests", pool="api") == 2
    assert failover_telemetry.metric("failover.attempts", result="failure") == 1
    assert failover_telemetry.metric("failover.attempts", {"error.type": "503"}) == 1
    assert failover_telemetry.metric("http.client.request.duration", server_address="api.example.com") == 2
    assert failover_telemetry.metric("failover.switches", reason="503") == 1
    assert failover_telemetry.metric("failover.breaker.state", domain="https://api.example.com") == 2
    [duration] = failover_telemetry.metric_points("failover.request.duration")
    assert isinstance(duration, MetricPoint)
    assert (duration.kind, duration.count) == ("histogram", 2)


def test_explicit_providers_feed_the_same_capture(
    fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """A transport given the fixture's providers is captured like one on the global providers."""
    fake_domains.add("api.example.com")
    transport = FailoverTransport(
        [api_pool()],
        POLICY,
        tracer_provider=failover_telemetry.tracer_provider,
        meter_provider=failover_telemetry.meter_provider,
    )
    with httpx.Client(transport=transport) as client:
        client.get("https://api.example.com/")
    assert failover_telemetry.outcome == "success"
    assert failover_telemetry.metric("failover.requests", outcome="success") == 1


def test_misuse_is_a_clear_error(failover_telemetry: FailoverTelemetry) -> None:
    """No request yet, a misspelt metric or an unknown keyword each raise with the fix in the message."""
    with pytest.raises(LookupError, match="saw no failover request in this test"):
        _ = failover_telemetry.outcome
    with pytest.raises(ValueError, match=r"unknown metric 'failover.request': the failover client emits \["):
        failover_telemetry.metric("failover.request")
    with pytest.raises(TypeError, match="metric\\(\\) got an unknown keyword 'host'"):
        failover_telemetry.metric("failover.requests", host="api.example.com")
    assert failover_telemetry.metric("failover.requests") == 0


def test_each_test_sees_only_its_own_data(downstream: pytest.Pytester) -> None:
    """Spans and metrics are cleared between tests, whatever order they run in, and a client
    an earlier test left open and dropped is not read by the gauges."""
    downstream.makepyfile(
        """
        import gc

        import httpx
        import pytest
        from pytest_failover import FailoverTransport, Pool

        def test_a_client_left_open(fake_domains):
            # paused until the next test has read its gauges: its capture, not a timely
            # collection, must keep this client's breaker out of them
            gc.disable()
            fake_domains.add("api0.example.com")
            pool = Pool("api", ["https://api0.example.com"])
            client = httpx.Client(transport=FailoverTransport([pool]))
            client.get("https://api0.example.com/")
            # dropped in a reference cycle, as a caught exception's traceback makes one
            # (``pytest.raises(...) as info``: the frame holds ``info``, ``info`` the frame)
            cycle = [client]
            cycle.append(cycle)

        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_requests(fake_domains, failover_telemetry, n):
            host = f"api{n}.example.com"
            fake_domains.add(host)
            pool = Pool("api", [f"https://{host}"])
            with httpx.Client(transport=FailoverTransport([pool])) as client:
                for _ in range(n):
                    client.get(f"https://{host}/")
            assert len(failover_telemetry.requests()) == n
            assert failover_telemetry.metric("failover.requests") == n
            assert failover_telemetry.metric("failover.attempts", result="success") == n
            gauges = failover_telemetry.metric_points("failover.breaker.state")
            assert [point.attributes["server.address"] for point in gauges] == [host]
            gc.enable()
        """
    )
    # (a process of its own, as a suite's: this one's other tests may leave clients open)
    downstream.runpytest_subprocess().assert_outcomes(passed=4)


def test_a_client_kept_open_costs_no_collection_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's client kept open across tests: the first capture after it was built
    collects garbage (an earlier test's client may lie in a cycle), the next ones do not."""
    collections: list[tuple[int, ...]] = []
    monkeypatch.setattr(telemetry_capture, "gc", SimpleNamespace(collect=lambda *args: collections.append(args)))
    transport = FailoverTransport([api_pool()], POLICY)  # read by the gauge from now on
    try:
        for _ in range(3):
            with telemetry_capture.capture_for_test():
                pass
    finally:
        transport.close()
    assert collections == [()]


def test_coexists_with_an_installed_provider(downstream: pytest.Pytester) -> None:
    """With the project's own SDK providers already global, spans go to both; metrics via the fixture's provider."""
    downstream.makeconftest(
        """
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        PROJECT_SPANS = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(PROJECT_SPANS))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider())
        """
    )
    downstream.makepyfile(
        """
        import httpx
        from conftest import PROJECT_SPANS
        from pytest_failover import FailoverTransport, Pool

        def test_both_see_the_spans(fake_domains, failover_telemetry):
            assert failover_telemetry.captures_global_traces
            assert not failover_telemetry.captures_global_metrics
            fake_domains.add("api.example.com")
            pool = Pool("api", ["https://api.example.com"])
            transport = FailoverTransport([pool], meter_provider=failover_telemetry.meter_provider)
            with httpx.Client(transport=transport) as client:
                client.get("https://api.example.com/")
            assert failover_telemetry.outcome == "success"
            assert failover_telemetry.metric("failover.requests") == 1
            assert "failover api" in [span.name for span in PROJECT_SPANS.get_finished_spans()]
        """
    )
    # A fresh process: the global providers can only be set once per process.
    downstream.runpytest_subprocess().assert_outcomes(passed=1)
