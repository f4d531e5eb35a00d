"""An answer the client's own parser refuses is the domain's failure, for every front-end:
the request moves to the backup, the breaker counts it, and the caller never sees a parser
error (aiohttp raises its parser's as a "400" ``ClientResponseError``, which the middleware
tells from one raised for a status). A body that does not decode is the client's own
error, as from the bare client. Real loopback sockets, each front-end's own client."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
import requests

from pytest_failover import Policy, Pool

from .servers import LoopbackServer, SocketServer

POLICY = Policy(breaker_threshold=1, attempt_timeout=5.0, deadline=10.0, sticky=False)

# What the primary answers, each refused by every client's parser (h11, http.client and
# urllib3, aiohttp's): a status line that is not one, two lengths that disagree, a body
# shorter than its length, a chunk size that is not a number.
MALFORMED = {
    "status line": b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok",
    "conflicting lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "short body": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok",
    "chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
}
NOT_GZIP = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok"


class FixedServer(SocketServer):
    """Answers each connection's first request with ``answer``, then closes it."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.requests = 0
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5.0)
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received += chunk
            self.requests += 1
            conn.sendall(self.answer)


@pytest.fixture
def serving() -> Iterator[list[FixedServer]]:
    made: list[FixedServer] = []
    yield made
    for server in made:
        server.close()


@pytest.mark.parametrize("answer", list(MALFORMED))
def test_a_malformed_answer_moves_the_request_to_the_backup(
    make_client: Any, serving: list[FixedServer], servers: dict[str, LoopbackServer], answer: str
) -> None:
    primary = FixedServer(MALFORMED[answer])
    serving.append(primary)
    backup = servers["b"].url()
    client = make_client([Pool("api", [primary.url, backup])], POLICY)
    view = client.request("GET", f"{primary.url}/x")
    assert view.status_code == 200 and view.failover.domain == backup
    first, second = view.failover.attempts
    assert first.domain == primary.url and first.error_type is not None
    assert second.domain == backup and second.error_type is None
    breakers = [(d.breaker, d.consecutive_failures) for d in client.transport.state().pools["api"].domains]
    assert breakers == [("open", 1), ("closed", 0)]
    assert primary.requests == 1


# The error each client raises for a body that does not decode, as its bare client does
# (None: the aiohttp middleware reads the body decoded, and a body aiohttp cannot decode
# is a broken payload: the backup answers).
NOT_DECODED: dict[str, type[Exception] | None] = {
    "sync": httpx.DecodingError,
    "async": httpx.DecodingError,
    "httpx2": httpx2.DecodingError,
    "httpx2-async": httpx2.DecodingError,
    "requests": requests.exceptions.ContentDecodingError,
    "aiohttp": None,
}


def test_a_body_that_does_not_decode_raises_the_clients_own_error(
    make_client: Any, serving: list[FixedServer], servers: dict[str, LoopbackServer]
) -> None:
    primary = FixedServer(NOT_GZIP)
    serving.append(primary)
    backup = servers["b"].url()
    client = make_client([Pool("api", [primary.url, backup])], POLICY)
    expected = NOT_DECODED[client.kind]
    if expected is None:
        assert client.request("GET", f"{primary.url}/x").failover.domain == backup
        return
    with pytest.raises(expected):
        client.request("GET", f"{primary.url}/x")
