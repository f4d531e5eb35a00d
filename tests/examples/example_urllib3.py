"""A downstream suite: what urllib3 (no retries) sees when api.example.com fails."""

import sys

import pytest
import urllib3

from pytest_failover import faults

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
TIMEOUT = urllib3.Timeout(connect=0.6, read=0.6)
# Python 3.13's ssl module reports a TLS stream's reset as one (ECONNRESET); earlier ones
# read it as the stream's end, as a truncated answer.
TLS_RESET_IS_EOF = sys.version_info < (3, 13)


def outage(fault: str, *args: object, expected: type[Exception], match: str = "", **kwargs: object) -> object:
    """One case: the marker, and the exception (type and message part) the client raises."""
    return pytest.param(expected, match, marks=pytest.mark.outage(HOST, fault, *args, **kwargs), id=fault)


errors = urllib3.exceptions
FAILURES = [
    outage("dns_nxdomain", expected=errors.NameResolutionError, match="Failed to resolve"),
    outage("dns_timeout", 0.05, expected=errors.NameResolutionError),
    outage("refused", expected=errors.NewConnectionError, match="Connection refused"),
    outage("connect_timeout", expected=errors.ConnectTimeoutError),
    outage("read_timeout", expected=errors.ReadTimeoutError),
    outage("slow", 2.0, expected=errors.ReadTimeoutError),
    outage("reset", expected=errors.ProtocolError, match="IncompleteRead" if TLS_RESET_IS_EOF else "ConnectionResetError"),
    outage("tls_expired", expected=errors.SSLError, match="certificate has expired"),
    outage("tls_wrong_host", expected=errors.SSLError, match="Hostname mismatch"),
    outage("tls_untrusted", expected=errors.SSLError, match="unable to get local issuer"),
    outage("rate", 1.0, faults.refused(), seed=7, expected=errors.NewConnectionError),
]


@pytest.mark.parametrize(("expected", "match"), FAILURES)
def test_failure_raises(expected: type[Exception], match: str) -> None:
    with urllib3.PoolManager(timeout=TIMEOUT, retries=False) as pool, pytest.raises(urllib3.exceptions.HTTPError) as caught:
        pool.request("GET", URL)
    assert type(caught.value) is expected
    assert match in str(caught.value)


@pytest.mark.outage(HOST, "flapping", fail=1, fault=faults.status(502))
def test_flapping_then_healthy() -> None:
    with urllib3.PoolManager(timeout=TIMEOUT, retries=False) as pool:
        assert [pool.request("GET", URL).status for _ in range(2)] == [502, 200]


# A server whose keep-alive timeout ran out as the client sent: the pooled connection is
# closed (or reset) as the second request comes, unanswered.
KEEP_ALIVE_CLOSE = [
    pytest.param(False, marks=pytest.mark.outage(HOST, "keep_alive_close"), id="close"),
    pytest.param(True, marks=pytest.mark.outage(HOST, "keep_alive_close", reset=True), id="reset"),
]


@pytest.mark.parametrize("reset", KEEP_ALIVE_CLOSE)
def test_keep_alive_close_meets_the_second_request(reset: bool) -> None:
    with urllib3.PoolManager(timeout=TIMEOUT, retries=False) as pool:
        assert pool.request("GET", URL).status == 200  # a new connection: answered
        with pytest.raises(urllib3.exceptions.ProtocolError, match="Connection aborted"):
            pool.request("GET", URL)  # the kept-alive one
