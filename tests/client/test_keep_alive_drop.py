"""A keep-alive connection the server closes as a request goes out (its keep-alive timeout)
is no verdict on the domain, whether the close reaches the client as an end of file or as
a reset (the request's bytes met the closed socket): every front-end sends an idempotent
request there again at once, once, on another connection (RFC 9112, 9.3.1), as bare aiohttp
does; a second drop, a drop of a request that may not be re-sent, or a reset once the
answer's head came, is the domain's failure. Real loopback sockets, each front-end's own
client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool, faults, semconv
from pytest_failover._classify import OutcomeKind, classify_exception
from pytest_failover.simulator import FakeDomains
from pytest_failover.telemetry_capture import FailoverTelemetry

from .load import alongside
from .servers import LoopbackServer, SocketServer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
# No backoff to wait out, and one failure shows in the breaker at once.
POLICY = Policy(breaker_threshold=1, attempt_timeout=5.0, deadline=10.0)


ENDINGS = ("close", "reset")  # how a connection is dropped: an end of file, or a TCP reset


class DroppingServer(SocketServer):
    """Reads requests; answers the first ``answered`` of each connection and drops the
    connection, unanswered, when the next one comes (``answered=0``: every request is
    dropped). ``ending``: how, one of :data:`ENDINGS`, or ``"cut"``: the answer's head and
    part of its body go out, then a reset. ``requests``: what each connection read, in
    order of accept; ``together``: connections open before any request is answered."""

    def __init__(self, answered: int, ending: str = "close", together: int = 1) -> None:
        self.answered = answered
        self.ending = ending
        self.requests: list[int] = []
        self.together = together  # connections open before any request is answered
        self._all_in = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(10.0)  # bounded: a client that never comes back
        with self._lock:
            self.requests.append(0)
            index = len(self.requests) - 1
            self._conns.append(conn)
            if len(self.requests) >= self.together:
                self._all_in.set()
        thread = threading.Thread(target=self._serve, args=(conn, index), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _serve(self, conn: socket.socket, index: int) -> None:
        buffer = b""
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buffer += data
                while b"\r\n\r\n" in buffer:
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":", 1)[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    buffer = buffer[length:]  # the tests' bodies come in the head's packet
                    with self._lock:
                        self.requests[index] += 1
                        served = self.requests[index]
                    if served > self.answered:
                        self._drop(conn)
                        return
                    self._all_in.wait(5.0)  # bounded: a client that opens fewer
                    conn.sendall(OK)

    def _drop(self, conn: socket.socket) -> None:
        """End ``conn`` unanswered (closed by ``_serve``'s ``with``), as :attr:`ending` says."""
        if self.ending == "cut":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
        if self.ending != "close":  # SO_LINGER 0: the close sends a reset
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.requests)

    def close(self) -> None:
        super().close()
        with self._lock:
            for conn in self._conns:  # a client's idle keep-alive connection: end its thread now
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5.0)


@pytest.fixture(params=ENDINGS)
def keep_alive_one(request: pytest.FixtureRequest) -> Iterator[DroppingServer]:
    server = DroppingServer(answered=1, ending=request.param)
    yield server
    server.close()


@pytest.fixture(params=ENDINGS)
def drops_all(request: pytest.FixtureRequest) -> Iterator[DroppingServer]:
    server = DroppingServer(answered=0, ending=request.param)
    yield server
    server.close()


@pytest.fixture
def cuts_all() -> Iterator[DroppingServer]:
    server = DroppingServer(answered=0, ending="cut")
    yield server
    server.close()


def attempts(view: Any) -> list[tuple[str, str | None]]:
    return [
        (a.domain, a.error_type) for a in sorted(view.failover.attempts, key=lambda a: a.number)
    ]


def results_of(telemetry: FailoverTelemetry) -> dict[str, float]:
    """The attempts metric's total per ``failover.attempt.result`` (those with any)."""
    counted = {result: telemetry.metric("failover.attempts", result=result) for result in semconv.ATTEMPT_RESULTS}
    return {result: total for result, total in counted.items() if total}


def breakers(client: Any) -> list[tuple[str, int]]:
    return [
        (d.breaker, d.consecutive_failures) for d in client.transport.state().pools["api"].domains
    ]


