"""The agent's HTTP/1.1 listener (failover_agent.listener): routing, methods, framing,
keep-alive, bad requests and shutdown, over real loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from failover_agent import listener as listener_module
from failover_agent.listener import (
    MAX_BODY,
    Listener,
    Request,
    Response,
    json_response,
    split_listen,
)

Served = tuple[Listener, str, list[Request], asyncio.Event]
BIG_MIB = 32


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    seen: list[Request] = []
    gate = asyncio.Event()

    async def hello(request: Request) -> Response:
        seen.append(request)
        return Response(200, b"hello", "text/plain; charset=utf-8", {"Cache-Control": "no-store"})

    async def chunks(request: Request) -> Response:
        seen.append(request)
        return Response(200, [b"a" * 70_000, b"b" * 3, b"c" * 100_000], "text/plain")

    async def broken(_: Request) -> Response:
        raise RuntimeError("a bug")

    async def slow(_: Request) -> Response:
        await gate.wait()
        return json_response({"done": True})

    async def big(_: Request) -> Response:
        return Response(200, [b"x" * (1 << 20) for _ in range(BIG_MIB)], "text/plain")

    async def asset(request: Request) -> Response:
        seen.append(request)
        return Response(200, request.path.encode())

    server = Listener({"/hello": hello, "/chunks": chunks, "/broken": broken, "/slow": slow, "/big": big},
                      {"/assets/": asset})
    host, port = await server.start("127.0.0.1", 0)
    try:
        yield server, f"http://{host}:{port}", seen, gate
    finally:
        gate.set()
        await server.aclose()


async def raw(url: str, data: bytes, *, until_close: bool = True) -> bytes:
    """Send ``data`` on a fresh connection; what comes back until the server closes it."""
    host, _, port = url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read() if until_close else await reader.read(65536)
    finally:
        writer.close()


async def test_routes_methods_and_errors(served: Served) -> None:
    """Exact routes and prefixes answer GET and HEAD; other methods are 405 with Allow; an
    unknown path is 404; a handler that raises is logged and answered 500."""
    _, url, seen, _ = served
    async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
        ok = await client.get("/hello?x=1")
        head = await client.head("/hello")
        post = await client.post("/hello", content=b"x")
        missing = await client.get("/nope")
        asset = await client.get("/assets/a%20b.js")
        broken = await client.get("/broken")
    assert (ok.status_code, ok.text, ok.headers["content-type"], ok.headers["cache-control"]) == \
        (200, "hello", "text/plain; charset=utf-8", "no-store")
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == "5"
    assert post.status_code == 405 and post.headers["allow"] == "GET, HEAD"
    assert missing.status_code == 404 and missing.text == "404: Not Found"
    assert asset.text == "/assets/a b.js"  # matched and passed on percent-decoded
    assert broken.status_code == 500
    assert [(r.method, r.path, r.target) for r in seen[:2]] == [("GET", "/hello", b"/hello?x=1"),
                                                              ("HEAD", "/hello", b"/hello")]


async def test_handler_failure_is_logged(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    """The traceback of a failing handler goes to the agent's log, with the request."""
    _, url, _, _ = served
    with caplog.at_level(logging.ERROR, logger="failover_agent.listener"):
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(url + "/broken")).status_code == 500
    assert any("GET /broken failed" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_chunked_body_and_keep_alive(served: Served) -> None:
    """A body given as chunks arrives whole with its total Content-Length, and one
    connection serves several requests, pipelined ones in order."""
    _, url, _, _ = served
    async with httpx.AsyncClient(trust_env=False) as client:
        big = await client.get(url + "/chunks")
        again = await client.get(url + "/hello")
    assert big.content == b"a" * 70_000 + b"bbb" + b"c" * 100_000
    assert big.headers["content-length"] == str(170_003) and again.text == "hello"
    pipelined = await raw(url, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /assets/two HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    first, _, second = pipelined.partition(b"hello")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and second.endswith(b"/assets/two")


async def test_http10_and_connection_close_end_the_connection(served: Served) -> None:
    """HTTP/1.0 and ``Connection: close`` get one answer, then the server closes."""
    _, url, _, _ = served
    for request in (b"GET /hello HTTP/1.0\r\n\r\n", b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
        answer = await raw(url, request)  # returns only because the server closed
        assert answer.startswith((b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 200 OK\r\n")) and answer.endswith(b"hello")


async def test_bad_requests(served: Served) -> None:
    """Garbage is 400, a head over the limit 431, a body over :data:`MAX_BODY` 413; each
    closes the connection. A body within the limit is read and dropped."""
    _, url, _, _ = served
    assert (await raw(url, b"NOT HTTP AT ALL\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
    huge_head = b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 100_000 + b"\r\n\r\n"
    assert (await raw(url, huge_head)).startswith(b"HTTP/1.1 431 ")
    too_big = b"GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)
    assert (await raw(url, too_big + b"z" * (MAX_BODY + 1))).startswith(b"HTTP/1.1 413 ")
    small = b"GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
    assert (await raw(url, small)).endswith(b"hello")


async def test_idle_connection_is_closed(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that sends nothing is closed after the keep-alive timeout, one that
    stalls mid-request after the read timeout."""
    _, url, _, _ = served
    monkeypatch.setattr(listener_module, "KEEPALIVE_TIMEOUT", 0.2)
    monkeypatch.setattr(listener_module, "READ_TIMEOUT", 0.2)
    assert await raw(url, b"") == b""
    assert await raw(url, b"GET /hello HTTP/1.1\r\nHo") == b""


async def _asks_for_big_and_reads_slowly(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection with a tiny receive buffer that has asked for the large answer (and
    reads nothing until the caller does): the server's writes stall on it."""
    host, _, port = url.removeprefix("http://").rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    return reader, writer


async def test_a_client_that_stops_reading_is_dropped(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that asks for a large answer and stops reading is cut off after the read
    timeout, and its connection does not linger in the listener."""
    server, url, _, _ = served
    monkeypatch.setattr(listener_module, "READ_TIMEOUT", 0.3)
    reader, writer = await _asks_for_big_and_reads_slowly(url)
    await asyncio.sleep(1.5)  # not reading: the server's writes stall
    received = 0
    with contextlib.suppress(ConnectionResetError):
        async with asyncio.timeout(10):
            while chunk := await reader.read(1 << 20):
                received += len(chunk)
    writer.close()
    assert received < BIG_MIB << 20  # cut off: the whole answer never came
    assert server.open_connections == 0


async def test_shutdown_does_not_wait_for_a_client_that_stopped_reading(
    served: Served, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``aclose`` ends, after its grace period, even while an answer is stuck on a client
    that reads nothing."""
    server, url, _, _ = served
    monkeypatch.setattr(listener_module, "SHUTDOWN_GRACE", 0.3)
    _, writer = await _asks_for_big_and_reads_slowly(url)
    await asyncio.sleep(0.5)  # the answer is stuck in the server's writes
    async with asyncio.timeout(5):
        await server.aclose()
    writer.close()
    assert server.open_connections == 0


async def test_shutdown_lets_a_request_in_progress_finish(served: Served) -> None:
    """``aclose`` stops accepting at once, closes idle connections, and lets a request in
    progress get its answer."""
    server, url, _, gate = served
    host, _, port = url.removeprefix("http://").rpartition(":")
    idle_reader, idle_writer = await asyncio.open_connection(host, int(port))
    async with httpx.AsyncClient(trust_env=False) as client:
        pending = asyncio.ensure_future(client.get(url + "/slow"))
        await asyncio.sleep(0.2)  # the request is in the handler, waiting for the gate
        closing = asyncio.ensure_future(server.aclose())
        await asyncio.sleep(0.1)
        async with asyncio.timeout(5):
            assert await idle_reader.read() == b""  # the idle connection was closed
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(host, int(port))  # no longer accepting
        assert not pending.done()
        gate.set()
        answer = await pending
        await closing
    idle_writer.close()
    assert answer.json() == {"done": True}


@pytest.mark.parametrize(("listen", "expected"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:0", ("::1", 0)), (":80", ("", 80)),
])
def test_split_listen(listen: str, expected: tuple[str, int]) -> None:
    """``HOST:PORT`` splits on the last colon; IPv6 brackets are dropped."""
    assert split_listen(listen) == expected
