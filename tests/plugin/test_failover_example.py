"""End to end: an application built on FailoverTransport survives each fault on its primary.

This is the test a downstream team writes with the plugin: real servers, real
DNS interception and TLS, the application's real URLs; the outage is injected
with ``fake_domains`` and what the failover client did is read back through
``failover_telemetry`` and ``fake_domains.requests``.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx
import pytest

from pytest_failover import (
    AllDomainsFailed,
    AsyncFailoverTransport,
    CircuitOpenError,
    ExponentialBackoff,
    FailoverTransport,
    Policy,
    Pool,
    faults,
)
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.telemetry_capture import BreakerTransition, FailoverTelemetry, Switch

PRIMARY, BACKUP = "api.example.com", "api2.example.com"
PRIMARY_URL, BACKUP_URL = f"https://{PRIMARY}", f"https://{BACKUP}"


def rooms_pool() -> Pool:
    return Pool("rooms", [PRIMARY_URL, BACKUP_URL])


def fast_policy() -> Policy:
    """Tiny timeouts and backoff so a fault costs a fraction of a second; one failure opens a breaker.
    (0.5 s an attempt: a TLS handshake on a loaded 2-core machine once took more than 0.25 s,
    and the expired certificate was reported as a connect timeout.)"""
    return Policy(
        schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
        attempt_timeout=0.5,
        deadline=3.0,
        breaker_threshold=1,
        breaker_cooldown=60.0,
    )




class RoomsApp:
    """The application under test: it lists and books rooms through the failover client."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._client = httpx.Client(transport=transport, base_url=PRIMARY_URL)

    def rooms(self) -> dict[str, Any]:
        response = self._client.get("/v1/rooms")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def book(self, room: str) -> dict[str, Any]:
        response = self._client.post("/v1/bookings", json={"room": room})
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def close(self) -> None:
        self._client.close()


@pytest.fixture
def app(fake_domains: FakeDomainsFixture) -> Any:
    fake_domains.add(PRIMARY)
    fake_domains.add(BACKUP)
    application = RoomsApp(FailoverTransport([rooms_pool()], fast_policy()))
    yield application
    application.close()


# (fault arguments, error.type the client reports, does the failed attempt reach the primary's HTTP server)
FAULTS = [
    pytest.param(("dns_nxdomain",), "dns_error", False, id="dns_nxdomain"),
    pytest.param(("dns_timeout", 0.05), "dns_error", False, id="dns_timeout"),
    pytest.param(("refused",), "connection_refused", False, id="refused"),
    pytest.param(("connect_timeout",), "connect_timeout", False, id="connect_timeout"),
    pytest.param(("read_timeout",), "read_timeout", True, id="read_timeout"),
    pytest.param(("slow", 1.0), "read_timeout", True, id="slow"),
    pytest.param(("tls_expired",), "server_certificate_invalid", False, id="tls_expired"),
    pytest.param(("tls_wrong_host",), "server_certificate_invalid", False, id="tls_wrong_host"),
    pytest.param(("tls_untrusted",), "server_certificate_invalid", False, id="tls_untrusted"),
    pytest.param(("status", 503), "503", True, id="status_503"),
    pytest.param(("status", 502, "bad gateway"), "502", True, id="status_502"),
    pytest.param((faults.flapping(fail=1, fault=faults.status(500)),), "500", True, id="flapping"),
    pytest.param((faults.rate(1.0, faults.refused(), seed=3),), "connection_refused", False, id="rate"),
    # (Python 3.13's ssl module reports a TLS stream's reset; earlier ones read it as its end)
    pytest.param(("reset",), "remote_protocol_error" if sys.version_info < (3, 13) else "connection_reset", True,
                 id="reset"),
]


