"""Every client reaches fake domains by their real names and sees each fault as it would in production.

The table below is the one in docs/simulator.md: what each client raises for each fault.
"""

from __future__ import annotations

import socket
import sys
import urllib.error
from http.client import IncompleteRead

import aiohttp
import httpx
import httpx2
import pytest
import requests
import urllib3.exceptions

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains

from ._clients import CLIENTS

SHORT = 0.1  # the timeout a timeout fault must trip
LONG = 5.0  # every other timeout: generous, so a loaded machine cannot fake a fault

FAULTS: dict[str, faults.Fault] = {
    "dns_nxdomain": faults.dns_nxdomain(),
    "dns_timeout": faults.dns_timeout(0.3),  # well over SHORT: httpx async times out first
    "refused": faults.refused(),
    "connect_timeout": faults.connect_timeout(),
    "read_timeout": faults.read_timeout(),
    "slow": faults.slow(0.5),
    "reset": faults.reset(),
    "tls_expired": faults.tls_expired(),
    "tls_wrong_host": faults.tls_wrong_host(),
    "tls_untrusted": faults.tls_untrusted(),
}

# fault -> client -> (exception type, text found in the exception or its chain)
# Python 3.13's ssl module reports a TLS stream's reset (ECONNRESET); earlier ones read it as
# the stream's end (tests/examples say the same to a downstream suite).
TLS_RESET_IS_EOF = sys.version_info < (3, 13)

EXPECTED: dict[str, dict[str, tuple[type[BaseException], str]]] = {
    "dns_nxdomain": {
        "httpx": (httpx.ConnectError, "Name or service not known"),
        "httpx-async": (httpx.ConnectError, "Name or service not known"),
        "requests": (requests.exceptions.ConnectionError, "Name or service not known"),
        "urllib3": (urllib3.exceptions.NameResolutionError, "Name or service not known"),
        "urllib": (urllib.error.URLError, "Name or service not known"),
        "aiohttp": (aiohttp.ClientConnectorDNSError, "Name or service not known"),
    },
    "dns_timeout": {
        "httpx": (httpx.ConnectError, "Temporary failure in name resolution"),
        # anyio bounds the lookup by the connect timeout
        "httpx-async": (httpx.ConnectTimeout, ""),
        "requests": (requests.exceptions.ConnectionError, "Temporary failure in name resolution"),
        "urllib3": (urllib3.exceptions.NameResolutionError, "Temporary failure in name resolution"),
        "urllib": (urllib.error.URLError, "Temporary failure in name resolution"),
        "aiohttp": (aiohttp.ClientConnectorDNSError, "Temporary failure in name resolution"),
    },
    "refused": {
        "httpx": (httpx.ConnectError, "Connection refused"),
        "httpx-async": (httpx.ConnectError, "All connection attempts failed"),
        "requests": (requests.exceptions.ConnectionError, "Connection refused"),
        "urllib3": (urllib3.exceptions.NewConnectionError, "Connection refused"),
        "urllib": (urllib.error.URLError, "Connection refused"),
        "aiohttp": (aiohttp.ClientConnectorError, "Connect call failed"),
    },
    "connect_timeout": {
        "httpx": (httpx.ConnectTimeout, ""),
        "httpx-async": (httpx.ConnectTimeout, ""),
        "requests": (requests.exceptions.ConnectTimeout, ""),
        "urllib3": (urllib3.exceptions.ConnectTimeoutError, ""),
        "urllib": (urllib.error.URLError, "timed out"),
        "aiohttp": (aiohttp.ConnectionTimeoutError, ""),
    },
    "read_timeout": {
        "httpx": (httpx.ReadTimeout, ""),
        "httpx-async": (httpx.ReadTimeout, ""),
        "requests": (requests.exceptions.ReadTimeout, ""),
        "urllib3": (urllib3.exceptions.ReadTimeoutError, ""),
        "urllib": (TimeoutError, ""),
        "aiohttp": (aiohttp.SocketTimeoutError, ""),
    },
    "reset": {
        # over TLS, blocking clients report the reset as a truncated body, but on Python 3.13,
        # whose ssl module reports it as one (ECONNRESET), as asyncio always did
        "httpx": (httpx.RemoteProtocolError, "peer closed connection")
        if TLS_RESET_IS_EOF
        else (httpx.ReadError, "Connection reset by peer"),
        "httpx-async": (httpx.ReadError, ""),
        "requests": (requests.exceptions.ChunkedEncodingError, "Connection broken"),
        "urllib3": (urllib3.exceptions.ProtocolError, "Connection broken"),
        "urllib": (IncompleteRead, "") if TLS_RESET_IS_EOF else (ConnectionResetError, "Connection reset by peer"),
        "aiohttp": (aiohttp.ClientPayloadError, ""),
    },
}
EXPECTED["slow"] = EXPECTED["read_timeout"]
for _expected in EXPECTED.values():  # httpx2 raises httpx's errors under its own name
    for _http in ("httpx", "httpx-async"):
        _error, _text = _expected[_http]
        _expected[_http.replace("httpx", "httpx2")] = (getattr(httpx2, _error.__name__), _text)
