"""A downstream suite: what urllib.request sees when api.example.com fails."""

import http.client
import ssl
import sys
import urllib.error
import urllib.request

import pytest

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
TIMEOUT = 0.6
# Python 3.13's ssl module reports a TLS stream's reset as one (ECONNRESET); earlier ones
# read it as the stream's end, as a truncated answer.
TLS_RESET_IS_EOF = sys.version_info < (3, 13)


def outage(
    fault: str, *args: object, expected: type[Exception], reason: type[Exception] | None = None, **kwargs: object
) -> object:
    """One case: the marker, the exception urlopen raises and, for URLError, its reason's type."""
    return pytest.param(expected, reason, marks=pytest.mark.outage(HOST, fault, *args, **kwargs), id=fault)


FAILURES = [
    outage("dns_nxdomain", expected=urllib.error.URLError, reason=OSError),
    outage("dns_timeout", 0.05, expected=urllib.error.URLError, reason=OSError),
    outage("refused", expected=urllib.error.URLError, reason=ConnectionRefusedError),
    outage("connect_timeout", expected=urllib.error.URLError, reason=TimeoutError),
    outage("read_timeout", expected=TimeoutError),
    outage("slow", 2.0, expected=TimeoutError),
    outage("reset", expected=http.client.IncompleteRead if TLS_RESET_IS_EOF else ConnectionResetError),
    outage("tls_expired", expected=urllib.error.URLError, reason=ssl.SSLCertVerificationError),
    outage("tls_wrong_host", expected=urllib.error.URLError, reason=ssl.SSLCertVerificationError),
    outage("tls_untrusted", expected=urllib.error.URLError, reason=ssl.SSLCertVerificationError),
]


@pytest.mark.parametrize(("expected", "reason"), FAILURES)
def test_failure_raises(expected: type[Exception], reason: type[Exception] | None) -> None:
    errors = (urllib.error.URLError, TimeoutError, http.client.HTTPException, ConnectionResetError)
    with pytest.raises(errors) as caught, urllib.request.urlopen(URL, timeout=TIMEOUT) as response:
        response.read()
    assert type(caught.value) is expected
    if reason is not None:
        assert isinstance(caught.value, urllib.error.URLError)  # narrows: only a URLError has a reason
        assert isinstance(caught.value.reason, reason)


@pytest.mark.outage(HOST, "status", 503, headers={"Retry-After": "1"})
def test_status_is_an_http_error() -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(URL, timeout=TIMEOUT)
    assert (caught.value.code, caught.value.headers["Retry-After"]) == (503, "1")


# A server whose keep-alive timeout ran out as the client sent: the pooled connection is
# closed (or reset) as the second request comes, unanswered.
KEEP_ALIVE_CLOSE = [
    pytest.param(False, marks=pytest.mark.outage(HOST, "keep_alive_close"), id="close"),
    pytest.param(True, marks=pytest.mark.outage(HOST, "keep_alive_close", reset=True), id="reset"),
]


@pytest.mark.parametrize("reset", KEEP_ALIVE_CLOSE)
def test_keep_alive_close_never_meets_urlopen(reset: bool) -> None:
    for _ in range(2):  # urlopen opens a connection for each request: each is answered
        with urllib.request.urlopen(URL, timeout=TIMEOUT) as response:
            assert response.status == 200
