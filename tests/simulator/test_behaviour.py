"""Faults over real sockets: composites, fault changes mid-test, recording, handlers, certificates."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp
import httpx
import pytest
import requests

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains, RecordedRequest, Response, UnknownDomainError

URL = "https://api.example.com/v1/rooms"


@pytest.fixture
def api(fd: FakeDomains) -> FakeDomains:
    fd.add("api.example.com")
    return fd


@pytest.fixture
def client(api: FakeDomains) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def test_flapping_fails_the_first_requests_then_recovers(
    api: FakeDomains, client: httpx.Client
) -> None:
    api.fail("api.example.com", faults.flapping(fail=2, fault=faults.status(503)))
    assert [client.get(URL).status_code for _ in range(4)] == [503, 503, 200, 200]
    assert [r.fault for r in api.requests("api.example.com")] == [
        faults.status(503), faults.status(503), faults.healthy(), faults.healthy(),
    ]  # fmt: skip


def test_flapping_connect_fault_counts_connections(api: FakeDomains, client: httpx.Client) -> None:
    api.fail("api.example.com", faults.flapping(fail=1, fault=faults.refused()))
    with pytest.raises(httpx.ConnectError):
        client.get(URL)
    assert client.get(URL).status_code == 200
    assert [(e.stage, e.fault) for e in api.events("api.example.com")] == [
        ("connect", faults.refused())
    ]


def test_rate_with_a_seed_repeats_its_sequence(api: FakeDomains, client: httpx.Client) -> None:
    def run() -> list[int]:
        api.fail("api.example.com", faults.rate(0.5, faults.status(500), seed=3))
        return [client.get(URL).status_code for _ in range(12)]

    first = run()
    assert first == run()
    assert set(first) == {200, 500}


def test_latency_delays_a_healthy_answer(api: FakeDomains, client: httpx.Client) -> None:
    client.get(URL)  # connect first: only the answer is delayed
    api.fail("api.example.com", faults.latency(0.15, jitter=0.01))
    started = time.perf_counter()
    assert client.get(URL).status_code == 200
    assert time.perf_counter() - started >= 0.14


def test_dns_timeout_is_bounded_and_fails_like_a_resolver(api: FakeDomains) -> None:
    api.fail("api.example.com", faults.dns_timeout(0.1))
    started = time.perf_counter()
    with pytest.raises(socket.gaierror) as info:
        socket.getaddrinfo("api.example.com", 443)
    assert 0.09 <= time.perf_counter() - started < 2
    assert info.value.errno == socket.EAI_AGAIN


def test_connect_timeout_really_waits_for_the_client_timeout(api: FakeDomains) -> None:
    api.fail("api.example.com", faults.connect_timeout())
    started = time.perf_counter()
    with pytest.raises(TimeoutError):
        socket.create_connection(("api.example.com", 443), timeout=0.1)
    assert time.perf_counter() - started >= 0.09


def _read_until_reset(sock: socket.socket) -> bytes:
    """What arrived before the connection was reset (a FIN instead fails the test)."""
    received = b""
    try:
        for _ in range(100):  # bounded: the reset comes within a few reads
            chunk = sock.recv(65536)
            assert chunk, "the connection was closed (FIN) instead of reset"
            received += chunk
    except ConnectionResetError:
        return received
    raise AssertionError("the connection was never reset")


def test_reset_is_a_tcp_reset(api: FakeDomains) -> None:
    """Over plain http the client's read fails with ECONNRESET after part of the answer."""
    api.fail("api.example.com", faults.reset())
    with socket.create_connection(("api.example.com", 80), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        received = _read_until_reset(sock)
    assert received.startswith(b"HTTP/1.1 200")


def test_reset_cuts_the_head_of_an_answer_without_a_body(api: FakeDomains) -> None:
    """A HEAD (or 204) answer has no body to cut: the reset comes halfway through its head,
    so no client ever reads it as a complete answer."""
    api.fail("api.example.com", faults.reset())
    with socket.create_connection(("api.example.com", 80), timeout=5) as sock:
        sock.sendall(b"HEAD / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        received = _read_until_reset(sock)
    assert b"HTTP/1.1 200".startswith(received[:12]) and b"\r\n\r\n" not in received
    with httpx.Client(timeout=5.0) as client, pytest.raises(httpx.TransportError):
        client.head(URL)


_GET = b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"


def _answer(sock: socket.socket) -> bytes:
    """The head and body of one small answer (its ``Content-Length``) read off ``sock``."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split(b":")[1])
    while len(body) < length:
        body += sock.recv(65536)
    return head


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_keep_alive_close_closes_a_kept_alive_connection_as_its_next_request_comes(
    api: FakeDomains, reset: bool
) -> None:
    """The first request of a connection is answered; the next one on it gets no byte of
    an answer: an end of file, or a reset (``reset=True``). A new connection is answered
    again; the server saw and recorded each request, the one it closed on as the fault's."""
    api.fail("api.example.com", faults.keep_alive_close(reset=reset))
    with socket.create_connection(("api.example.com", 80), timeout=5) as sock:
        sock.sendall(_GET)
        assert _answer(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(_GET)
        if reset:
            assert _read_until_reset(sock) == b""
        else:
            assert sock.recv(65536) == b""
    with socket.create_connection(("api.example.com", 80), timeout=5) as sock:
        sock.sendall(_GET)
        assert _answer(sock).startswith(b"HTTP/1.1 200")
    assert [str(r.fault) for r in api.requests("api.example.com")] == ["healthy", "keep_alive_close", "healthy"]


def test_keep_alive_close_takes_a_flag() -> None:
    with pytest.raises(TypeError, match=r"keep_alive_close\(reset=\) is True or False, got 'yes'"):
        faults.keep_alive_close(reset="yes")  # type: ignore[arg-type]  # the wrong type, on purpose


# -- fault changes and pooled connections


@pytest.mark.parametrize("kind", ["httpx", "requests", "aiohttp"])
def test_a_fault_change_drops_pooled_connections(api: FakeDomains, kind: str) -> None:
    """A keep-alive connection opened while healthy cannot hide a later connect fault."""

    async def with_aiohttp() -> tuple[int, type[BaseException] | None]:
        connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver())
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get(URL) as first:
                status = first.status
            api.fail("api.example.com", faults.refused())
            try:
                async with session.get(URL):
                    return status, None
            except aiohttp.ClientError as exc:
                return status, type(exc)

    if kind == "aiohttp":
        status, error = asyncio.run(with_aiohttp())
        assert (status, error) == (200, aiohttp.ClientConnectorError)
        return
    session: Any = httpx.Client() if kind == "httpx" else requests.Session()
    with session:
        assert session.get(URL).status_code == 200
        api.fail("api.example.com", faults.refused())
        with pytest.raises((httpx.ConnectError, requests.ConnectionError)):
            session.get(URL)
        api.heal("api.example.com")
        assert session.get(URL).status_code == 200


def test_healing_releases_a_held_request(api: FakeDomains) -> None:
    """A request held by ``read_timeout`` is cut when the fault changes, not left hanging."""
    api.fail("api.example.com", faults.read_timeout())
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            httpx.get(URL, timeout=10.0)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call)
    started = time.perf_counter()
    worker.start()
    for _ in range(500):  # wait until the server holds the request (bounded)
        if api.requests("api.example.com"):
            break
        time.sleep(0.01)
    api.heal("api.example.com")
    worker.join(5)
    assert time.perf_counter() - started < 5
    assert [type(e) for e in outcome] == [httpx.RemoteProtocolError]


def test_faults_are_per_domain(fd: FakeDomains, client: httpx.Client) -> None:
    fd.add("api2.example.com")
    fd.fail("api.example.com", faults.dns_nxdomain())
    with pytest.raises(httpx.ConnectError):
        client.get(URL)
    assert client.get("https://api2.example.com/").json()["domain"] == "api2.example.com"


def test_a_fault_can_be_given_by_name(api: FakeDomains, client: httpx.Client) -> None:
    api.domain("api.example.com").fail("tls_untrusted")
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        client.get(URL)
    assert api.domain("api.example.com").fault == faults.tls_untrusted()


def test_concurrent_requests_see_a_consistent_fault(api: FakeDomains, client: httpx.Client) -> None:
    """Eight threads share one flapping domain: exactly ``fail`` requests fail."""
    api.fail("api.example.com", faults.flapping(fail=5, fault=faults.status(502)))
    statuses: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(5):
            code = client.get(URL).status_code
            with lock:
                statuses.append(code)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [200] * 35 + [502] * 5
    assert len(api.requests("api.example.com")) == 40


# -- recording


def test_every_request_is_recorded(api: FakeDomains, client: httpx.Client) -> None:
    """A POST reached exactly one domain exactly once, with its headers and body."""
    api.fail("api.example.com", faults.status(503))
    client.post(URL + "?x=1", json={"room": 7}, headers={"Idempotency-Key": "k1"})
    (request,) = api.requests("api.example.com")
    assert (request.method, request.path, request.scheme) == ("POST", "/v1/rooms?x=1", "https")
    assert request.headers["idempotency-key"] == "k1"
    assert request.json() == {"room": 7}
    assert request.fault == faults.status(503)
    assert api.requests() == [request]


def test_reset_forgets_domains_and_records(fd: FakeDomains, client: httpx.Client) -> None:
    fd.add("api.example.com")
    client.get(URL)
    fd.reset()
    with pytest.raises(UnknownDomainError):
        fd.requests("api.example.com")
    fd.add("api.example.com")
    assert fd.requests("api.example.com") == []
    assert fd.domain("api.example.com").fault == faults.healthy()


def test_unknown_domains_get_a_clear_error(fd: FakeDomains) -> None:
    fd.add("api.example.com")
    with pytest.raises(
        UnknownDomainError,
        match=r"'api9.example.com' is not a fake domain .*api\.example\.com.*add\(",
    ):
        fd.fail("api9.example.com", faults.refused())
    with pytest.raises(faults.UnknownFaultError, match="Did you mean 'refused'"):
        fd.fail("api.example.com", "refuse")
    with pytest.raises(ValueError, match="bare host name"):
        fd.add("https://api.example.com")


# -- handlers


def _handled(fd: FakeDomains, handler: Any, path: str = "/v1/rooms") -> httpx.Response:
    fd.add("api.example.com", handler=handler)
    with httpx.Client() as client:
        return client.post(f"https://api.example.com{path}", content=b"hello")


def test_a_callable_handler_answers(fd: FakeDomains) -> None:
    def handler(request: RecordedRequest) -> Mapping[str, Any]:
        return {"echo": request.body.decode(), "path": request.path}

    assert _handled(fd, handler).json() == {"echo": "hello", "path": "/v1/rooms"}


def test_a_handler_may_return_a_full_response(fd: FakeDomains) -> None:
    response = _handled(fd, lambda request: Response(201, "made", {"Location": "/v1/rooms/1"}))
    assert (response.status_code, response.text, response.headers["location"]) == (
        201,
        "made",
        "/v1/rooms/1",
    )


def test_an_async_handler_answers(fd: FakeDomains) -> None:
    async def handler(request: RecordedRequest) -> str:
        await asyncio.sleep(0)
        return "async " + request.method

    assert _handled(fd, handler).text == "async POST"


def test_an_asgi_app_answers(fd: FakeDomains) -> None:
    async def app(
        scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        body = (await receive())["body"]
        text = f"{scope['method']} {scope['path']}?{scope['query_string'].decode()} {body.decode()}"
        await send({"type": "http.response.start", "status": 202, "headers": [(b"x-app", b"asgi")]})
        await send({"type": "http.response.body", "body": text.encode()})

    response = _handled(fd, app, "/v1/rooms?a=1")
    assert (response.status_code, response.headers["x-app"], response.text) == (
        202, "asgi", "POST /v1/rooms?a=1 hello",
    )  # fmt: skip


def test_async_handlers_share_one_event_loop(fd: FakeDomains) -> None:
    """Loop-bound state an app keeps (locks, clients) works from one request to the next."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def handler(request: RecordedRequest) -> str:
        loops.append(asyncio.get_running_loop())
        return "ok"

    fd.add("api.example.com", handler=handler)
    with httpx.Client() as client:
        for _ in range(3):
            client.get(URL)
    assert len(loops) == 3 and len(set(loops)) == 1


def test_a_handler_may_give_its_own_domain_a_connect_fault(fd: FakeDomains) -> None:
    """Its answer still goes out (on a closing connection); the next request meets the fault."""

    def handler(request: RecordedRequest) -> str:
        fd.fail("api.example.com", faults.refused())
        return "last"

    fd.add("api.example.com", handler=handler)
    started = time.perf_counter()
    with httpx.Client() as client:
        assert client.get(URL).text == "last"
        with pytest.raises(httpx.ConnectError):
            client.get(URL)
    assert time.perf_counter() - started < 1.0  # the drop did not wait for the handler


def test_a_failing_handler_answers_500(fd: FakeDomains) -> None:
    def handler(request: RecordedRequest) -> str:
        raise RuntimeError("boom")

    response = _handled(fd, handler)
    assert (response.status_code, "boom" in response.text) == (500, True)


# -- certificates


def _peer_certificate(fd: FakeDomains, host: str) -> dict[str, Any]:
    with (
        socket.create_connection((host, 443), timeout=5) as raw,
        fd.ssl_context().wrap_socket(raw, server_hostname=host) as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    return dict(cert)


def test_cert_not_after_serves_a_certificate_that_expires_soon(fd: FakeDomains) -> None:
    soon = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(
        days=3
    )
    fd.add("api.example.com", cert_not_after=soon)
    not_after = ssl.cert_time_to_seconds(_peer_certificate(fd, "api.example.com")["notAfter"])
    assert not_after == soon.timestamp()
    fd.add("api.example.com")  # adding again without a date: the default certificate
    assert (
        ssl.cert_time_to_seconds(_peer_certificate(fd, "api.example.com")["notAfter"])
        > soon.timestamp()
    )


def test_head_and_no_content_answers_carry_no_body(api: FakeDomains, client: httpx.Client) -> None:
    head = client.head(URL)
    assert (head.status_code, head.content, int(head.headers["content-length"]) > 0) == (
        200,
        b"",
        True,
    )
    api.fail("api.example.com", faults.status(204, "ignored"))
    assert (client.get(URL).status_code, client.get(URL).content) == (204, b"")
    api.fail("api.example.com", faults.status(429, "slow down", headers={"Retry-After": "1"}))
    answer = client.get(URL)
    assert (answer.status_code, answer.text, answer.headers["retry-after"]) == (
        429,
        "slow down",
        "1",
    )
    assert answer.headers["content-type"].startswith("text/plain")


def test_garbage_gets_400(api: FakeDomains) -> None:
    with socket.create_connection(("api.example.com", 80), timeout=5) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 400")


async def test_async_tests_can_change_faults_between_requests(api: FakeDomains) -> None:
    """Inside a running event loop (pytest-asyncio), fail() and heal() take effect at once."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        assert (await client.get(URL)).status_code == 200
        api.fail("api.example.com", faults.dns_nxdomain())
        with pytest.raises(httpx.ConnectError, match="Name or service not known"):
            await client.get(URL)
        api.heal("api.example.com")
        assert (await client.get(URL)).status_code == 200


def test_aiohttp_dns_cache_hides_a_later_dns_fault_as_documented(api: FakeDomains) -> None:
    """aiohttp reuses a cached lookup (a documented limit); without the cache it sees the fault."""

    async def second_request(use_dns_cache: bool) -> int | str:
        connector = aiohttp.TCPConnector(use_dns_cache=use_dns_cache)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get(URL) as first:
                assert first.status == 200
            api.fail("api.example.com", faults.dns_nxdomain())
            try:
                async with session.get(URL) as second:
                    return second.status
            except aiohttp.ClientConnectorDNSError as exc:
                return type(exc).__name__
            finally:
                api.heal("api.example.com")

    assert asyncio.run(second_request(use_dns_cache=True)) == 200
    assert asyncio.run(second_request(use_dns_cache=False)) == "ClientConnectorDNSError"
