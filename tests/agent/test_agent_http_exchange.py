"""The pinned probe's own HTTP/1.1 exchange against raw loopback servers.

Each server answers every connection with fixed bytes (or a misbehaviour), so the
framing cases the simulator's well-behaved server never produces are covered:
chunked bodies, a body read to EOF, a short body, garbage, HEAD, gzip, and the
request the probe actually sends.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from failover_agent.checks.domain import DomainProber
from failover_agent.checks.result import ProbeResult
from failover_agent.config import ProbeConfig

Answer = Callable[[bytes], bytes | None]


@asynccontextmanager
async def raw_server(answer: Answer, *, close: bool = True) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback server: reads the request head, writes ``answer(head)``, closes."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            data = answer(head)
            if data:
                writer.write(data)
                await writer.drain()
            if not close:
                await asyncio.sleep(5)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        await server.wait_closed()


def fixed(data: bytes) -> Answer:
    return lambda _head: data


async def probe(url: str, **cfg: object) -> ProbeResult:
    prober = DomainProber(ssl.create_default_context())
    try:
        return await prober.probe(url, ProbeConfig.model_validate({"path": "/health", "timeout": 2.0,
                                                                    "interval": 5.0, **cfg}))
    finally:
        await prober.aclose()


OK_JSON = b'{"status": "ok"}'
CHECK = {"field": "status", "equals": "ok"}


async def test_content_length_body_and_the_request_sent() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK_JSON), OK_JSON)
    async with raw_server(fixed(answer), close=False) as (url, seen):  # keeps the socket open
        result = await probe(url, json_check=CHECK, headers={"X-Probe": "1", "accept": "application/json"})
    assert (result.success, result.status, result.error_type) == (True, 200, None)
    assert {"dns", "connect", "ttfb", "transfer", "total"} <= set(result.phases)
    head = seen[0].decode()
    assert head.startswith("GET /health HTTP/1.1\r\n")
    lines = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in head.split("\r\n")[1:] if line}
    assert lines["host"] == url.split("://")[1]
    assert lines["x-probe"] == "1" and lines["accept"] == "application/json"
    assert lines["connection"] == "close"


async def test_chunked_body_is_reassembled() -> None:
    body = b'{"status"' + b': "ok"}'
    chunks = b"9\r\n" + body[:9] + b"\r\n" + b"%x\r\n" % (len(body) - 9) + body[9:] + b"\r\n0\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    async with raw_server(fixed(answer), close=False) as (url, _):
        result = await probe(url, json_check=CHECK)
    assert (result.success, result.error_type) == (True, None), result


async def test_body_without_length_is_read_to_eof_and_gzip_is_decoded() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + gzip.compress(OK_JSON)
    async with raw_server(fixed(answer)) as (url, _):
        result = await probe(url, json_check=CHECK)
    assert (result.success, result.error_type) == (True, None), result
    answer = b'HTTP/1.1 200 OK\r\n\r\n{"status": "down"}'
    async with raw_server(fixed(answer)) as (url, _):
        result = await probe(url, json_check=CHECK)
    assert (result.success, result.error_type) == (False, "body_mismatch"), result


async def test_short_body_garbage_and_silence_are_protocol_errors() -> None:
    for answer in (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
                   b"SSH-2.0-OpenSSH\r\n\r\n",
                   b""):
        async with raw_server(fixed(answer)) as (url, _):
            result = await probe(url)
        assert (result.success, result.error_type) == (False, "remote_protocol_error"), (answer, result)


async def test_head_and_204_have_no_body_and_statuses_are_checked() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"
    async with raw_server(fixed(answer), close=False) as (url, seen):
        result = await probe(url, method="HEAD")
    assert (result.success, result.status) == (True, 200), result
    assert seen[0].startswith(b"HEAD /health ")
    async with raw_server(fixed(b"HTTP/1.1 204 No Content\r\n\r\n"), close=False) as (url, _):
        result = await probe(url, expected_status=[204])
        assert (result.success, result.status) == (True, 204), result
        result = await probe(url)
        assert (result.success, result.status, result.error_type) == (False, 204, "204"), result


async def test_no_answer_is_a_read_timeout() -> None:
    async with raw_server(lambda _head: None, close=False) as (url, _):
        result = await probe(url, timeout=0.3)
    assert (result.success, result.error_type) == (False, "read_timeout"), result
    assert result.phases["total"] < 2.0


async def test_endless_head_and_bad_chunk_size_are_protocol_errors() -> None:
    # a head that never ends is refused once it passes 64 KiB, not buffered until the timeout
    for answer in (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000,
                   b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"):
        async with raw_server(fixed(answer), close=False) as (url, _):
            result = await probe(url)
        assert (result.success, result.error_type) == (False, "remote_protocol_error"), (answer[:40], result)
    # a large but complete head is fine
    answer = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 30_000 + b"\r\nContent-Length: 0\r\n\r\n"
    async with raw_server(fixed(answer), close=False) as (url, _):
        result = await probe(url)
    assert (result.success, result.status) == (True, 200), result


async def test_framing_headers_from_the_config_are_not_sent_twice() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    async with raw_server(fixed(answer), close=False) as (url, seen):
        result = await probe(url, method="POST", headers={"Connection": "keep-alive", "Host": "evil.test",
                                                          "Content-Length": "7"})
    assert (result.success, result.status) == (True, 200), result
    lines = [line.lower() for line in seen[0].decode().split("\r\n")[1:] if line]
    assert lines.count("connection: close") == 1 and not any(line.startswith("connection: keep") for line in lines)
    assert f"host: {url.split('://')[1]}" in lines and "content-length: 0" in lines
    assert sum(line.startswith("content-length") for line in lines) == 1


async def test_an_interim_1xx_answer_is_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    async with raw_server(fixed(answer), close=False) as (url, _):
        result = await probe(url)
    assert (result.success, result.status) == (True, 200), result
