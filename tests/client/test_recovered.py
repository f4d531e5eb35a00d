"""A domain that failed a request and recovered while the request went on, over real
loopback sockets, on a clock the test moves.

The rolling scenario (``python -m benchmarks.scenarios --only rolling``) returned a 503
to its caller while the pool served a healthy domain: the request had tried that domain
while it was recovering, another request's answer there closed its breaker again, and the
request spent its last attempt on an early probe of an open domain instead.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable

import httpx
import pytest

from pytest_failover import FailoverResult, FailoverTransport, Pool, _transport

from .servers import LoopbackServer
from .test_transport import fast

Servers = dict[str, LoopbackServer]

COOLDOWN = 10.0


class Clock:
    """Monotonic seconds that move only when the test says; from the real clock's
    reading, so that the watchdog (on the real clock) never cuts an attempt early."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


class Meanwhile(httpx.BaseTransport):
    """httpx's own transport (real sockets) that runs :attr:`meanwhile` once, when the
    first answer from ``port`` is in and before the failover transport records it."""

    def __init__(self, port: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.port = port
        self.meanwhile: Callable[[], object] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        meanwhile = self.meanwhile
        if request.url.port == self.port and meanwhile is not None:
            self.meanwhile = None
            response.read()
            meanwhile()
        return response

    def close(self) -> None:
        self.inner.close()


def test_a_domain_that_recovered_since_it_failed_the_request_is_chosen_again(servers: Servers) -> None:
    """A request that tried the primary (503), then the region (503), goes back to the
    primary once another request's answer there closed its breaker, rather than spend its
    last attempt on an early probe of the open backup."""
    a, b, c = servers["a"], servers["b"], servers["c"]
    clock = Clock()
    inner = Meanwhile(c.port)
    pool = Pool("api", [a.url(), b.url(), c.url()])
    transport = FailoverTransport([pool], fast(breaker_cooldown=COOLDOWN), transport=inner, clock=clock)
    with httpx.Client(transport=transport) as client:
        b.set(status=503)  # the backup fails three times: its breaker opens
        opened = client.get(f"{b.url()}/open", extensions={"failover": {"domain": b.url()}})
        assert [r.status for r in _result(opened).attempts] == [503, 503, 503]
        clock.now += COOLDOWN / 5  # the backup has rested: open, and may be probed early

        def recovered() -> None:
            """While the request's attempt on the region is out: the primary recovers, and
            another request's answer there closes its breaker."""
            clock.now += 1.0
            a.set()
            other = client.get(f"{a.url()}/other", extensions={"failover": {"domain": a.url()}})
            assert other.status_code == 200

        a.set(status=503)
        c.set(status=503)
        inner.meanwhile = recovered
        response = client.get(f"{a.url()}/rooms")

    assert response.status_code == 200
    assert [(r.domain, r.status) for r in _result(response).attempts] == [
        (a.url(), 503),
        (c.url(), 503),
        (a.url(), 200),
    ]
    assert b.of_path("/rooms") == 0, "an early probe of the open backup"


def _result(response: httpx.Response) -> FailoverResult:
    result = response.extensions["failover"]
    assert isinstance(result, FailoverResult)
    return result


def test_an_attempt_that_waited_its_backoff_goes_to_a_domain_that_recovered_meanwhile(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A request that the region answered 503, and whose early probe of the backup failed,
    decides to go back to the region after a backoff (no other domain is known to work).
    While it waits, another request's early probe finds the primary recovered. The
    request's last attempt goes to the primary, not to the region's 503 (the rolling
    scenario, ``requests+aiohttp``: a 503 returned 0.35 s after the pool saw the primary
    work)."""
    a, b, c = "http://a.example", "http://b.example", "http://c.example"
    clock = Clock()
    up = {"a.example": False}
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        seen.append(host)
        return httpx.Response(200 if up.get(host) else 503)

    pool = Pool("api", [a, b, c])
    transport = FailoverTransport(
        [pool], fast(breaker_cooldown=COOLDOWN), transport=httpx.MockTransport(handler), clock=clock,
        random=lambda: 0.5,  # every backoff waits (full jitter could draw 0)
    )
    with httpx.Client(transport=transport) as client:
        for domain in (b, a):  # the backup opens, then the primary (both fail 3 times)
            opened = client.get(f"{domain}/open", extensions={"failover": {"domain": domain}})
            assert [r.status for r in _result(opened).attempts] == [503, 503, 503]
            clock.now += 0.001
        clock.now += COOLDOWN / 5  # both have rested: open, and may be probed early

        def meanwhile(seconds: float) -> None:
            """The request's backoff: the primary recovers, and another request's early
            probe finds it (the region answers it 503 first)."""
            monkeypatch.setattr(_transport, "time", types.SimpleNamespace(sleep=_no_sleep))
            clock.now += 0.05
            up["a.example"] = True
            other = client.get(f"{a}/other")
            assert [(r.domain, r.status) for r in _result(other).attempts] == [(c, 503), (a, 200)]

        monkeypatch.setattr(_transport, "time", types.SimpleNamespace(sleep=meanwhile))
        seen.clear()
        response = client.get(f"{a}/rooms")

    assert [(r.domain, r.status) for r in _result(response).attempts] == [
        (c, 503),  # the region (the only closed domain)
        (b, 503),  # the early probe of the backup (its cooldown ends first)
        (a, 200),  # after the backoff: the primary, which the other request found recovered
    ]
    assert response.status_code == 200
    assert seen == ["c.example", "b.example", "c.example", "a.example", "a.example"]
    moved = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
    assert moved == [f"pool api: GET {a}/rooms attempt 3 goes to {a}, not {c}: it works again since the attempt was decided"]


def _no_sleep(seconds: float) -> None:
    pass
