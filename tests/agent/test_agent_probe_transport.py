"""The pool probe's inner transport (failover_agent.wire.ProbeTransport) under the real
AsyncFailoverTransport, against the simulator's faults over real TLS.

The failover client must see the same error types through it as through httpx's own
transport, and fail over, time out and pass answers (status, headers, body) exactly
as a user's client would.
"""

from __future__ import annotations

import httpx
import pytest
from agent_support import fake_domains  # noqa: F401  # the fixture
from failover_agent.wire import ProbeTransport, ssl_context

from pytest_failover import (
    AsyncFailoverTransport,
    FailoverError,
    Policy,
    Pool,
    ScheduleTable,
    Step,
    faults,
)
from pytest_failover.simulator import FakeDomains, Response

PRIMARY, BACKUP = "https://api.example.com", "https://api2.example.com"


def client(fd: FakeDomains, *, attempt_timeout: float = 1.0) -> httpx.AsyncClient:
    policy = Policy(schedule=ScheduleTable([Step(0, 0), Step(0, 1)]), attempt_timeout=attempt_timeout,
                    deadline=5.0, breaker_threshold=100, retry_budget=None, sticky=False)
    transport = AsyncFailoverTransport([Pool("api", [PRIMARY, BACKUP])], policy,
                                       ProbeTransport(ssl_context(fd.ca_bundle)))
    return httpx.AsyncClient(transport=transport, trust_env=False)


async def test_answers_pass_through_with_status_headers_and_body(fake_domains: FakeDomains) -> None:  # noqa: F811  # the fixture imported above
    fd = fake_domains
    fd.add("api.example.com", lambda request: Response(status=200, body=b'{"status": "ok"}',
                                                       headers={"X-Served": "primary"}))
    fd.add("api2.example.com", lambda request: {"status": "backup"})
    async with client(fd) as http:
        response = await http.get(f"{PRIMARY}/health?x=1", headers={"X-Probe": "yes"})
    assert response.status_code == 200
    assert response.headers["x-served"] == "primary"
    assert response.json() == {"status": "ok"}
    assert response.extensions["failover"].domain == PRIMARY
    (request,) = fd.requests("api.example.com")
    assert request.path.startswith("/health")
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["x-probe"] == "yes" and headers["host"] == "api.example.com"


async def test_faults_become_the_same_error_types_and_fail_over(fake_domains: FakeDomains) -> None:  # noqa: F811  # the fixture imported above
    fd = fake_domains
    fd.add("api.example.com", lambda request: {"status": "ok"})
    fd.add("api2.example.com", lambda request: {"status": "backup"})
    cases = [
        (faults.dns_nxdomain(), "dns_error"),
        (faults.refused(), "connection_refused"),
        (faults.tls_expired(), "server_certificate_invalid"),
        (faults.read_timeout(), "read_timeout"),
    ]
    async with client(fd, attempt_timeout=0.5) as http:
        for fault, error_type in cases:
            fd.fail("api.example.com", fault)
            response = await http.get(f"{PRIMARY}/health")
            result = response.extensions["failover"]
            assert response.json() == {"status": "backup"}, fault
            assert result.domain == BACKUP
            assert [a.error_type for a in result.attempts] == [error_type, None], (fault, result.attempts)
        fd.fail("api2.example.com", faults.status(503))
        response = await http.get(f"{PRIMARY}/health")
        assert response.status_code == 503
        fd.fail("api2.example.com", faults.refused())
        with pytest.raises(FailoverError) as caught:
            await http.get(f"{PRIMARY}/health")
        assert [a.error_type for a in caught.value.attempts] == ["read_timeout", "connection_refused"]
