"""Name resolution, connect redirection, blocking and trust: on inside the scope, gone after it."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.connector
import aiohttp.resolver
import httpx
import pytest

from pytest_failover import faults
from pytest_failover.simulator import (
    BlockedHostError,
    FakeDomains,
    UnsupportedClientError,
)


def _addresses(host: Any, port: Any = 443, **kwargs: Any) -> set[tuple[Any, ...]]:
    return {info[4] for info in socket.getaddrinfo(host, port, **kwargs)}


@pytest.mark.parametrize(
    "spelling", ["api.example.com", "API.Example.COM", "api.example.com.", b"api.example.com"]
)
def test_fake_names_resolve_in_any_spelling(fd: FakeDomains, spelling: str | bytes) -> None:
    domain = fd.add("api.example.com")
    assert domain.address.startswith("127.77.")
    assert _addresses(spelling) == {(domain.address, 443)}


def test_each_fake_name_has_its_own_address(fd: FakeDomains) -> None:
    """httpx's async path keeps only the address, so the address alone must pick the server."""
    first, second = fd.add("api.example.com"), fd.add("api2.example.com")
    assert first.address != second.address
    assert _addresses("api2.example.com", "80") == {(second.address, 80)}
    assert _addresses("api2.example.com", None) == {(second.address, 0)}


def test_ipv6_only_lookups_find_no_address(fd: FakeDomains) -> None:
    fd.add("api.example.com")
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("api.example.com", 443, family=socket.AF_INET6)


def test_unregistered_names_pass_through(fd: FakeDomains) -> None:
    fd.add("api.example.com")
    assert all(address[0] in ("127.0.0.1", "::1") for address in _addresses("localhost"))


