"""Exact span and metric names and attributes, read with the SDK's in-memory exporter and reader."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pytest_failover import ExponentialBackoff, FailoverTransport, Policy, Pool

from .servers import LoopbackServer, closed_port


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    kwargs: dict[str, Any]

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.reader.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        out += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, reader, {"tracer_provider": tracer_provider, "meter_provider": meter_provider})
    tracer_provider.shutdown()
    meter_provider.shutdown()


def policy(**kw: Any) -> Policy:
    return Policy(schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3), **kw)


def test_logical_span_with_one_client_span_per_attempt(
    make_client: Any, servers: dict[str, LoopbackServer], otel: Otel
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    a = servers["a"]
    client = make_client([Pool("api", [dead, a.url()])], policy(), **otel.kwargs)
    client.request(
        "GET", dead + "/v1/rooms?token=secret", headers={"Authorization": "Bearer x", "Cookie": "c=1"}
    )
    spans = otel.finished()
    [logical] = [s for s in spans if s.kind is SpanKind.INTERNAL]
    attempts = sorted((s for s in spans if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0)
    assert logical.name == "failover api"
    assert dict(logical.attributes or {}) == {
        "http.request.method": "GET",
        "url.full": f"{dead}/v1/rooms",
        "failover.pool": "api",
        "failover.outcome": "success",
        "failover.attempts": 2,
        "failover.domain": a.url(),
        "http.response.status_code": 200,
    }
    assert [s.name for s in attempts] == ["GET", "GET"]
    assert all(s.parent is not None and s.parent.span_id == logical.context.span_id for s in attempts)
    first, second = (dict(s.attributes or {}) for s in attempts)
    assert first == {
        "http.request.method": "GET",
        "server.address": "127.0.0.1",
        "server.port": int(dead.rsplit(":", 1)[1]),
        "url.full": f"{dead}/v1/rooms",
        "failover.pool": "api",
        "failover.domain": dead,
        "failover.attempt": 1,
        "error.type": "connection_refused",
    }
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert second["http.request.resend_count"] == 1 and second["http.response.status_code"] == 200
    assert second["url.full"] == f"{a.url()}/v1/rooms"
    # trace context reached the server, secrets reached no span
    assert "traceparent" in {k.lower() for k in a.seen[0][2]}
    text = repr([(s.attributes, [e.attributes for e in s.events]) for s in spans])
    assert "secret" not in text and "Bearer" not in text and "c=1" not in text


def test_each_attempt_on_the_same_domain_carries_its_own_trace_context(
    make_client: Any, servers: dict[str, LoopbackServer], otel: Otel
) -> None:
    """A retry on the domain the request names sends the traceparent of its own span, not
    the one the first attempt sent."""
    a = servers["a"]
    a.set(status=503)
    client = make_client([Pool("api", [a.url()])], policy(), **otel.kwargs)
    assert client.request("GET", a.url() + "/x").status_code == 503
    attempts = sorted((s for s in otel.finished() if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0)
    sent = [{k.lower(): v for k, v in seen[2].items()}["traceparent"] for seen in a.seen]
    assert len(sent) == len(attempts) == 3
    assert [value.split("-")[2] for value in sent] == [f"{s.context.span_id:016x}" for s in attempts]


def test_metrics_names_and_attributes(make_client: Any, servers: dict[str, LoopbackServer], otel: Otel) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    a = servers["a"]
    client = make_client([Pool("api", [dead, a.url()])], policy(breaker_threshold=1), **otel.kwargs)
    client.request("GET", dead + "/x")
    client.request("GET", dead + "/x")

    [(attrs, point)] = otel.points("failover.requests")
    assert attrs == {"failover.pool": "api", "http.request.method": "GET", "failover.outcome": "success"}
    assert point.value == 2
    attempts = {(p[0]["failover.domain"], p[0]["failover.attempt.result"]): p[1].value for p in otel.points("failover.attempts")}
    assert attempts == {(dead, "failure"): 1, (a.url(), "success"): 2}
    durations = otel.points("http.client.request.duration")
    assert {p[0].get("error.type") for p in durations} == {"connection_refused", None}
    assert list(durations[0][1].explicit_bounds)[:3] == [0.005, 0.01, 0.025]
    [(t_attrs, t)] = otel.points("failover.breaker.transitions")
    assert t_attrs == {
        "failover.pool": "api",
        "failover.domain": dead,
        "server.address": "127.0.0.1",
        "failover.breaker.from": "closed",
        "failover.breaker.to": "open",
    } and t.value == 1
    states = {p[0]["failover.domain"]: p[1].value for p in otel.points("failover.breaker.state")}
    assert states == {dead: 2, a.url(): 0}
    assert otel.points("failover.switches") == []  # the first success sets the serving domain
    [(rd_attrs, _)] = otel.points("failover.request.duration")
    assert rd_attrs == {"failover.pool": "api", "failover.outcome": "success"}


def test_breaker_and_switch_events_on_the_logical_span(
    make_client: Any, servers: dict[str, LoopbackServer], otel: Otel
) -> None:
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], policy(breaker_threshold=1), **otel.kwargs)
    client.request("GET", a.url())  # serving: a
    a.set(status=503)
    client.request("GET", a.url())  # a fails, opens; b serves: a switch
    logical = [s for s in otel.finished() if s.kind is SpanKind.INTERNAL][-1]
    events = {e.name: dict(e.attributes or {}) for e in logical.events}
    assert events["failover.breaker.transition"] == {
        "failover.domain": a.url(),
        "failover.breaker.from": "closed",
        "failover.breaker.to": "open",
    }
    assert events["failover.switch"] == {
        "failover.pool": "api",
        "failover.from": a.url(),
        "failover.to": b.url(),
        "failover.reason": "503",
    }
    [(attrs, point)] = otel.points("failover.switches")
    assert attrs["failover.reason"] == "503" and point.value == 1


def test_budget_rejections_are_counted(make_client: Any, servers: dict[str, LoopbackServer], otel: Otel) -> None:
    from pytest_failover import RetryBudget

    a, b = servers["a"], servers["b"]
    a.set(status=503)
    b.set(status=503)
    client = make_client(
        [Pool("api", [a.url(), b.url()])],
        policy(breaker_threshold=100, retry_budget=RetryBudget(max_tokens=2, token_ratio=0.1)),
        **otel.kwargs,
    )
    client.request("GET", a.url())
    client.request("GET", a.url())
    [(attrs, point)] = otel.points("failover.retry_budget.rejections")
    assert attrs == {"failover.pool": "api"} and point.value >= 1
    failed = [p for p in otel.points("failover.requests") if p[0]["failover.outcome"] == "failure"]
    assert failed and failed[0][0]["error.type"] == "503"


def test_circuit_open_outcome(make_client: Any, otel: Otel) -> None:

    dead = f"http://127.0.0.1:{closed_port()}"
    client = make_client([Pool("api", [dead])], policy(breaker_threshold=1), **otel.kwargs)
    with pytest.raises(client.errors.AllDomainsFailed):  # the first one fails on the wire
        client.request("GET", dead)
    with pytest.raises(client.errors.CircuitOpenError):  # pinned to the open domain: refused before sending
        client.request("GET", dead, extensions={"failover": {"domain": dead}})
    outcomes = {p[0]["failover.outcome"]: p[1].value for p in otel.points("failover.requests")}
    assert outcomes == {"failure": 1, "circuit_open": 1}
    logical = [s for s in otel.finished() if s.kind is SpanKind.INTERNAL][-1]
    assert logical.status.status_code is StatusCode.ERROR
    assert dict(logical.attributes or {})["error.type"] == "circuit_open"


def test_attempt_metrics_of_two_domains_keep_their_own_attributes(otel: Otel) -> None:
    """Each attempt's metric and span attributes name its own domain and say only what that
    attempt did: what one attempt adds (a status, an error type, a method, a resend count)
    never stays on its domain's or the other domain's later attempts."""
    answers = {"a.test": [200, 503, 200], "b.test": [200, 503]}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answers[request.url.host].pop(0))

    pools = [Pool("api", ["https://a.test", "https://b.test:8443"])]
    with httpx.Client(transport=FailoverTransport(pools, policy(), httpx.MockTransport(answer), **otel.kwargs)) as client:
        for method in ("GET", "PUT", "DELETE"):  # a; a fails, b serves; b fails, a serves
            assert client.request(method, "https://a.test/v1/rooms").status_code == 200
    assert answers == {"a.test": [], "b.test": []}

    a = {"failover.pool": "api", "failover.domain": "https://a.test", "server.address": "a.test"}
    b = {"failover.pool": "api", "failover.domain": "https://b.test:8443", "server.address": "b.test"}
    attempts = sorted(((attrs, p.value) for attrs, p in otel.points("failover.attempts")), key=repr)
    assert attempts == sorted(
        [
            ({**a, "failover.attempt.result": "success"}, 2),
            ({**a, "failover.attempt.result": "failure", "error.type": "503"}, 1),
            ({**b, "failover.attempt.result": "success"}, 1),
            ({**b, "failover.attempt.result": "failure", "error.type": "503"}, 1),
        ],
        key=repr,
    )
    durations = sorted(((attrs, p.count) for attrs, p in otel.points("http.client.request.duration")), key=repr)
    on_a = {"server.address": "a.test", "server.port": 443, "failover.pool": "api"}
    on_b = {"server.address": "b.test", "server.port": 8443, "failover.pool": "api"}
    assert durations == sorted(
        [
            ({"http.request.method": "GET", **on_a, "http.response.status_code": 200}, 1),
            ({"http.request.method": "PUT", **on_a, "http.response.status_code": 503, "error.type": "503"}, 1),
            ({"http.request.method": "PUT", **on_b, "http.response.status_code": 200}, 1),
            ({"http.request.method": "DELETE", **on_b, "http.response.status_code": 503, "error.type": "503"}, 1),
            ({"http.request.method": "DELETE", **on_a, "http.response.status_code": 200}, 1),
        ],
        key=repr,
    )
    spans = sorted((s for s in otel.finished() if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0)
    assert [dict(s.attributes or {}) for s in spans][-2:] == [
        {
            "http.request.method": "DELETE", "server.address": "b.test", "server.port": 8443,
            "url.full": "https://b.test:8443/v1/rooms", "failover.pool": "api",
            "failover.domain": "https://b.test:8443", "failover.attempt": 1,
            "http.response.status_code": 503, "error.type": "503",
        },
        {
            "http.request.method": "DELETE", "server.address": "a.test", "server.port": 443,
            "url.full": "https://a.test/v1/rooms", "failover.pool": "api", "failover.domain": "https://a.test",
            "failover.attempt": 2, "http.request.resend_count": 1, "http.response.status_code": 200,
        },
    ]  # fmt: skip


def _recorded(otel: Otel, seen: int) -> tuple[list[tuple[Any, ...]], dict[tuple[str, frozenset[Any]], float]]:
    """The spans finished after the first ``seen`` (each: name, kind, attributes, status,
    event names, whether its parent is the request's span), and every metric point's value
    (a histogram's: its count)."""
    spans = otel.finished()[seen:]
    logical = {s.context.span_id for s in spans if s.kind is SpanKind.INTERNAL}
    shape = [
        (
            s.name,
            s.kind,
            sorted((dict(s.attributes or {})).items()),
            s.status.status_code,
            [e.name for e in s.events],
            s.parent is not None and s.parent.span_id in logical,
        )
        for s in spans
    ]
    values: dict[tuple[str, frozenset[Any]], float] = {}
    data = otel.reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "count", None)
                    values[metric.name, frozenset((point.attributes or {}).items())] = (
                        point.value if value is None else value  # type: ignore[union-attr]  # a sum's or a gauge's
                    )
    return shape, values


def test_a_request_the_lane_answers_records_what_the_exchange_records(
    make_client: Any, servers: dict[str, LoopbackServer], otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While telemetry records, a plain pool's request answered at its first attempt goes
    through the lane (a ``TracedLane``: no plan built) and leaves the same spans, span
    events, metric points and trace context on the wire as the same request through the
    exchange (forced there by an option, ``{"enabled": True}``, which changes nothing else)."""
    from pytest_failover._plan import RequestPlan

    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], policy(), **otel.kwargs)
    client.request("GET", a.url() + "/x")  # the first answer sets the serving domain (a plan)
    plans: list[str] = []
    real = RequestPlan.__init__

    def counted(self: RequestPlan, core: Any, method: str, *args: Any, **kwargs: Any) -> None:
        plans.append(method)
        real(self, core, method, *args, **kwargs)

    monkeypatch.setattr(RequestPlan, "__init__", counted)

    def one(extensions: dict[str, Any] | None) -> tuple[list[tuple[Any, ...]], dict[tuple[str, frozenset[Any]], float]]:
        seen, (_, before) = len(otel.finished()), _recorded(otel, 0)
        response = client.request("GET", a.url() + "/x", extensions=extensions)
        assert response.status_code == 200
        spans, after = _recorded(otel, seen)
        moved = {key: value - before.get(key, 0) for key, value in after.items() if value != before.get(key, 0)}
        return spans, moved

    lane = one(None)
    assert plans == []  # the lane answered it
    exchange = one({"failover": {"enabled": True}})
    assert plans == ["GET"]  # the exchange answered it
    assert lane == exchange
    spans, moved = lane
    assert [(name, kind) for name, kind, *_ in spans] == [("GET", SpanKind.CLIENT), ("failover api", SpanKind.INTERNAL)]
    assert {name for name, _ in moved} >= {"failover.requests", "failover.attempts", "http.client.request.duration"}
    sent = [{k.lower(): v for k, v in request[2].items()} for request in a.seen[-2:]]
    assert all("traceparent" in headers for headers in sent)  # each attempt's own context went out