def test_a_connection_closed_as_the_request_went_out_is_sent_again_there_once(
    make_client: Any,
    keep_alive_one: DroppingServer,
    servers: dict[str, LoopbackServer],
    failover_telemetry: FailoverTelemetry,
) -> None:
    """Each connection serves one request and is closed by the server as the next goes out
    on it: every request after the first is sent again on a new connection to the same
    domain, answered there; no breaker counts anything, the backup sees nothing, and the
    attempts metric says ``dropped``, not ``failure``, of each drop."""
    primary, backup = keep_alive_one.url, servers["b"]
    client = make_client([Pool("api", [primary, backup.url()])], POLICY)
    views = [client.request("GET", f"{primary}/x") for _ in range(3)]
    assert [v.status_code for v in views] == [200, 200, 200]
    assert attempts(views[0]) == [(primary, None)]
    for view in views[1:]:
        (domain, dropped), again = attempts(view)
        assert domain == primary and dropped is not None  # the library's error type, as recorded
        assert again == (primary, None)
    assert breakers(client) == [("closed", 0), ("closed", 0)]
    assert keep_alive_one.requests == [2, 2, 1]  # what the server saw: five requests
    assert backup.total == 0
    assert results_of(failover_telemetry) == {"success": 3, "dropped": 2}


def test_a_second_drop_in_the_same_request_is_the_domains_failure(
    make_client: Any,
    drops_all: DroppingServer,
    servers: dict[str, LoopbackServer],
    failover_telemetry: FailoverTelemetry,
) -> None:
    """A server that closes every connection unanswered: the request is sent there again
    once, and the second drop is the domain's failure, which moves it to the backup (and
    is reported as one)."""
    primary, backup = drops_all.url, servers["b"]
    client = make_client([Pool("api", [primary, backup.url()])], POLICY)
    view = client.request("GET", f"{primary}/x")
    assert view.status_code == 200
    domains = [domain for domain, _ in attempts(view)]
    assert domains == [primary, primary, backup.url()]
    assert [error is None for _, error in attempts(view)] == [False, False, True]
    assert breakers(client)[0] == ("open", 1)
    assert drops_all.requests == [1, 1] and backup.total == 1
    assert results_of(failover_telemetry) == {"dropped": 1, "failure": 1, "success": 1}


def test_a_drop_of_a_request_that_may_not_be_sent_again_is_the_domains_failure(
    make_client: Any, keep_alive_one: DroppingServer, servers: dict[str, LoopbackServer]
) -> None:
    """A POST without an idempotency key whose connection is closed as it goes out may
    have reached the server: it is not sent again, anywhere (the breaker counts it)."""
    primary, backup = keep_alive_one.url, servers["b"]
    client = make_client([Pool("api", [primary, backup.url()])], POLICY)
    assert client.request("GET", f"{primary}/x").status_code == 200
    with pytest.raises(client.errors.FailoverError):
        client.request("POST", f"{primary}/x", content=b"{}")
    assert keep_alive_one.requests == [2]
    assert backup.total == 0
    assert breakers(client)[0] == ("open", 1)


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_the_simulators_keep_alive_close_costs_the_primary_nothing(make_client: Any, reset: bool) -> None:
    """The outage simulator's ``keep_alive_close`` (TLS, every front-end): each request on a
    kept-alive connection is closed unanswered and sent again at once on another one, which
    the primary answers. The backup never hears of it; the breakers count nothing."""
    primary, backup = "https://api.example.com", "https://api2.example.com"
    with FakeDomains(block_unknown_hosts=True) as fake:
        fake.add("api.example.com")
        fake.add("api2.example.com")
        fake.fail("api.example.com", faults.keep_alive_close(reset=reset))
        client = make_client([Pool("api", [primary, backup])], POLICY)
        views = [client.request("GET", f"{primary}/x") for _ in range(3)]
        assert [v.status_code for v in views] == [200, 200, 200]
        assert [len(attempts(v)) for v in views] == [1, 2, 2]
        assert {domain for v in views for domain, _ in attempts(v)} == {primary}
        assert breakers(client) == [("closed", 0), ("closed", 0)]
        assert [str(r.fault) for r in fake.requests("api.example.com")] == ["healthy"] + ["keep_alive_close", "healthy"] * 2
        assert fake.requests("api2.example.com") == []