@pytest.mark.parametrize(("fault", "error_type", "reaches_http"), FAULTS)
def test_app_survives_fault_on_primary(
    app: RoomsApp,
    fake_domains: FakeDomainsFixture,
    failover_telemetry: FailoverTelemetry,
    fault: tuple[Any, ...],
    error_type: str,
    reaches_http: bool,
) -> None:
    """With the primary failing, the app's next request is answered by the backup, and it shows."""
    assert app.rooms()["domain"] == PRIMARY  # healthy: the primary serves

    fake_domains.fail(PRIMARY, *fault)
    assert app.rooms()["domain"] == BACKUP

    first, second = failover_telemetry.requests()
    assert (first.outcome, first.domain) == ("success", PRIMARY_URL)
    assert (second.outcome, second.domain) == ("success", BACKUP_URL)
    assert [(a.domain, a.error_type) for a in second.attempts] == [
        (PRIMARY_URL, error_type),
        (BACKUP_URL, None),
    ]
    assert failover_telemetry.switches() == [
        Switch(pool="rooms", from_domain=PRIMARY_URL, to_domain=BACKUP_URL, reason=error_type)
    ]
    assert failover_telemetry.breaker_transitions() == [
        BreakerTransition(pool="rooms", domain=PRIMARY_URL, from_state="closed", to_state="open")
    ]
    assert failover_telemetry.metric("failover.switches", pool="rooms", reason=error_type) == 1
    assert failover_telemetry.metric("failover.attempts", domain=PRIMARY_URL, result="failure") == 1
    assert failover_telemetry.metric("failover.requests", outcome="success") == 2

    # What the servers saw: the backup exactly one GET; the primary the warm-up, plus the
    # failed request only when the fault lets it reach HTTP.
    assert [(r.method, r.path) for r in fake_domains.requests(BACKUP)] == [("GET", "/v1/rooms")]
    assert len(fake_domains.requests(PRIMARY)) == (2 if reaches_http else 1)


def test_breaker_keeps_traffic_off_the_failed_primary(
    app: RoomsApp, fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """Once the primary's breaker is open, later requests go straight to the backup with no attempt on it."""
    fake_domains.fail(PRIMARY, faults.refused())
    for _ in range(3):
        assert app.rooms()["domain"] == BACKUP
    primary_attempts = failover_telemetry.attempts(domain=PRIMARY_URL)
    assert [a.error_type for a in primary_attempts] == ["connection_refused"]
    assert failover_telemetry.outcomes() == ["success"] * 3
    assert len(fake_domains.requests(BACKUP)) == 3


def test_total_outage_fails_fast_once_every_breaker_is_open(
    app: RoomsApp, fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """Both domains down: the first request tries both and fails; the next one makes no network call."""
    fake_domains.fail(PRIMARY, "refused")
    fake_domains.fail(BACKUP, "dns_nxdomain")
    with pytest.raises(AllDomainsFailed):
        app.rooms()
    struck = len(fake_domains.events())
    with pytest.raises(CircuitOpenError):
        app.rooms()
    assert len(fake_domains.events()) == struck  # no lookup, no connect
    assert failover_telemetry.outcomes() == ["failure", "circuit_open"]
    assert [(t.domain, t.to_state) for t in failover_telemetry.breaker_transitions()] == [
        (PRIMARY_URL, "open"),
        (BACKUP_URL, "open"),
    ]
    assert failover_telemetry.metric("failover.requests", outcome="circuit_open") == 1


def test_post_before_any_byte_left_moves_exactly_once(
    app: RoomsApp, fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """A POST whose primary fails in DNS is safe to send to the backup, and is sent exactly once."""
    fake_domains.fail(PRIMARY, "dns_nxdomain")
    assert app.book("blue")["domain"] == BACKUP
    assert fake_domains.requests(PRIMARY) == []
    [booking] = fake_domains.requests(BACKUP)
    assert (booking.method, booking.path, booking.json()) == ("POST", "/v1/bookings", {"room": "blue"})
    assert failover_telemetry.outcome == "success"


def test_post_that_reached_the_primary_is_not_resent(
    app: RoomsApp, fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """A POST the primary received but never answered is not replayed on the backup."""
    fake_domains.fail(PRIMARY, "read_timeout")
    with pytest.raises(AllDomainsFailed) as caught:
        app.book("blue")
    assert caught.value.reason == "not_retryable"
    assert [r.method for r in fake_domains.requests(PRIMARY)] == ["POST"]
    assert fake_domains.requests(BACKUP) == []
    assert failover_telemetry.outcome == "failure"


@pytest.mark.outage(PRIMARY, "tls_expired")
async def test_async_app_survives_expired_certificate(
    fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """The async transport, used from an async test with the marker, fails over the same way."""
    fake_domains.add(BACKUP)
    transport = AsyncFailoverTransport([rooms_pool()], fast_policy())
    async with httpx.AsyncClient(transport=transport, base_url=PRIMARY_URL) as client:
        response = await client.get("/v1/rooms")
    assert response.json()["domain"] == BACKUP
    [request] = failover_telemetry.requests("rooms")
    assert [a.error_type for a in request.attempts] == ["server_certificate_invalid", None]
    assert failover_telemetry.outcome == "success"
