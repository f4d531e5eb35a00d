"""The stale fallback through the real transports: never across users, never unbounded."""

from __future__ import annotations

import os
import tracemalloc
from typing import Any

import httpx
import pytest

from pytest_failover import FailoverError, FailoverTransport, Policy, Pool

from .servers import LoopbackServer
from .test_transport import fast

Servers = dict[str, LoopbackServer]


def test_a_private_answer_is_never_served_to_anybody(make_client: Any, servers: Servers) -> None:
    """``private, no-store`` fetched with token-a: during the outage nobody gets it back."""
    a = servers["a"]
    a.set(body=b'{"user": "a"}', headers={"Cache-Control": "private, no-store"})
    client = make_client([Pool("api", [a.url()])], fast(stale_on_failure=True))
    mine = {"Authorization": "Bearer token-a"}
    assert client.request("GET", a.url() + "/me", headers=mine).json() == {"user": "a"}
    a.set(reset=True)
    for who in ("token-a", "token-b"):
        with pytest.raises(client.errors.FailoverError):
            client.request("GET", a.url() + "/me", headers={"Authorization": f"Bearer {who}"})


def test_a_shareable_answer_is_served_stale_to_the_same_credentials_only(
    make_client: Any, servers: Servers
) -> None:
    """``public`` fetched with token-a is served stale to token-a, never to token-b."""
    a = servers["a"]
    a.set(body=b'{"rooms": [1]}', headers={"Cache-Control": "public, max-age=0, stale-if-error=60"})
    client = make_client([Pool("api", [a.url()])], fast(stale_on_failure=True))
    assert client.request("GET", a.url() + "/rooms", headers={"Authorization": "Bearer token-a"}).status_code == 200
    a.set(reset=True)
    stale = client.request("GET", a.url() + "/rooms", headers={"Authorization": "Bearer token-a"})
    assert stale.headers["X-Failover-Stale"] == "1" and stale.json() == {"rooms": [1]}
    with pytest.raises(client.errors.FailoverError):
        client.request("GET", a.url() + "/rooms", headers={"Authorization": "Bearer token-b"})


def test_a_final_server_error_is_answered_by_the_stored_copy(make_client: Any, servers: Servers) -> None:
    """RFC 5861 counts a 500, 502, 503 or 504 as an error: when every domain answers one,
    the stored copy is served instead (it used to return the 503). Other final answers
    (a 404) are the server's word and are returned; so is a 5xx with nothing stored."""
    a, b = servers["a"], servers["b"]
    for server in (a, b):
        server.set(body=b'{"rooms": [1]}', headers={"Cache-Control": "public, max-age=0, stale-if-error=60"})
    # breakers that stay closed: every request meets the servers' answers, not an open circuit
    client = make_client([Pool("api", [a.url(), b.url()])], fast(stale_on_failure=True, breaker_threshold=1000))
    assert client.request("GET", a.url() + "/rooms").status_code == 200
    for status in (500, 502, 503, 504):
        a.set(status=status)
        b.set(status=status)
        stale = client.request("GET", a.url() + "/rooms")
        assert (stale.status_code, stale.headers["X-Failover-Stale"], stale.json()) == (200, "1", {"rooms": [1]})
        assert stale.failover is not None and (stale.failover.stale, stale.failover.outcome) == (True, "stale")
    a.set(status=404)
    b.set(status=404)
    assert client.request("GET", a.url() + "/rooms").status_code == 404
    a.set(status=503)
    b.set(status=503)
    assert client.request("GET", a.url() + "/never-stored").status_code == 503


def test_vary_selects_which_stored_answer_may_be_served(make_client: Any, servers: Servers) -> None:
    """An answer that varies on ``Accept-Language`` is not served to another language."""
    a = servers["a"]
    a.set(body=b'{"hello": "hallo"}', headers={"Vary": "Accept-Language", "Cache-Control": "max-age=60"})
    client = make_client([Pool("api", [a.url()])], fast(stale_on_failure=True))
    client.request("GET", a.url() + "/greeting", headers={"Accept-Language": "de"})
    a.set(reset=True)
    assert client.request("GET", a.url() + "/greeting", headers={"Accept-Language": "de"}).status_code == 200
    with pytest.raises(client.errors.FailoverError):
        client.request("GET", a.url() + "/greeting", headers={"Accept-Language": "fr"})


def test_a_body_over_the_stale_limit_streams_through_unbuffered_and_uncached(servers: Servers) -> None:
    """With ``read_body=False``, an 8 MiB download holds at most the limit in memory
    before the caller reads it, reaches the caller whole, and is not stored."""
    a = servers["a"]
    size = 8 << 20
    a.set(body=b"x" * size)
    policy = fast(stale_on_failure=True, stale_max_bytes=64 << 10, read_body=False)
    transport = FailoverTransport([Pool("api", [a.url()])], policy)
    with httpx.Client(transport=transport) as client:
        status, held, received = _streamed(client, a.url() + "/download")
        assert status == 200 and received == size
        assert held < 2 << 20, f"{held} bytes held before the caller read anything"
        a.set(reset=True)
        with pytest.raises(FailoverError):  # too large to have been stored
            client.get(a.url() + "/download")


def _streamed(client: httpx.Client, url: str) -> tuple[int, int, int]:
    """GET ``url`` streaming: its status, the bytes the client side held before the caller
    read any of the body, and the bytes the caller then read."""
    tracemalloc.start()
    try:
        with client.stream("GET", url) as response:
            # what the client side holds (the loopback server shares this process)
            client_side = [
                tracemalloc.Filter(True, f"*{os.sep}{package}{os.sep}*")
                for package in ("httpx", "httpcore", "h11", "pytest_failover")
            ]
            held = sum(
                stat.size for stat in tracemalloc.take_snapshot().filter_traces(client_side).statistics("filename")
            )
            received = sum(len(chunk) for chunk in response.iter_raw())
    finally:
        tracemalloc.stop()
    return response.status_code, held, received


def test_a_length_beside_chunks_does_not_bound_the_read(servers: Servers) -> None:
    """A ``Content-Length`` sent beside ``Transfer-Encoding: chunked`` declares nothing (the
    chunks end the body): an 8 MiB body past ``read_body_max_bytes`` is held only up to the
    limit before the caller reads it, and reaches the caller whole."""
    a = servers["a"]
    size = 8 << 20
    a.set(body=b"x" * size, chunked=True, headers={"Content-Length": "10"})
    transport = FailoverTransport([Pool("api", [a.url()])], Policy(read_body_max_bytes=64 << 10))
    with httpx.Client(transport=transport) as client:
        status, held, received = _streamed(client, a.url() + "/download")
    assert status == 200 and received == size
    assert held < 2 << 20, f"{held} bytes held before the caller read anything"


def test_a_body_over_the_read_limit_streams_through_to_the_caller(servers: Servers) -> None:
    """With ``read_body=True``, a body past ``read_body_max_bytes`` is handed over
    streaming: what was read is replayed, then the rest follows."""
    a = servers["a"]
    body = bytes(range(256)) * 4096  # 1 MiB
    a.set(body=body)
    transport = FailoverTransport([Pool("api", [a.url()])], Policy(read_body_max_bytes=100 << 10))
    with httpx.Client(transport=transport) as client:
        response = client.get(a.url() + "/file")
    assert response.content == body
