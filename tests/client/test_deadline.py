"""The deadline bounds each whole attempt, under asyncio, trio and threads alike."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import ModuleType

import anyio
import httpx
import httpx2
import pytest
import requests

import pytest_failover
from pytest_failover import (
    AsyncFailoverTransport,
    FailoverError,
    FailoverTransport,
    Policy,
    Pool,
    faults,
)
from pytest_failover import httpx2 as pf2
from pytest_failover.integrations.requests import FailoverAdapter
from pytest_failover.simulator import FakeDomains

from .servers import SocketServer, closed_port

HOST = "trickle.deadline.test"
POLICY = Policy(deadline=0.6, attempt_timeout=0.6)


@pytest.fixture(scope="module")
def trickling() -> Iterator[str]:
    """A fake domain that sends its headers at once, then the body a byte every 0.2 s."""
    with FakeDomains() as fake:
        fake.add(HOST)
        fake.fail(HOST, faults.trickle(0.2, b"0123456789"))
        yield f"http://{HOST}"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_attempt_is_cut_at_its_deadline(trickling: str, backend: str) -> None:
    """A body trickled a byte at a time cannot hold an async call past its deadline."""

    async def main() -> float:
        transport = AsyncFailoverTransport([Pool("api", [trickling])], POLICY)
        async with httpx.AsyncClient(transport=transport) as client:
            started = time.monotonic()
            with pytest.raises(FailoverError) as caught:
                await client.get(trickling + "/slow")
            assert caught.value.attempts[0].error_type == "read_timeout"
            return time.monotonic() - started

    elapsed = anyio.run(main, backend=backend)
    assert 0.55 <= elapsed <= 0.6 + 0.1


def test_a_sync_attempt_is_cut_at_its_deadline(trickling: str) -> None:
    """The watchdog cuts a sync call's socket at the deadline, while it waits on the trickle."""
    transport = FailoverTransport([Pool("api", [trickling])], POLICY)
    with httpx.Client(transport=transport) as client:
        started = time.monotonic()
        with pytest.raises(FailoverError) as caught:
            client.get(trickling + "/slow")
        elapsed = time.monotonic() - started
    assert caught.value.attempts[0].error_type == "read_timeout"
    assert 0.55 <= elapsed <= 0.6 + 0.1


class Trickler(SocketServer):
    """Reads a request, sends ``head``, then one byte every 0.1 s for 5 s: every read gets a
    byte well within any read timeout, and the answer never ends."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self._threads: list[threading.Thread] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        thread = threading.Thread(target=self._trickle, args=(conn,), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client cut it: done
            conn.settimeout(5.0)
            conn.recv(65536)
            self._drip(conn, 50)  # bounded: 5 s

    def _drip(self, conn: socket.socket, bytes_: int) -> None:
        """Send ``head``, then ``bytes_`` bytes, one every 0.1 s (fewer if closing)."""
        conn.sendall(self.head)
        for _ in range(bytes_):
            if self._closing.is_set():
                return
            time.sleep(0.1)
            conn.sendall(b"x")

    def close(self) -> None:
        super().close()
        for thread in self._threads:
            thread.join(6.0)


# What a trickler sends first: a header that never ends, or the head of an answer whose
# body ends only when the connection closes (no length, not chunked). Either, cut at the
# deadline, can look whole to a lenient client (http.client takes the cut header line for
# the last; a body that ends at a close ends at a cut): the attempt is a timeout all the same.
HEADS = {
    "head": b"HTTP/1.1 200 OK\r\nX-Slow: ",
    "body to the close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
}


@pytest.fixture(params=list(HEADS))
def head_trickler(request: pytest.FixtureRequest) -> Iterator[str]:
    server = Trickler(HEADS[request.param])
    yield server.url
    server.close()


@pytest.mark.parametrize("http", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_sync_attempt_whose_headers_trickle_is_cut_at_its_deadline(head_trickler: str, http: ModuleType) -> None:
    """A server that trickles its *headers* cannot hold a sync call past its deadline
    either: the watchdog finds the request's socket in httpx's pool before any response;
    nor can one that trickles a body that ends at the close, which the cut ends."""
    front = pf2 if http is httpx2 else pytest_failover
    transport = front.FailoverTransport([Pool("api", [head_trickler])], POLICY)
    with http.Client(transport=transport) as client:
        started = time.monotonic()
        with pytest.raises(front.FailoverError) as caught:
            client.get(head_trickler + "/slow")
        elapsed = time.monotonic() - started
    assert [a.error_type for a in caught.value.attempts] == ["read_timeout"]
    assert 0.55 <= elapsed <= 0.6 + 0.1


def test_a_requests_attempt_whose_headers_trickle_is_cut_at_its_deadline(head_trickler: str) -> None:
    """The requests adapter's twin: urllib3 gives no handle on the socket before the
    headers, so the adapter's connections say which request each is sending, for the
    watchdog to find."""
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter([Pool("api", [head_trickler])], POLICY))
        started = time.monotonic()
        with pytest.raises(FailoverError) as caught:
            session.get(head_trickler + "/slow")
        elapsed = time.monotonic() - started
    assert [a.error_type for a in caught.value.attempts] == ["read_timeout"]
    assert 0.55 <= elapsed <= 0.6 + 0.1


def test_a_requests_attempt_through_a_proxy_whose_headers_trickle_is_cut_at_its_deadline(head_trickler: str) -> None:
    """The same through an HTTP proxy (the trickler stands for one: requests sends it the
    absolute URL): the adapter's proxy managers make the same announcing connections. Before,
    each read was bounded and the whole was not: the call took the trickle's 5 s."""
    domain = f"http://127.0.0.1:{closed_port()}"  # never reached: the proxy answers for it
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter([Pool("api", [domain])], POLICY))
        started = time.monotonic()
        with pytest.raises(FailoverError) as caught:
            session.get(domain + "/slow", proxies={"http": head_trickler})
        elapsed = time.monotonic() - started
    assert [a.error_type for a in caught.value.attempts] == ["read_timeout"]
    assert 0.55 <= elapsed <= 0.6 + 0.1