def test_a_reset_after_the_answers_head_came_is_the_domains_failure(
    make_client: Any, cuts_all: DroppingServer, servers: dict[str, LoopbackServer]
) -> None:
    """The answer's head and part of its body came, then a reset: the domain answered and
    broke; the request is not sent there again but moves to the backup, and the breaker
    counts the failure."""
    primary, backup = cuts_all.url, servers["b"]
    client = make_client([Pool("api", [primary, backup.url()])], POLICY)
    view = client.request("GET", f"{primary}/x")
    assert view.status_code == 200
    assert [domain for domain, _ in attempts(view)] == [primary, backup.url()]
    assert breakers(client)[0] == ("open", 1)
    assert cuts_all.requests == [1] and backup.total == 1


def test_an_attempt_cut_at_its_time_is_a_timeout_not_a_drop() -> None:
    """The sync watchdog shuts a socket down at the attempt's deadline, which httpcore reads
    as a server that disconnected unanswered: the attempt's error is the timeout, raised
    from that, and a timeout is the domain's failure, never a drop sent there again."""
    timeout = httpx.ReadTimeout("attempt 1 took longer than its 0.250 s")
    timeout.__cause__ = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    assert classify_exception(timeout).kind is OutcomeKind.FAILURE


def _reset(kind: type[httpx.TransportError]) -> httpx.TransportError:
    """httpx's ``kind`` of error for a socket the peer reset, chained as httpx raises it
    (``ReadError`` for a read, ``ConnectError`` for a TLS handshake)."""
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        except ConnectionResetError as exc:
            raise kind(str(exc)) from exc
    except httpx.TransportError as error:
        return error


@pytest.mark.parametrize(
    ("error", "head_came", "kind"),
    [
        (_reset(httpx.ReadError), False, OutcomeKind.DROPPED),
        (_reset(httpx.ReadError), True, OutcomeKind.FAILURE),
        (_reset(httpx.ConnectError), False, OutcomeKind.FAILURE),
        (httpx.ReadError("[Errno 110] Connection timed out"), False, OutcomeKind.FAILURE),
    ],
    ids=["reset-before-the-head", "reset-in-the-body", "reset-connecting", "another-read-error"],
)
def test_only_a_reset_once_connected_and_before_the_head_is_a_drop(
    error: httpx.TransportError, head_came: bool, kind: OutcomeKind
) -> None:
    """A reset is told by its errno along the chain (``ConnectionResetError``, or
    aiohttp's ``ClientOSError`` of one); one while connecting, or once the head came, is
    the domain's failure, as is any other read error."""
    assert classify_exception(error, head_came=head_came).kind is kind


@pytest.mark.parametrize(
    ("message", "body_started", "kind"),
    [
        ("Server disconnected without sending a response.", False, OutcomeKind.DROPPED),
        ("Server disconnected without sending a response.", True, OutcomeKind.FAILURE),
        ("illegal status line: bytearray(b'garbage')", False, OutcomeKind.FAILURE),
        ("peer closed connection without sending complete message body", False, OutcomeKind.FAILURE),
    ],
)
def test_only_a_connection_closed_before_any_byte_of_the_answer_is_a_drop(
    message: str, body_started: bool, kind: OutcomeKind
) -> None:
    """httpcore says a connection closed unanswered only in its message; a malformed answer,
    or a body cut short, is the domain's failure."""
    assert classify_exception(httpx.RemoteProtocolError(message), body_started=body_started).kind is kind


THREADS, PER_THREAD, TASKS, PER_TASK = 12, 15, 100, 3


