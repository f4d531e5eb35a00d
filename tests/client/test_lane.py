"""The fast lane (``_exchange.Lane``): which requests go without a plan, and how the others
are handed over, with every front-end over real loopback sockets.

A request's plan is counted by its construction (``RequestPlan.__init__``, which every
exchange runs, from the start or when a lane hands it over): a request the lane answers
builds none.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.metrics import _internal as otel_metrics_globals
from opentelemetry.sdk.trace import TracerProvider

from pytest_failover import FailoverResult, Hedging, Policy, Pool
from pytest_failover._plan import RequestPlan

from .servers import closed_port
from .test_transport import Servers, fast, info


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The method of each request plan built from now on, in a process with no
    OpenTelemetry SDK installed, as in most applications (a test before this one in the
    same worker may have installed one for good, the ``failover_telemetry`` fixture does:
    its globals are unset for the test, and set back after it)."""
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(otel_metrics_globals, "_METER_PROVIDER", None)
    built: list[str] = []
    lock = threading.Lock()
    real = RequestPlan.__init__

    def counted(self: RequestPlan, core: Any, method: str, *args: Any, **kwargs: Any) -> None:
        with lock:
            built.append(method)
        real(self, core, method, *args, **kwargs)

    monkeypatch.setattr(RequestPlan, "__init__", counted)
    return built


def test_a_request_the_pool_serves_its_domain_for_builds_no_plan(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """The first request sets the pool's serving domain (a plan records that); every later
    one, GET or POST, is answered in the lane, and its result is the exchange's."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    first = client.request("GET", f"{a.url()}/x")
    assert first.status_code == 200 and plans == ["GET"]
    for method in ("GET", "POST", "GET", "DELETE"):
        response = client.request(method, f"{a.url()}/y", content=b"{}" if method == "POST" else None)
        result = info(response)
        assert result == FailoverResult("api", a.url(), result.attempts, "success")
        assert [(r.number, r.domain, r.error_type, r.status, r.sent) for r in result.attempts] == [
            (1, a.url(), None, 200, True)
        ]
        assert result.attempts[0].duration >= 0.0
    assert plans == ["GET"], "a request the lane answered built a plan"
    assert a.total == 5 and b.total == 0


def test_a_failure_in_the_lane_hands_the_attempt_to_the_plan(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """A refused primary: the lane's attempt is handed over with its failure, the plan
    moves to the backup at once; once the primary is open the lane goes to the backup."""
    dead = f"http://127.0.0.1:{closed_port()}"
    b = servers["b"]
    client = make_client([Pool("api", [dead, b.url()])], fast(breaker_threshold=1))
    response = client.request("GET", f"{dead}/x")
    assert [(r.number, r.domain, r.error_type, r.sent) for r in info(response).attempts] == [
        (1, dead, "connection_refused", False),
        (2, b.url(), None, True),
    ]
    assert plans == ["GET"]
    for _ in range(3):
        again = client.request("GET", f"{dead}/x")
        assert [(r.number, r.domain) for r in info(again).attempts] == [(1, b.url())]
    assert plans == ["GET"], "the lane did not take requests to the open primary's backup"


def test_an_answer_that_is_not_a_success_is_handed_over(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """A 503 from the primary (retryable), a 404 (an answer): the plan records each."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast(breaker_threshold=5, sticky=False))
    client.request("GET", f"{a.url()}/warm")
    a.set(status=503)
    moved = client.request("GET", f"{a.url()}/x")
    assert [(r.domain, r.status) for r in info(moved).attempts] == [(a.url(), 503), (b.url(), 200)]
    a.set(status=404)
    answered = client.request("GET", f"{a.url()}/x")
    assert answered.status_code == 404
    assert [(r.domain, r.status) for r in info(answered).attempts] == [(a.url(), 404)]
    assert len(plans) == 3


def test_a_post_the_lane_sent_is_never_resent(make_client: Any, servers: Servers, plans: list[str]) -> None:
    """A POST whose connection is reset after it was sent: handed over, and not re-sent
    (bytes may have left), as from the exchange."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    client.request("GET", f"{a.url()}/warm")
    a.set(reset=True)
    with pytest.raises(client.errors.AllDomainsFailed) as raised:
        client.request("POST", f"{a.url()}/pay", content=b"{}")
    assert raised.value.reason == "not_retryable"
    assert [(r.domain, r.sent) for r in raised.value.attempts] == [(a.url(), True)]
    assert b.total == 0 and len(plans) == 2


@pytest.mark.parametrize("pool_kind", ["hedging", "telemetry", "stale"])
def test_what_the_lane_does_not_take_starts_in_a_plan(
    make_client: Any, servers: Servers, plans: list[str], pool_kind: str
) -> None:
    """A hedging pool, a transport with an SDK's provider, a GET the stale cache serves:
    every request has a plan from the start."""
    a = servers["a"]
    options: dict[str, Any] = {}
    policy: Policy = fast()
    if pool_kind == "hedging":
        policy = fast(hedging=Hedging(delay=1.0))
    elif pool_kind == "telemetry":
        options["tracer_provider"] = TracerProvider()
    else:
        policy = fast(stale_on_failure=True)
    client = make_client([Pool("api", [a.url(), servers["b"].url()])], policy, **options)
    for _ in range(3):
        assert client.request("GET", f"{a.url()}/x").status_code == 200
    assert plans == ["GET"] * 3


def test_threads_share_the_lane_while_the_primary_fails_and_recovers(servers: Servers) -> None:
    """A dozen threads on one sync transport, the primary flapping between 503 and 200:
    every request is answered 200, by whichever domain, and no attempt is lost."""
    import httpx

    from pytest_failover import FailoverTransport

    a, b = servers["a"], servers["b"]
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], fast(breaker_threshold=2, breaker_cooldown=0.05))
    client = httpx.Client(transport=transport)
    failures: list[object] = []
    recorded = [0]
    lock = threading.Lock()

    def work() -> None:
        for _ in range(40):
            try:
                response = client.get(f"{a.url()}/x")
            except Exception as exc:  # counted, not raised: the test counts every failure
                failures.append(exc)
                continue
            if response.status_code != 200:
                failures.append(response.status_code)
            with lock:
                recorded[0] += len(response.extensions["failover"].attempts)

    def flap(stop: threading.Event) -> None:
        status = 503
        while not stop.wait(0.01):
            a.set(status=status)
            status = 200 if status == 503 else 503

    stop = threading.Event()
    flapper = threading.Thread(target=flap, args=(stop,))
    flapper.start()
    threads = [threading.Thread(target=work) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    flapper.join()
    client.close()
    assert not failures
    assert recorded[0] == a.total + b.total, "an attempt sent is missing from the results"
