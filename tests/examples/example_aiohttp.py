"""A downstream suite: what aiohttp (threaded resolver, its default without aiodns) sees."""

import aiohttp
import pytest

from pytest_failover import faults

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
TIMEOUT = aiohttp.ClientTimeout(sock_connect=0.6, sock_read=0.6)


def outage(fault: str, *args: object, expected: type[Exception], **kwargs: object) -> object:
    """One case: the marker, and the exception the client raises."""
    return pytest.param(expected, marks=pytest.mark.outage(HOST, fault, *args, **kwargs), id=fault)


FAILURES = [
    outage("dns_nxdomain", expected=aiohttp.ClientConnectorDNSError),
    outage("dns_timeout", 0.05, expected=aiohttp.ClientConnectorDNSError),
    outage("refused", expected=aiohttp.ClientConnectorError),
    outage("connect_timeout", expected=aiohttp.ConnectionTimeoutError),
    outage("read_timeout", expected=aiohttp.SocketTimeoutError),
    outage("slow", 2.0, expected=aiohttp.SocketTimeoutError),
    outage("reset", expected=aiohttp.ClientPayloadError),
    outage("tls_expired", expected=aiohttp.ClientConnectorCertificateError),
    outage("tls_wrong_host", expected=aiohttp.ClientConnectorCertificateError),
    outage("tls_untrusted", expected=aiohttp.ClientConnectorCertificateError),
    outage("rate", 1.0, faults.refused(), seed=7, expected=aiohttp.ClientConnectorError),
]


@pytest.mark.parametrize("expected", FAILURES)
async def test_failure_raises(expected: type[Exception]) -> None:
    connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver())
    async with aiohttp.ClientSession(timeout=TIMEOUT, connector=connector) as session:
        with pytest.raises(aiohttp.ClientError) as caught:
            async with session.get(URL) as response:
                await response.read()
    assert type(caught.value) is expected


@pytest.mark.outage(HOST, "status", 429, headers={"Retry-After": "5"})
async def test_status_with_retry_after() -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.get(URL) as response:
        assert (response.status, response.headers["Retry-After"]) == (429, "5")


# A server whose keep-alive timeout ran out as the client sent: the pooled connection is
# closed (or reset) as the second request comes, unanswered.
KEEP_ALIVE_CLOSE = [
    pytest.param(False, marks=pytest.mark.outage(HOST, "keep_alive_close"), id="close"),
    pytest.param(True, marks=pytest.mark.outage(HOST, "keep_alive_close", reset=True), id="reset"),
]


@pytest.mark.parametrize("reset", KEEP_ALIVE_CLOSE)
async def test_keep_alive_close_is_sent_again_by_aiohttp(reset: bool) -> None:
    connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver())
    async with aiohttp.ClientSession(timeout=TIMEOUT, connector=connector) as session:
        for _ in range(2):  # the second goes out again on a new connection: aiohttp's own retry
            async with session.get(URL) as response:
                assert response.status == 200
