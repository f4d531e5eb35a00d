"""A downstream suite: what requests sees when api.example.com fails."""

import pytest
import requests

from pytest_failover import faults
from pytest_failover.plugin import FakeDomainsFixture

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
TIMEOUT = 0.6


def outage(fault: str, *args: object, expected: type[Exception], match: str = "", **kwargs: object) -> object:
    """One case: the marker, and the exception (type and message part) the client raises."""
    return pytest.param(expected, match, marks=pytest.mark.outage(HOST, fault, *args, **kwargs), id=fault)


FAILURES = [
    outage("dns_nxdomain", expected=requests.exceptions.ConnectionError, match="Failed to resolve"),
    outage("dns_timeout", 0.05, expected=requests.exceptions.ConnectionError, match="Failed to resolve"),
    outage("refused", expected=requests.exceptions.ConnectionError, match="Connection refused"),
    outage("connect_timeout", expected=requests.exceptions.ConnectTimeout),
    outage("read_timeout", expected=requests.exceptions.ReadTimeout),
    outage("slow", 2.0, expected=requests.exceptions.ReadTimeout),
    outage("reset", expected=requests.exceptions.ChunkedEncodingError),
    outage("tls_expired", expected=requests.exceptions.SSLError, match="certificate has expired"),
    outage("tls_wrong_host", expected=requests.exceptions.SSLError, match="Hostname mismatch"),
    outage("tls_untrusted", expected=requests.exceptions.SSLError, match="unable to get local issuer"),
    outage("rate", 1.0, faults.refused(), seed=7, expected=requests.exceptions.ConnectionError),
]


@pytest.mark.parametrize(("expected", "match"), FAILURES)
def test_failure_raises(expected: type[Exception], match: str) -> None:
    with requests.Session() as session, pytest.raises(requests.RequestException) as caught:
        session.get(URL, timeout=TIMEOUT)
    assert type(caught.value) is expected
    assert match in str(caught.value)


@pytest.mark.outage(HOST, "status", 429, body="slow down", headers={"Retry-After": "3"})
def test_status_with_retry_after() -> None:
    response = requests.get(URL, timeout=TIMEOUT)
    assert (response.status_code, response.headers["Retry-After"], response.text) == (429, "3", "slow down")


def test_post_reaches_the_domain_exactly_once(fake_domains: FakeDomainsFixture) -> None:
    fake_domains.add(HOST)
    requests.post(URL, json={"name": "blue"}, timeout=TIMEOUT).raise_for_status()
    [request] = fake_domains.requests(HOST)
    assert (request.method, request.json()) == ("POST", {"name": "blue"})


# A server whose keep-alive timeout ran out as the client sent: the pooled connection is
# closed (or reset) as the second request comes, unanswered.
KEEP_ALIVE_CLOSE = [
    pytest.param(False, marks=pytest.mark.outage(HOST, "keep_alive_close"), id="close"),
    pytest.param(True, marks=pytest.mark.outage(HOST, "keep_alive_close", reset=True), id="reset"),
]


@pytest.mark.parametrize("reset", KEEP_ALIVE_CLOSE)
def test_keep_alive_close_meets_the_second_request(reset: bool) -> None:
    with requests.Session() as session:
        assert session.get(URL, timeout=TIMEOUT).status_code == 200  # a new connection: answered
        with pytest.raises(requests.exceptions.ConnectionError, match="Connection aborted"):
            session.get(URL, timeout=TIMEOUT)  # the kept-alive one
