"""A downstream suite: what an httpx AsyncClient sees when api.example.com fails (pytest-asyncio)."""

import httpx
import pytest

from pytest_failover import faults
from pytest_failover.plugin import FakeDomainsFixture

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
TIMEOUT = httpx.Timeout(0.6)


def outage(fault: str, *args: object, expected: type[Exception], match: str = "", **kwargs: object) -> object:
    """One case: the marker, and the exception (type and message part) the client raises."""
    return pytest.param(expected, match, marks=pytest.mark.outage(HOST, fault, *args, **kwargs), id=fault)


FAILURES = [
    outage("dns_nxdomain", expected=httpx.ConnectError, match="Name or service not known"),
    outage("dns_timeout", 0.05, expected=httpx.ConnectError, match="Temporary failure"),
    outage("refused", expected=httpx.ConnectError),
    outage("connect_timeout", expected=httpx.ConnectTimeout),
    outage("read_timeout", expected=httpx.ReadTimeout),
    outage("slow", 2.0, expected=httpx.ReadTimeout),
    outage("reset", expected=httpx.ReadError),
    outage("tls_expired", expected=httpx.ConnectError, match="certificate has expired"),
    outage("tls_wrong_host", expected=httpx.ConnectError, match="Hostname mismatch"),
    outage("tls_untrusted", expected=httpx.ConnectError, match="unable to get local issuer"),
    outage("rate", 1.0, faults.refused(), seed=7, expected=httpx.ConnectError),
]


@pytest.mark.parametrize(("expected", "match"), FAILURES)
async def test_failure_raises(expected: type[Exception], match: str) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        with pytest.raises(httpx.TransportError) as caught:
            await client.get(URL)
    assert type(caught.value) is expected
    assert match in str(caught.value)


@pytest.mark.outage(HOST, "status", 503, headers={"Retry-After": "1"})
async def test_status_with_retry_after() -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        response = await client.get(URL)
    assert (response.status_code, response.headers["Retry-After"]) == (503, "1")


async def test_fault_changes_mid_test(fake_domains: FakeDomainsFixture) -> None:
    fake_domains.add(HOST)
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        assert (await client.get(URL)).status_code == 200
        fake_domains.fail(HOST, "refused")  # pooled keep-alive connections are dropped too
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)
        fake_domains.heal(HOST)
        assert (await client.get(URL)).status_code == 200
    assert len(fake_domains.requests(HOST)) == 2


# A server whose keep-alive timeout ran out as the client sent: the pooled connection is
# closed (or reset) as the second request comes, unanswered.
KEEP_ALIVE_CLOSE = [
    pytest.param(False, marks=pytest.mark.outage(HOST, "keep_alive_close"), id="close"),
    pytest.param(True, marks=pytest.mark.outage(HOST, "keep_alive_close", reset=True), id="reset"),
]


@pytest.mark.parametrize("reset", KEEP_ALIVE_CLOSE)
async def test_keep_alive_close_meets_the_second_request(reset: bool) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        assert (await client.get(URL)).status_code == 200  # a new connection: answered
        with pytest.raises(httpx.TransportError) as caught:
            await client.get(URL)  # the kept-alive one
    assert type(caught.value) is (httpx.ReadError if reset else httpx.RemoteProtocolError)
