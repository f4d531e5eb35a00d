"""Each front-end maps every exception its library can raise from a send or a body read
onto the httpx error the classification knows, through one table; a class the tests do
not list (one a new release adds) fails here instead of escaping the failover loop."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import aiohttp.http_exceptions as aiohttp_errors
import httpx
import pytest
import requests
import urllib3.exceptions as u3
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError

from pytest_failover.integrations import aiohttp as aiohttp_frontend
from pytest_failover.integrations import requests as requests_frontend

Target = type[httpx.TransportError] | None  # None: the exception propagates unchanged

# Everything requests raises from a send, each to what it becomes.
REQUESTS: dict[type[Exception], Target] = {
    requests.exceptions.RequestException: None,
    requests.exceptions.InvalidJSONError: None,
    requests.exceptions.JSONDecodeError: None,
    requests.exceptions.HTTPError: None,
    requests.exceptions.ConnectionError: httpx.ConnectError,  # with no urllib3 reason; see below
    requests.exceptions.ProxyError: httpx.ProxyError,
    requests.exceptions.SSLError: httpx.ConnectError,
    requests.exceptions.ConnectTimeout: httpx.ConnectTimeout,
    requests.exceptions.Timeout: None,  # only its two subclasses are raised
    requests.exceptions.ReadTimeout: httpx.ReadTimeout,
    requests.exceptions.URLRequired: None,
    requests.exceptions.TooManyRedirects: None,
    requests.exceptions.MissingSchema: None,
    requests.exceptions.InvalidSchema: None,
    requests.exceptions.InvalidURL: None,
    requests.exceptions.InvalidProxyURL: None,
    requests.exceptions.InvalidHeader: None,
    requests.exceptions.ChunkedEncodingError: httpx.RemoteProtocolError,
    requests.exceptions.ContentDecodingError: None,
    requests.exceptions.StreamConsumedError: None,
    requests.exceptions.RetryError: None,
    requests.exceptions.UnrewindableBodyError: None,
}

# A plain requests.ConnectionError: what it becomes for each urllib3 exception it may wrap.
CONNECTION_ERROR_REASONS: dict[type[object], Target] = {
    u3.HTTPError: httpx.ConnectError,
    u3.PoolError: httpx.ConnectError,
    u3.RequestError: httpx.ConnectError,
    u3.MaxRetryError: httpx.ConnectError,  # unwrapped before the lookup; never its own reason
    u3.HostChangedError: httpx.ConnectError,
    u3.ReadTimeoutError: httpx.ReadTimeout,
    u3.EmptyPoolError: httpx.ConnectError,
    u3.FullPoolError: httpx.ConnectError,
    u3.ClosedPoolError: httpx.ConnectError,
    u3.SSLError: httpx.ConnectError,
    u3.ProxyError: httpx.ConnectError,
    u3.DecodeError: httpx.ConnectError,
    u3.ProtocolError: httpx.ReadError,
    u3.ResponseNotChunked: httpx.ReadError,
    u3.TimeoutStateError: httpx.ConnectError,
    u3.TimeoutError: httpx.ConnectError,
    u3.ConnectTimeoutError: httpx.ConnectTimeout,
    u3.NewConnectionError: httpx.ConnectError,
    u3.NameResolutionError: httpx.ConnectError,
    u3.LocationValueError: httpx.ConnectError,
    u3.LocationParseError: httpx.ConnectError,
    u3.URLSchemeUnknown: httpx.ConnectError,
    u3.ProxySchemeUnknown: httpx.ConnectError,
    u3.ResponseError: httpx.ConnectError,
    u3.BodyNotHttplibCompatible: httpx.ConnectError,
    u3.IncompleteRead: httpx.ConnectError,
    u3.InvalidChunkLength: httpx.ConnectError,
    u3.InvalidHeader: httpx.ConnectError,
    u3.HeaderParsingError: httpx.ConnectError,
    u3.UnrewindableBodyError: httpx.ConnectError,
    OSError: httpx.ReadError,  # the socket's own, raised while the answer's head was read
    ConnectionResetError: httpx.ReadError,
    type(None): httpx.ConnectError,
}

# Everything urllib3 raises from a body read (requests does not wrap those), each to what it becomes.
URLLIB3_BODY: dict[type[Exception], Target] = {
    u3.HTTPError: None,
    u3.PoolError: None,
    u3.RequestError: None,
    u3.MaxRetryError: None,
    u3.HostChangedError: None,
    u3.ReadTimeoutError: httpx.ReadTimeout,
    u3.EmptyPoolError: None,
    u3.FullPoolError: None,
    u3.ClosedPoolError: None,
    u3.SSLError: httpx.ReadError,
    u3.ProxyError: None,
    u3.DecodeError: None,  # bodies are read undecoded: never raised
    u3.ProtocolError: httpx.RemoteProtocolError,
    u3.ResponseNotChunked: httpx.RemoteProtocolError,
    u3.TimeoutStateError: None,
    u3.TimeoutError: None,
    u3.ConnectTimeoutError: None,
    u3.NewConnectionError: None,
    u3.NameResolutionError: None,
    u3.LocationValueError: None,
    u3.LocationParseError: None,
    u3.URLSchemeUnknown: None,
    u3.ProxySchemeUnknown: None,
    u3.ResponseError: None,
    u3.BodyNotHttplibCompatible: None,
    u3.IncompleteRead: None,  # urllib3 turns it into a ProtocolError before it leaves a read
    u3.InvalidChunkLength: None,  # likewise
    u3.InvalidHeader: None,
    u3.HeaderParsingError: None,
    u3.UnrewindableBodyError: None,
    OSError: httpx.RemoteProtocolError,
}

# Everything aiohttp raises from a send or a body read, each to what it becomes.
AIOHTTP: dict[type[aiohttp.ClientError], Target] = {
    aiohttp.ClientError: None,
    aiohttp.ClientResponseError: None,
    aiohttp.ContentTypeError: None,
    aiohttp.WSServerHandshakeError: None,
    aiohttp.ClientHttpProxyError: httpx.ProxyError,
    aiohttp.TooManyRedirects: None,
    aiohttp.ClientConnectionError: httpx.ReadError,
    aiohttp.ClientConnectionResetError: httpx.ReadError,
    aiohttp.ClientOSError: httpx.ReadError,
    aiohttp.ClientConnectorError: httpx.ConnectError,
    aiohttp.ClientConnectorDNSError: httpx.ConnectError,
    aiohttp.ClientProxyConnectionError: httpx.ProxyError,
    aiohttp.client_exceptions.UnixClientConnectorError: httpx.ConnectError,
    aiohttp.ClientSSLError: httpx.ConnectError,
    aiohttp.ClientConnectorSSLError: httpx.ConnectError,
    aiohttp.ClientConnectorCertificateError: httpx.ConnectError,
    aiohttp.ServerConnectionError: httpx.ReadError,
    aiohttp.ServerDisconnectedError: httpx.RemoteProtocolError,
    aiohttp.ServerTimeoutError: httpx.ReadTimeout,
    aiohttp.ConnectionTimeoutError: httpx.ConnectTimeout,
    aiohttp.SocketTimeoutError: httpx.ReadTimeout,
    aiohttp.ServerFingerprintMismatch: httpx.ConnectError,
    aiohttp.ClientPayloadError: httpx.RemoteProtocolError,
    aiohttp.InvalidURL: None,
    aiohttp.InvalidUrlClientError: None,
    aiohttp.InvalidUrlRedirectClientError: None,
    aiohttp.RedirectClientError: None,
    aiohttp.NonHttpUrlRedirectClientError: None,
    aiohttp.NonHttpUrlClientError: None,
}
if hasattr(aiohttp, "UploadAbortedError"):  # new in aiohttp 3.14.4 (the floor is 3.14.0)
    AIOHTTP[aiohttp.UploadAbortedError] = None

# An aiohttp.ClientResponseError by what it was raised from: an answer aiohttp's parser
# failed on (each parser error class), or an error status raised for (nothing).
AIOHTTP_RESPONSE_ERROR_CAUSES: dict[type[object], Target] = {
    **{cls: httpx.RemoteProtocolError for cls in (
        aiohttp_errors.HttpProcessingError, aiohttp_errors.BadHttpMessage, aiohttp_errors.HttpBadRequest,
        aiohttp_errors.PayloadEncodingError, aiohttp_errors.ContentEncodingError,
        aiohttp_errors.TransferEncodingError, aiohttp_errors.ContentLengthError,
        aiohttp_errors.DecompressSizeError, aiohttp_errors.LineTooLong, aiohttp_errors.InvalidHeader,
        aiohttp_errors.BadStatusLine, aiohttp_errors.BadHttpMethod, aiohttp_errors.InvalidURLError,
    )},
    type(None): None,
}  # fmt: skip


def subclasses(root: type[Any]) -> Iterator[type[Any]]:
    """``root`` and every class below it, each once."""
    seen: set[type[Any]] = set()
    stack = [root]
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.add(cls)
            yield cls
            stack.extend(cls.__subclasses__())


def of(module: str, root: type[Any]) -> set[type[Any]]:
    """The classes below ``root`` defined in ``module`` (others' subclasses are theirs to map)."""
    return {cls for cls in subclasses(root) if cls.__module__.startswith(module)}


def test_every_requests_exception_maps_as_listed() -> None:
    """Each exception class requests defines maps to the httpx error listed for it."""
    assert of("requests", requests.RequestException) == set(REQUESTS)
    got = {cls: requests_frontend._target(cls, type(None)) for cls in REQUESTS}
    assert got == REQUESTS


def test_a_requests_connection_error_maps_by_the_urllib3_exception_it_wraps() -> None:
    """A plain ``requests.ConnectionError`` maps by its reason, for each urllib3 exception."""
    assert of("urllib3", u3.HTTPError) | {OSError, ConnectionResetError, type(None)} == set(
        CONNECTION_ERROR_REASONS
    )
    got = {
        said: requests_frontend._target(requests.exceptions.ConnectionError, said)
        for said in CONNECTION_ERROR_REASONS
    }
    assert got == CONNECTION_ERROR_REASONS


def test_every_urllib3_exception_from_a_body_read_maps_as_listed() -> None:
    """Each urllib3 exception class maps, raised by a body read, to the httpx error listed for it."""
    assert of("urllib3", u3.HTTPError) | {OSError} == set(URLLIB3_BODY)
    got = {cls: requests_frontend._target(cls, type(None)) for cls in URLLIB3_BODY}
    assert got == URLLIB3_BODY


def test_every_aiohttp_client_error_maps_as_listed() -> None:
    """Each ``aiohttp.ClientError`` subclass maps to the httpx error listed for it."""
    assert of("aiohttp", aiohttp.ClientError) == set(AIOHTTP)
    got = {cls: aiohttp_frontend._target(cls, type(None)) for cls in AIOHTTP}
    assert got == AIOHTTP


def test_an_aiohttp_response_error_maps_by_what_it_was_raised_from() -> None:
    """A ``ClientResponseError`` raised from a parser error is the domain's malformed
    answer, for every parser error class; one raised for an error status (no cause) is
    the caller's and propagates."""
    assert of("aiohttp", aiohttp_errors.HttpProcessingError) | {type(None)} == set(AIOHTTP_RESPONSE_ERROR_CAUSES)
    got = {said: aiohttp_frontend._target(aiohttp.ClientResponseError, said) for said in AIOHTTP_RESPONSE_ERROR_CAUSES}
    assert got == AIOHTTP_RESPONSE_ERROR_CAUSES


REQUEST = httpx.Request("GET", "http://127.0.0.1:9/x")
NOTHING: Any = None  # for urllib3's pool and connection arguments, which the mapping never reads


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (
            requests.exceptions.ConnectionError(
                MaxRetryError(NOTHING, "/x", NewConnectionError(NOTHING, "refused"))
            ),
            httpx.ConnectError,
        ),
        (
            requests.exceptions.ConnectionError(ProtocolError("aborted", ConnectionResetError())),
            httpx.ReadError,
        ),
        (
            requests.exceptions.ReadTimeout(ReadTimeoutError(NOTHING, "/x", "read timed out")),
            httpx.ReadTimeout,
        ),
        (ProtocolError("Connection broken"), httpx.RemoteProtocolError),
    ],
)
def test_requests_errors_are_raised_as_httpx_errors_caused_by_them(
    raised: Exception, expected: type[httpx.TransportError]
) -> None:
    """The mapped error has the listed class, the original's message and the request."""
    error = requests_frontend._httpx_error(raised, REQUEST)
    assert type(error) is expected and error.request is REQUEST and str(error) == str(raised)