def test_threads_and_tasks_ride_out_keep_alive_closes_with_no_failure_seen() -> None:
    """A dozen threads on one sync transport and a hundred tasks on one async transport,
    while the primary closes (or resets) half the requests that come on a kept-alive
    connection: every request is answered (a second close in one request moves it to the
    backup), and no error reaches a caller."""
    primary, backup = "http://api.example.com", "http://api2.example.com"
    failures: list[BaseException] = []
    answered: Counter[str] = Counter()
    lock = threading.Lock()
    policy = Policy(attempt_timeout=5.0, deadline=10.0)
    with FakeDomains(block_unknown_hosts=True) as fake:
        fake.add("api.example.com")
        fake.add("api2.example.com")
        fake.fail("api.example.com", faults.rate(0.5, faults.keep_alive_close(reset=True), seed=27))
        sync = FailoverTransport([Pool("api", [primary, backup])], policy)
        client = httpx.Client(transport=sync)

        def thread() -> None:
            for _ in range(PER_THREAD):
                try:
                    response = client.get(f"{primary}/x")
                    with lock:
                        answered[response.extensions["failover"].domain] += response.status_code == 200
                except Exception as exc:  # a user-visible failure: counted, not raised here
                    with lock:
                        failures.append(exc)

        async def tasks() -> None:
            transport = AsyncFailoverTransport([Pool("api", [primary, backup])], policy)
            async with httpx.AsyncClient(transport=transport) as aclient:

                async def task() -> None:
                    for _ in range(PER_TASK):
                        try:
                            response = await aclient.get(f"{primary}/x")
                            answered[response.extensions["failover"].domain] += response.status_code == 200
                        except Exception as exc:  # counted, as above
                            failures.append(exc)

                await asyncio.gather(*(task() for _ in range(TASKS)))

        alongside([threading.Thread(target=thread) for _ in range(THREADS)], tasks)
        client.close()
        closed = sum(str(r.fault) == "keep_alive_close" for r in fake.requests("api.example.com"))
    assert failures == []
    assert sum(answered.values()) == THREADS * PER_THREAD + TASKS * PER_TASK
    assert closed > 0  # the race happened, and often


# Each client as its users write it, sending two requests at once (threads, or tasks).
NATIVE = ("httpx", "httpx-async", "httpx2", "httpx2-async", "requests", "aiohttp")


def _sent_natively(kind: str, pools: list[Pool], url: str) -> tuple[list[Any], Any]:
    """Two GETs of ``url`` at once, then a third; each one's ``FailoverResult``, and the
    front-end (for its state)."""
    if kind in ("httpx", "httpx2", "requests"):
        return _threads(kind, pools, url)
    return asyncio.run(_tasks(kind, pools, url))


def _threads(kind: str, pools: list[Pool], url: str) -> tuple[list[Any], Any]:
    import requests

    from pytest_failover import httpx2 as pf2
    from pytest_failover.integrations.requests import FailoverAdapter

    if kind == "requests":
        front: Any = FailoverAdapter(pools, POLICY)
        session = requests.Session()
        session.mount("http://", front)

        def get() -> Any:
            return session.get(url).failover  # type: ignore[attr-defined]  # its documented place
    else:
        http = httpx2 if kind == "httpx2" else httpx
        front = (pf2.FailoverTransport if kind == "httpx2" else FailoverTransport)(pools, POLICY)
        client = http.Client(transport=front)

        def get() -> Any:
            return client.get(url).extensions["failover"]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: get(), range(2)))
    results.append(get())
    front.close()
    return results, front


async def _tasks(kind: str, pools: list[Pool], url: str) -> tuple[list[Any], Any]:
    import aiohttp

    from pytest_failover import httpx2 as pf2
    from pytest_failover.integrations.aiohttp import FailoverMiddleware

    if kind == "aiohttp":
        front: Any = FailoverMiddleware(pools, POLICY)
        async with aiohttp.ClientSession(middlewares=(front,)) as session:

            async def get() -> Any:
                async with session.get(url) as response:
                    await response.read()
                    return response.failover  # type: ignore[attr-defined]  # its documented place

            results = list(await asyncio.gather(get(), get()))
            results.append(await get())
        return results, front
    http = httpx2 if kind == "httpx2-async" else httpx
    front = (pf2.AsyncFailoverTransport if kind == "httpx2-async" else AsyncFailoverTransport)(pools, POLICY)
    async with http.AsyncClient(transport=front) as client:

        async def aget() -> Any:
            return (await client.get(url)).extensions["failover"]

        results = list(await asyncio.gather(aget(), aget()))
        results.append(await aget())
    return results, front


