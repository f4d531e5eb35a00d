"""A downstream suite: what an httpx (sync) client sees when api.example.com fails."""

import sys

import httpx
import pytest

from pytest_failover import faults
from pytest_failover.plugin import FakeDomainsFixture

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
TIMEOUT = httpx.Timeout(0.6)
# Python 3.13's ssl module reports a TLS stream's reset as one (ECONNRESET); earlier ones
# read it as the stream's end, as a truncated answer.
TLS_RESET_IS_EOF = sys.version_info < (3, 13)


def outage(fault: str, *args: object, expected: type[Exception], match: str = "", **kwargs: object) -> object:
    """One case: the marker, and the exception (type and message part) the client raises."""
    return pytest.param(expected, match, marks=pytest.mark.outage(HOST, fault, *args, **kwargs), id=fault)


FAILURES = [
    outage("dns_nxdomain", expected=httpx.ConnectError, match="Name or service not known"),
    outage("dns_timeout", 0.05, expected=httpx.ConnectError, match="Temporary failure"),
    outage("refused", expected=httpx.ConnectError, match="Connection refused"),
    outage("connect_timeout", expected=httpx.ConnectTimeout),
    outage("read_timeout", expected=httpx.ReadTimeout),
    outage("slow", 2.0, expected=httpx.ReadTimeout),
    outage("reset", expected=httpx.RemoteProtocolError if TLS_RESET_IS_EOF else httpx.ReadError),
    outage("tls_expired", expected=httpx.ConnectError, match="certificate has expired"),
    outage("tls_wrong_host", expected=httpx.ConnectError, match="Hostname mismatch"),
    outage("tls_untrusted", expected=httpx.ConnectError, match="unable to get local issuer"),
    outage("rate", 1.0, faults.refused(), seed=7, expected=httpx.ConnectError),
]


@pytest.mark.parametrize(("expected", "match"), FAILURES)
def test_failure_raises(expected: type[Exception], match: str) -> None:
    with httpx.Client(timeout=TIMEOUT) as client, pytest.raises(httpx.TransportError) as caught:
        client.get(URL)
    assert type(caught.value) is expected
    assert match in str(caught.value)


@pytest.mark.outage(HOST, "status", 429, headers={"Retry-After": "2"})
def test_status_with_retry_after() -> None:
    response = httpx.get(URL)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "2"


def test_flapping_recovers(fake_domains: FakeDomainsFixture) -> None:
    fake_domains.add(HOST)
    fake_domains.fail(HOST, faults.flapping(fail=2))
    with httpx.Client(timeout=TIMEOUT) as client:
        statuses = [client.get(URL).status_code for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert [str(request.fault) for request in fake_domains.requests(HOST)] == [
        "status", "status", "healthy"
    ]


@pytest.mark.outage(HOST, "latency", 0.05)
def test_latency_still_answers() -> None:
    response = httpx.get(URL, timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.elapsed.total_seconds() >= 0.05


def test_healthy_answers_and_is_recorded(fake_domains: FakeDomainsFixture) -> None:
    fake_domains.add(HOST)
    response = httpx.post(URL, json={"name": "blue"})
    assert response.json() == {"ok": True, "domain": HOST, "method": "POST", "path": "/v1/rooms"}
    [request] = fake_domains.requests(HOST)
    assert (request.method, request.path, request.json()) == ("POST", "/v1/rooms", {"name": "blue"})


@pytest.mark.outage(HOST, "refused")
def test_plain_http_fails_the_same_way(fake_domains: FakeDomainsFixture) -> None:
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{HOST}/v1/rooms", timeout=TIMEOUT)
    fake_domains.heal(HOST)
    response = httpx.get(f"http://{HOST}/v1/rooms", timeout=TIMEOUT)
    assert response.status_code == 200
    assert fake_domains.requests(HOST)[0].scheme == "http"


# A server whose keep-alive timeout ran out as the client sent: the pooled connection is
# closed (or reset) as the second request comes, unanswered.
KEEP_ALIVE_CLOSE = [
    pytest.param(False, marks=pytest.mark.outage(HOST, "keep_alive_close"), id="close"),
    pytest.param(True, marks=pytest.mark.outage(HOST, "keep_alive_close", reset=True), id="reset"),
]


@pytest.mark.parametrize("reset", KEEP_ALIVE_CLOSE)
def test_keep_alive_close_meets_the_second_request(reset: bool) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        assert client.get(URL).status_code == 200  # a new connection: answered
        with pytest.raises(httpx.TransportError) as caught:
            client.get(URL)  # the kept-alive one
    if reset and not TLS_RESET_IS_EOF:
        assert type(caught.value) is httpx.ReadError and "Connection reset by peer" in str(caught.value)
    else:  # closed, or a reset read as the stream's end (a "ragged EOF")
        assert type(caught.value) is httpx.RemoteProtocolError
        assert "Server disconnected without sending a response" in str(caught.value)
