"""A downstream suite on httpx2: its clients, sync and async, through the failover transport
of ``pytest_failover.httpx2``, while api.example.com fails (pytest-asyncio)."""

from collections.abc import Iterator
from ssl import SSLContext

import httpx2
import pytest

from pytest_failover import Pool
from pytest_failover.httpx2 import AllDomainsFailed, AsyncFailoverTransport, FailoverTransport
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.telemetry_capture import FailoverTelemetry

HOST, BACKUP = "api.example.com", "api2.example.com"
URL = f"https://{HOST}/v1/rooms"
POOL = Pool("api", [f"https://{HOST}", f"https://{BACKUP}"])


@pytest.fixture(scope="module")
def client(fake_domains_ssl_context: SSLContext) -> Iterator[httpx2.Client]:
    """Built once, before any fake domain is up: it trusts the test CA through the one line."""
    inner = httpx2.HTTPTransport(verify=fake_domains_ssl_context)
    with httpx2.Client(transport=FailoverTransport([POOL], transport=inner)) as client:
        yield client


@pytest.mark.parametrize("fault", ["dns_nxdomain", "refused", "reset", "tls_expired", "tls_untrusted"])
def test_sync_fails_over(fault: str, fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry) -> None:
    fake_domains.add(HOST)
    fake_domains.add(BACKUP)
    fake_domains.fail(HOST, fault)
    with httpx2.Client(transport=FailoverTransport([POOL])) as client:
        response = client.get(URL)
    assert response.json()["domain"] == BACKUP
    assert [a.domain for a in failover_telemetry.attempts()] == [f"https://{HOST}", f"https://{BACKUP}"]


@pytest.mark.outage(HOST, "refused")
async def test_async_fails_over(fake_domains: FakeDomainsFixture) -> None:
    fake_domains.add(BACKUP)
    async with httpx2.AsyncClient(transport=AsyncFailoverTransport([POOL])) as client:
        response = await client.get(URL)
    assert response.extensions["failover"].domain == f"https://{BACKUP}"
    assert len(fake_domains.requests(BACKUP)) == 1


@pytest.mark.outage(HOST, "tls_expired")
def test_a_client_built_before_the_domains_trusts_their_ca(client: httpx2.Client, fake_domains: FakeDomainsFixture) -> None:
    fake_domains.add(BACKUP)
    assert client.get(URL).json()["domain"] == BACKUP


@pytest.mark.outage(HOST, "refused")
@pytest.mark.outage(BACKUP, "tls_untrusted")
def test_every_domain_down_raises_the_httpx2_error(client: httpx2.Client) -> None:
    with pytest.raises(httpx2.TransportError) as caught:
        client.get(URL)
    assert isinstance(caught.value, AllDomainsFailed)
    # the module's client serves from the backup since the test before: it is tried first
    assert {a.error_type for a in caught.value.attempts} == {"connection_refused", "server_certificate_invalid"}
