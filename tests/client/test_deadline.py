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
from pytest_failover.simulator import FakeDomains

from .servers import SocketServer

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


class HeadTrickler(SocketServer):
    """Reads a request, sends a status line, then one byte of a header every 0.1 s for 5 s:
    every read gets a byte well within any read timeout, and no head ever completes."""

    def __init__(self) -> None:
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
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(50):  # bounded: 5 s
                if self._closing.is_set():
                    return
                time.sleep(0.1)
                conn.sendall(b"x")

    def close(self) -> None:
        super().close()
        for thread in self._threads:
            thread.join(6.0)


@pytest.fixture
def head_trickler() -> Iterator[str]:
    server = HeadTrickler()
    yield server.url
    server.close()


@pytest.mark.parametrize("http", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_sync_attempt_whose_headers_trickle_is_cut_at_its_deadline(head_trickler: str, http: ModuleType) -> None:
    """A server that trickles its *headers* cannot hold a sync call past its deadline
    either: the watchdog finds the request's socket in httpx's pool before any response."""
    front = pf2 if http is httpx2 else pytest_failover
    transport = front.FailoverTransport([Pool("api", [head_trickler])], POLICY)
    with http.Client(transport=transport) as client:
        started = time.monotonic()
        with pytest.raises(front.FailoverError) as caught:
            client.get(head_trickler + "/slow")
        elapsed = time.monotonic() - started
    assert [a.error_type for a in caught.value.attempts] == ["read_timeout"]
    assert 0.55 <= elapsed <= 0.6 + 0.1