def test_hooks_and_trust_are_gone_after_the_scope() -> None:
    before = (socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex)
    environment = {name: os.environ.get(name) for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")}
    aiohttp_context = aiohttp.connector._SSL_CONTEXT_VERIFIED
    with FakeDomains() as fd:
        domain = fd.add("api.example.com")
        assert os.environ["SSL_CERT_FILE"] == os.environ["REQUESTS_CA_BUNDLE"]
        assert aiohttp.connector._SSL_CONTEXT_VERIFIED is not aiohttp_context
        trusted = _handshake(domain.https_port, ssl.create_default_context())
    assert (socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex) == before
    assert {name: os.environ.get(name) for name in environment} == environment
    assert aiohttp.connector._SSL_CONTEXT_VERIFIED is aiohttp_context
    assert trusted is None


def test_the_ca_is_trusted_only_inside_the_scope(servers: FakeDomains) -> None:
    domain = servers.add("api.example.com")
    try:
        with servers.intercept():
            inside = _handshake(domain.https_port, ssl.create_default_context())
        outside = _handshake(domain.https_port, ssl.create_default_context())
    finally:
        servers.reset()
    assert inside is None
    assert isinstance(outside, ssl.SSLCertVerificationError)


def _handshake(port: int, context: ssl.SSLContext) -> BaseException | None:
    """Connect by IP and port (no interception needed) and verify as ``api.example.com``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            context.wrap_socket(raw, server_hostname="api.example.com").close()
    except ssl.SSLError as exc:
        return exc
    return None


def test_aiohttp_trusts_the_ca_with_its_import_time_context(fd: FakeDomains) -> None:
    fd.add("api.example.com")

    async def get() -> int:
        async with (
            aiohttp.ClientSession() as session,
            session.get("https://api.example.com/") as response,
        ):
            return response.status

    assert asyncio.run(get()) == 200


@pytest.fixture
def opener_built_before() -> Iterator[urllib.request.OpenerDirector]:
    """The opener ``urlopen()`` keeps once it ran, as Python 3.12 and later build it: its
    HTTPS context made at the first call, here before any fake domain was up."""
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl.create_default_context()))
    urllib.request.install_opener(opener)
    yield opener
    urllib.request.install_opener(None)  # urlopen() builds its own again


def test_urllib_trusts_each_ca_with_the_opener_it_kept(
    servers: FakeDomains, opener_built_before: urllib.request.OpenerDirector
) -> None:
    """A test of a later ``FakeDomains`` (another CA) after one of the session's, both through
    the opener ``urlopen()`` kept: each CA is trusted there in turn."""
    servers.add("api.example.com")
    try:
        with servers.intercept(), urllib.request.urlopen("https://api.example.com/", timeout=5) as first:
            assert first.status == 200
    finally:
        servers.reset()
    with FakeDomains() as other:
        other.add("other.example.net")
        with urllib.request.urlopen("https://other.example.net/", timeout=5) as second:
            assert json.loads(second.read())["domain"] == "other.example.net"


def test_two_fake_domain_sets_can_intercept_at_once(fd: FakeDomains) -> None:
    outer = fd.add("api.example.com")
    with FakeDomains() as other:
        inner = other.add("other.example.net")
        with httpx.Client() as client:
            assert client.get("https://api.example.com/").json()["domain"] == "api.example.com"
            assert client.get("https://other.example.net/").json()["domain"] == "other.example.net"
    assert httpx.get("https://api.example.com/").status_code == 200  # the outer set still works
    assert _addresses("api.example.com") == {(outer.address, 443)}
    with socket.socket() as sock:  # the inner set's address leads nowhere any more
        assert sock.connect_ex((inner.address, 443)) == errno.ECONNREFUSED


# -- block_unknown_hosts


@pytest.fixture
def blocking() -> Iterator[FakeDomains]:
    with FakeDomains(block_unknown_hosts=True) as fd:
        fd.add("api.example.com")
        yield fd


def test_blocking_fails_lookups_of_other_names_loudly(blocking: FakeDomains) -> None:
    with pytest.raises(BlockedHostError, match=r"looked up 'www\.python\.org'"):
        socket.getaddrinfo("www.python.org", 443)
    with pytest.raises(
        BlockedHostError
    ):  # not an httpx.ConnectError a failover client would swallow
        httpx.get("https://www.python.org/")
    assert blocking.blocked == ["www.python.org", "www.python.org"]


def test_blocking_fails_connects_to_other_addresses(blocking: FakeDomains) -> None:
    with (
        socket.socket() as sock,
        pytest.raises(BlockedHostError, match=r"connected to 192\.0\.2\.1:80"),
    ):
        sock.connect(("192.0.2.1", 80))


def test_blocking_lets_fake_and_loopback_hosts_through(blocking: FakeDomains) -> None:
    assert httpx.get("https://api.example.com/").status_code == 200
    assert _addresses("localhost")
    assert _addresses("127.0.0.1") == {("127.0.0.1", 443)}
    assert blocking.blocked == []


# -- clients that cannot be reached get an error, not the internet


def test_uvloop_is_refused() -> None:
    """uvloop resolves in libuv: the check names it instead of letting real DNS answer."""
    uvloop_like = type("Loop", (asyncio.SelectorEventLoop,), {"__module__": "uvloop.loop"})
    loop = uvloop_like()
    try:
        with pytest.raises(UnsupportedClientError, match="uvloop"):
            FakeDomains.check_event_loop(loop)
    finally:
        loop.close()
    FakeDomains.check_event_loop(asyncio.new_event_loop())  # asyncio's own loop is fine


def test_aiohttp_async_resolver_is_refused_for_fake_names(fd: FakeDomains) -> None:
    """aiodns bypasses the socket module; asking it for a fake name is an error, not real DNS."""
    fd.add("api.example.com")
    resolver = object.__new__(aiohttp.resolver.AsyncResolver)
    with pytest.raises(UnsupportedClientError, match="ThreadedResolver"):
        asyncio.run(resolver.resolve("api.example.com", 443))


def test_fake_domains_work_without_any_faults_module_import() -> None:
    """The simulator is plain Python: usable outside pytest, faults by name only."""
    with FakeDomains() as fd:
        fd.add("api.example.com")
        fd.fail("api.example.com", "dns_nxdomain")
        with pytest.raises(socket.gaierror):
            socket.getaddrinfo("api.example.com", 443)
        assert fd.events("api.example.com")[0].fault == faults.dns_nxdomain()


@pytest.mark.parametrize("own_bundle", [False, True])
def test_the_trusted_bundle_keeps_the_usual_roots(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, own_bundle: bool
) -> None:
    """Trusting the test CA adds to certifi's roots (or to the user's SSL_CERT_FILE), never replaces them."""
    import certifi

    roots = tmp_path / "corporate.pem"
    with open(certifi.where(), "rb") as f:
        roots.write_bytes(
            f.read().split(b"-----END CERTIFICATE-----")[-2] + b"-----END CERTIFICATE-----\n"
        )
    if own_bundle:
        monkeypatch.setenv("SSL_CERT_FILE", str(roots))
    else:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    public = Path(certifi.where()).read_bytes()
    expected = roots.read_bytes() if own_bundle else public
    with FakeDomains() as fd:
        for path in (os.environ["SSL_CERT_FILE"], os.environ["REQUESTS_CA_BUNDLE"]):
            with open(path, "rb") as f:
                bundle = f.read()
            assert bundle.startswith(expected.rstrip(b"\n"))
            assert bundle.endswith(fd.ca_pem)
        assert Path(fd.ca_bundle).read_bytes().startswith(public.rstrip(b"\n"))
    assert os.environ.get("SSL_CERT_FILE") == (str(roots) if own_bundle else None)


def test_connecting_by_name_reaches_the_fake_server(fd: FakeDomains) -> None:
    """``sock.connect(("api.example.com", 80))`` resolves in C; it is routed all the same."""
    fd.add("api.example.com")
    with socket.socket() as sock:
        sock.settimeout(5)
        sock.connect(("API.example.com", 80))
        sock.sendall(b"GET /by-name HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    assert [r.path for r in fd.requests("api.example.com")] == ["/by-name"]
    fd.fail("api.example.com", faults.dns_nxdomain())
    with socket.socket() as sock, pytest.raises(socket.gaierror):
        sock.connect(("api.example.com", 80))