def test_an_unmapped_requests_error_propagates_unchanged_without_a_cause() -> None:
    """A send error that says nothing about the domain leaves as requests raised it,
    not chained to itself."""
    bad = requests.exceptions.InvalidHeader("bad header")

    def send(*args: object) -> requests.Response:
        raise bad

    io = requests_frontend._AdapterIO(send)
    prepared = requests.Request("GET", "http://127.0.0.1:9/x").prepare()
    request = httpx.Request(
        "GET",
        "http://127.0.0.1:9/x",
        extensions={
            "timeout": {"connect": 1.0, "read": 1.0},
            "pytest_failover.requests": (prepared, True, None, None, None),
        },
    )
    with pytest.raises(requests.exceptions.InvalidHeader) as caught:
        io.handle_request(request)
    assert caught.value is bad and bad.__cause__ is None


class _Raw:
    """A urllib3 response whose body read fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def read(self, decode_content: bool = True) -> bytes:
        raise self.error

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        raise self.error
        yield b""  # a generator, as urllib3's


@pytest.mark.parametrize("sized", [True, False], ids=["one read", "in chunks"])
def test_a_requests_body_read_error_is_mapped_or_left_as_it_is(sized: bool) -> None:
    """A body read that breaks raises the httpx error that classifies like it, caused by
    it; one that says nothing about the domain (a bad encoding) leaves unchanged, no cause."""
    native = requests.Response()
    named = {"content-length": ("Content-Length", "9")} if sized else {}
    broken = ProtocolError("Connection broken")
    native.raw = _Raw(broken)
    with pytest.raises(httpx.RemoteProtocolError) as caught:
        b"".join(requests_frontend._Body(native, REQUEST, named))
    assert caught.value.__cause__ is broken and caught.value.request is REQUEST
    undecodable = u3.DecodeError("bad")
    native.raw = _Raw(undecodable)
    with pytest.raises(u3.DecodeError) as left:
        b"".join(requests_frontend._Body(native, REQUEST, named))
    assert left.value is undecodable and undecodable.__cause__ is None


def test_aiohttp_errors_are_raised_as_httpx_errors_caused_by_them() -> None:
    """The mapped error has the listed class, the original's message and the request."""
    raised = aiohttp.ServerDisconnectedError("gone")
    error = aiohttp_frontend._httpx_error(raised, REQUEST)
    assert (
        type(error) is httpx.RemoteProtocolError
        and error.request is REQUEST
        and str(error) == str(raised)
    )
    assert aiohttp_frontend._httpx_error(aiohttp.InvalidURL("x"), REQUEST) is None


def test_every_row_of_each_table_is_the_first_match_of_a_listed_exception() -> None:
    """No row of a front-end's error table is dead: each is the one that decides for at
    least one of the exceptions listed above (a row shadowed by an earlier one would be)."""
    requests_cases = (
        [(cls, type(None)) for cls in REQUESTS]
        + [(requests.exceptions.ConnectionError, said) for said in CONNECTION_ERROR_REASONS]
        + [(cls, type(None)) for cls in URLLIB3_BODY]
    )
    used = {requests_frontend._row(raised, said) for raised, said in requests_cases}
    assert used == set(range(len(requests_frontend._ERRORS)))
    aiohttp_cases = [(cls, type(None)) for cls in AIOHTTP] + [
        (aiohttp.ClientResponseError, said) for said in AIOHTTP_RESPONSE_ERROR_CAUSES
    ]
    used = {aiohttp_frontend._row(raised, said) for raised, said in aiohttp_cases}
    assert used == set(range(len(aiohttp_frontend._ERRORS)))