class SlowOnAsk(Trickler):
    """Keeps each connection alive and answers every request at once, but one for
    ``/slow`` (when :attr:`slow`): that one gets ``head``, then a byte every 0.1 s for at
    most 3 s."""

    slow = True

    def _trickle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client cut it, or left
            conn.settimeout(5.0)
            while request := conn.recv(65536):
                if not (self.slow and request.startswith(b"GET /slow")):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                self._drip(conn, 30)  # bounded: 3 s
                return


def test_threads_sharing_an_adapter_cut_only_the_trickled_heads() -> None:
    """Twelve threads share one adapter over a primary that trickles the head of every
    ``/slow`` answer and answers the rest at once on the same kept-alive connections: each
    slow attempt is cut at its time and its request answered by the backup; no cut ever
    lands on another request's connection (each fast request is answered by the primary at
    its first attempt), and no caller sees a failure."""
    primary, backup = SlowOnAsk(HEADS["head"]), SlowOnAsk(b"")
    backup.slow = False
    policy = Policy(attempt_timeout=0.3, deadline=5.0, breaker_threshold=1_000, sticky=False)
    adapter = FailoverAdapter([Pool("api", [primary.url, backup.url])], policy)
    results: list[tuple[str, list[tuple[str, str | None]]]] = []
    failures: list[BaseException] = []

    def user(index: int) -> None:
        with requests.Session() as session:
            session.mount("http://", adapter)
            for number in range(10):
                path = "/slow" if (index + number) % 4 == 0 else "/fast"
                try:
                    response = session.get(primary.url + path, timeout=5.0)
                except Exception as exc:  # counted: a caller's failure
                    failures.append(exc)
                    continue
                attempts = [(a.domain, a.error_type) for a in response.failover.attempts]  # type: ignore[attr-defined]  # its documented place
                results.append((path, attempts))

    threads = [threading.Thread(target=user, args=(index,)) for index in range(12)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30.0)
    finally:
        adapter.close()
        primary.close()
        backup.close()
    assert not failures
    assert len(results) == 120
    slow = [attempts for path, attempts in results if path == "/slow"]
    fast = [attempts for path, attempts in results if path == "/fast"]
    assert len(slow) == 30
    assert all(attempts == [(primary.url, "read_timeout"), (backup.url, None)] for attempts in slow), slow
    assert all(attempts == [(primary.url, None)] for attempts in fast), [a for a in fast if a != [(primary.url, None)]]