_TLS = {
    "httpx": httpx.ConnectError,
    "httpx-async": httpx.ConnectError,
    "httpx2": httpx2.ConnectError,
    "httpx2-async": httpx2.ConnectError,
    "requests": requests.exceptions.SSLError,
    "urllib3": urllib3.exceptions.SSLError,
    "urllib": urllib.error.URLError,
    "aiohttp": aiohttp.ClientConnectorCertificateError,
}
for _fault, _why in (
    ("tls_expired", "certificate has expired"),
    ("tls_wrong_host", "Hostname mismatch"),
    ("tls_untrusted", "unable to get local issuer certificate"),
):
    EXPECTED[_fault] = {client: (error, _why) for client, error in _TLS.items()}


def _chain_text(exc: BaseException) -> str:
    """The messages of ``exc`` and everything it wraps (causes, contexts, ``reason``)."""
    seen: list[str] = []
    todo: list[object] = [exc]
    while todo and len(seen) < 20:
        item = todo.pop()
        if not isinstance(item, BaseException):
            continue
        seen.append(f"{type(item).__name__}: {item}")
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]
    return "\n".join(seen)


@pytest.mark.parametrize("client", CLIENTS)
def test_healthy_domain_answers_by_its_real_name(fd: FakeDomains, client: str) -> None:
    """A healthy fake domain answers 200 with JSON over https on port 443 and http on port 80."""
    fd.add("api.example.com")
    for scheme in ("https", "http"):
        status, body = CLIENTS[client](f"{scheme}://api.example.com/v1/rooms", LONG, LONG)
        assert (status, b'"domain": "api.example.com"' in body) == (200, True)
    assert [(r.scheme, r.path) for r in fd.requests("api.example.com")] == [
        ("https", "/v1/rooms"),
        ("http", "/v1/rooms"),
    ]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_raises_what_the_client_really_raises(
    fd: FakeDomains, client: str, fault: str
) -> None:
    """Each fault surfaces as the exception the client raises for the real outage."""
    fd.add("api.example.com")
    fd.fail("api.example.com", FAULTS[fault])
    error, text = EXPECTED[fault][client]
    # urllib has a single timeout, which also bounds the TLS handshake: give it more room
    short = SHORT * 3 if client == "urllib" else SHORT
    connect = short if fault in ("connect_timeout", "dns_timeout") else LONG
    read = short if fault in ("read_timeout", "slow") else LONG
    with pytest.raises(error) as info:
        CLIENTS[client]("https://api.example.com/v1/rooms", connect, read)
    assert text in _chain_text(info.value)


@pytest.mark.parametrize("client", CLIENTS)
def test_status_fault_is_an_answer(fd: FakeDomains, client: str) -> None:
    """``status(503, body)`` is answered as such, and the next healthy request succeeds."""
    fd.add("api.example.com")
    fd.fail("api.example.com", faults.status(503, "maintenance"))
    assert CLIENTS[client]("https://api.example.com/", LONG, LONG) == (503, b"maintenance")
    fd.heal("api.example.com")
    assert CLIENTS[client]("https://api.example.com/", LONG, LONG)[0] == 200


def test_other_hosts_pass_through(fd: FakeDomains) -> None:
    """Names that are not fake still resolve the normal way."""
    fd.add("api.example.com")
    assert {info[4][0] for info in socket.getaddrinfo("localhost", 80)} <= {"127.0.0.1", "::1"}