@pytest.mark.parametrize("kind", NATIVE)
def test_a_resend_that_meets_another_stale_kept_alive_connection_is_sent_again(
    kind: str, servers: dict[str, LoopbackServer], failover_telemetry: FailoverTelemetry
) -> None:
    """A server closes its idle connections together (its keep-alive timeout): a request
    meets one, is sent again on the next kept-alive one (the same race), and then, as
    that one was reused too, once more, on a new connection, answered there; no breaker
    counts anything (Go's rule: a request is sent again while the connection it met was
    a reused one). urllib3 opens a new connection for the request after a failed one
    (its pool hands out the failed one's empty place first): the requests adapter's
    resend is answered at once. The aiohttp middleware cannot tell a reused connection
    from a new one: there the second drop is the domain's failure, as a server that
    closes every connection is."""
    server = DroppingServer(answered=1, together=2)
    backup = servers["b"]
    try:
        results, front = _sent_natively(kind, [Pool("api", [server.url, backup.url()])], f"{server.url}/x")
    finally:
        server.close()
    assert [r.domain for r in results[:2]] == [server.url, server.url]
    third = [(a.domain, a.error_type is None) for a in results[2].attempts]
    if kind == "aiohttp":
        assert third == [(server.url, False), (server.url, False), (backup.url(), True)]
        assert results_of(failover_telemetry) == {"success": 3, "dropped": 1, "failure": 1}
        return
    if kind == "requests":
        assert third == [(server.url, False), (server.url, True)]
        assert sorted(server.requests) == [1, 1, 2]  # one kept-alive connection met the request
        assert results_of(failover_telemetry) == {"success": 3, "dropped": 1}
        return
    assert third == [(server.url, False), (server.url, False), (server.url, True)]
    assert server.requests == [2, 2, 1]  # each kept-alive connection met a request it dropped
    assert [d.breaker for d in front.state().pools["api"].domains] == ["closed", "closed"]
    assert results_of(failover_telemetry) == {"success": 3, "dropped": 2}


def test_resends_after_drops_on_kept_alive_connections_stop_at_their_cap(
    servers: dict[str, LoopbackServer], failover_telemetry: FailoverTelemetry
) -> None:
    """Six kept-alive connections, each closed as the next request comes on it: a request
    is sent again after each drop while the connection it met was a reused one, up to
    ``RESENDS`` times; the drop after that is the domain's failure (its backup answers)."""
    from pytest_failover._plan import RESENDS

    server = DroppingServer(answered=1, together=RESENDS + 2)
    backup = servers["b"]
    pools = [Pool("api", [server.url, backup.url()])]
    transport = FailoverTransport(pools, POLICY)
    try:
        with httpx.Client(transport=transport) as client:
            with concurrent.futures.ThreadPoolExecutor(RESENDS + 2) as pool:
                warm = list(pool.map(lambda _: client.get(f"{server.url}/x"), range(RESENDS + 2)))
            assert [response.status_code for response in warm] == [200] * (RESENDS + 2)
            response = client.get(f"{server.url}/x")
    finally:
        server.close()
    attempts = [(a.domain, a.error_type is None) for a in response.extensions["failover"].attempts]
    assert attempts == [(server.url, False)] * (RESENDS + 1) + [(backup.url(), True)]
    assert results_of(failover_telemetry) == {"success": RESENDS + 3, "dropped": RESENDS, "failure": 1}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_callers_own_trace_still_hears_every_attempt(asynchronous: bool, servers: dict[str, LoopbackServer]) -> None:
    """The resends learn their connection through httpx's ``trace`` extension, which the
    caller may use too: the caller's trace still hears every attempt's events, each
    drop's and each resend's, once."""
    server = DroppingServer(answered=1, together=2)
    pools = [Pool("api", [server.url, servers["b"].url()])]
    heard: list[str] = []

    def mine(event: str, info: Any) -> None:
        heard.append(event)

    async def ours(event: str, info: Any) -> None:
        heard.append(event)

    async def on_loop() -> Any:
        async with httpx.AsyncClient(transport=AsyncFailoverTransport(pools, POLICY)) as client:
            await asyncio.gather(client.get(f"{server.url}/x"), client.get(f"{server.url}/x"))
            return await client.get(f"{server.url}/x", extensions={"trace": ours})

    try:
        if asynchronous:
            response = asyncio.run(on_loop())
        else:
            with httpx.Client(transport=FailoverTransport(pools, POLICY)) as client:
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    list(pool.map(lambda _: client.get(f"{server.url}/x"), range(2)))
                response = client.get(f"{server.url}/x", extensions={"trace": mine})
    finally:
        server.close()
    assert [a.error_type is None for a in response.extensions["failover"].attempts] == [False, False, True]
    assert heard.count("http11.send_request_headers.started") == 3  # each attempt's, once
    assert heard.count("connection.connect_tcp.started") == 1  # the last one's new connection
