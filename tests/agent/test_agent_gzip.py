"""gzip on the agent's listener: ``Accept-Encoding`` negotiation (RFC 9110 section 12.5.3), and
every route of a running agent answered with and without it, over real loopback sockets."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from failover_agent.listener import GZIP_MIN, Listener, Request, Response, accepts_gzip, gzip_chunks
from failover_agent.runner import Agent
from failover_agent.status import page as status_page

from pytest_failover import ControlDocument
from pytest_failover.control import ControlKey
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]  # the fixture, used by name

from agent_support import HMAC_KEY, config, eventually, fake_domains, running


@pytest.mark.parametrize(("value", "expected"), [
    (None, False),  # no field: the body as it is (as today)
    ("", False),  # an empty field: identity only
    ("gzip", True),
    ("GZip", True),
    ("x-gzip", True),
    ("gzip, deflate, br, zstd", True),  # browsers, httpx
    ("deflate, gzip;q=1.0, *;q=0.5", True),  # curl --compressed
    ("gzip;q=0", False),
    ("gzip; q=0.000", False),
    ("gzip;Q=0.5, identity;q=0.4", True),
    ("gzip;q=0.5", False),  # identity (1 by default) is preferred
    ("gzip;q=0.5, identity;q=0.5", True),
    ("identity", False),
    ("*", True),
    ("*;q=0", False),
    ("*, gzip;q=0", False),  # named beats *
    ("br, *;q=0.1", True),  # * weighs gzip and identity alike: a tie goes to gzip
    ("br, identity;q=0, *;q=0.1", True),
    ("deflate, br", False),
    ("gzip;q=2", False),  # a weight above 1 is malformed: the element is ignored
    ("gzip;q=abc, identity", False),
    ("gz ip, gzip", True),  # a malformed element is ignored, the rest counts
])
def test_accepts_gzip(value: str | None, expected: bool) -> None:
    """gzip is chosen when Accept-Encoding names it (or ``*``) with a weight above 0 and not
    below identity's; names are case-insensitive; malformed elements are ignored."""
    headers = () if value is None else ((b"accept-encoding", value.encode()),)
    assert accepts_gzip(((b"host", b"x"), *headers)) is expected


def test_accepts_gzip_reads_every_field() -> None:
    """Several Accept-Encoding fields count as one list (RFC 9110 section 5.3)."""
    assert accepts_gzip(((b"accept-encoding", b"br"), (b"accept-encoding", b"gzip")))
    assert not accepts_gzip(((b"accept-encoding", b"*"), (b"accept-encoding", b"gzip;q=0")))


def test_gzip_chunks_is_one_stream_and_empties_its_input() -> None:
    """The pieces join to one gzip member that decompresses to the chunks joined; the input
    list is emptied as it is compressed."""
    chunks = [bytes(range(256)) * 1000, b"", b"metric 1\n" * 50_000]
    whole = b"".join(chunks)
    out = gzip_chunks(chunks)
    assert chunks == []
    assert gzip.decompress(b"".join(out)) == whole
    assert sum(map(len, out)) < len(whole) // 5


async def get(client: httpx.AsyncClient, url: str, accept: str | None,
              method: str = "GET") -> tuple[httpx.Response, bytes]:
    """The answer and its body as it came on the wire (not decoded); ``accept`` None sends no
    Accept-Encoding at all."""
    request = client.build_request(method, url)
    if accept is None:
        del request.headers["accept-encoding"]
    else:
        request.headers["accept-encoding"] = accept
    response = await client.send(request, stream=True)
    try:
        raw = b"".join([piece async for piece in response.aiter_raw()])
    finally:
        await response.aclose()
    assert response.status_code == 200, (url, response.status_code)
    assert response.headers.get("content-length") == str(len(raw)) or method == "HEAD"
    return response, raw


ACCEPTS = {None: False, "gzip": True, "gzip;q=0": False, "identity": False, "*": True,
           "br;q=1, GZIP;q=0.8, identity;q=0.1": True}


async def check_route(client: httpx.AsyncClient, url: str) -> bytes:
    """``url`` under every Accept-Encoding of :data:`ACCEPTS`: gzip-encoded exactly when the
    client admits it (the body being worth it), the decoded body equal to the plain one, Vary
    always; HEAD says what GET would. Returns the plain body."""
    _, plain = await get(client, url, None)
    for accept, admits in ACCEPTS.items():
        response, raw = await get(client, url, accept)
        assert response.headers["vary"] == "Accept-Encoding", (url, accept)
        encoded = admits and len(plain) >= GZIP_MIN
        assert response.headers.get("content-encoding") == ("gzip" if encoded else None), (url, accept)
        assert (gzip.decompress(raw) if encoded else raw) == plain, (url, accept)
        if encoded:
            assert len(raw) < len(plain)
            head, _ = await get(client, url, accept, "HEAD")
            assert head.headers["content-encoding"] == "gzip" and head.headers["content-length"] == str(len(raw))
    return plain


@pytest.fixture
async def agent(fake_domains: FakeDomains, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Agent, str]]:
    """A running agent on 40 domains, all but the first failing (so that the control document
    disables 39 of them), whose checks ran, then stopped being scheduled, and whose status
    document's clock stands still: every route answers the same bytes twice."""
    hosts = [f"d{i}.example.com" for i in range(40)]
    fake_domains.add(hosts[0])
    for host in hosts[1:]:
        fake_domains.add(host, lambda _request: 500)
    async with running(config(fake_domains, tmp_path, [f"https://{host}" for host in hosts])) as running_agent:
        def ready() -> bool:
            control = running_agent.state.control
            return control is not None and len(control.disabled.get("api", ())) == len(hosts) - 1

        await eventually(ready)
        scheduler = running_agent._scheduler  # no new runs, as Agent.stop() does first
        assert scheduler is not None
        scheduler.pause()
        monkeypatch.setattr(status_page, "time", SimpleNamespace(time=lambda: 1_800_000_000.0))
        assert running_agent.address is not None
        host, port = running_agent.address
        base = f"http://{host}:{port}"
        seen: list[tuple[bytes, bytes | None]] = []

        async def settled() -> bool:  # the runs in progress when paused have ended
            async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
                _, metrics = await get(client, base + "/metrics", None)
            seen.append((metrics, running_agent.control_document()))
            return len(seen) > 1 and seen[-1] == seen[-2]

        await eventually(settled, step=0.5)
        yield running_agent, base


async def test_every_route_with_and_without_gzip(agent: tuple[Agent, str]) -> None:
    """/metrics, /status.json, the status page and its assets are gzip-encoded for a client
    that asks (and worth it), as they are otherwise; small and error answers never are."""
    _, base = agent
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        sizes = {path: len(await check_route(client, base + path))
                 for path in ("/metrics", "/status.json", "/", "/assets/status.js", "/assets/status.css")}
        # every one compressed but the page itself (962 bytes today: either way, as check_route checked)
        assert min(size for path, size in sizes.items() if path != "/") >= GZIP_MIN, sizes
        for path in ("/healthz", "/nowhere", "/assets/nothing.js"):
            response = await client.get(base + path, headers={"Accept-Encoding": "gzip"})
            assert "content-encoding" not in response.headers, path
        # httpx asks for gzip by default and decodes it: the scrape parses as before
        metrics = await client.get(base + "/metrics")
        assert metrics.headers["content-encoding"] == "gzip" and "failover_" in metrics.text


async def test_control_document_gzip_keeps_its_signature(agent: tuple[Agent, str]) -> None:
    """The control document, compressed for a client that asks, decodes to the very bytes the
    agent signed, which the library verifies with the agent's key (gzip wraps the JWS; it
    changes nothing the signature covers)."""
    running_agent, base = agent
    control = running_agent.config.control
    assert control is not None
    document = running_agent.control_document()
    assert document is not None and len(document) >= GZIP_MIN  # 39 disabled domains: worth compressing
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        plain = await check_route(client, base + control.path)
        _, raw = await get(client, base + control.path, "gzip")
    assert plain == document
    served = ControlDocument.parse(gzip.decompress(raw), key=ControlKey.from_secret(HMAC_KEY))
    assert len(served.disabled["api"]) == 39


async def test_large_chunked_body_is_compressed_off_the_loop_and_released() -> None:
    """A large chunked body is compressed piece by piece (in a thread) and its ``after`` still
    runs once the answer is written; a body under GZIP_MIN goes as it is (with Vary)."""
    released: list[bool] = []
    text = [b"".join(b"m{i=\"%d\"} %d\n" % (i, i * j) for i in range(4000)) for j in range(8)]

    async def metrics(_: Request) -> Response:
        return Response(200, list(text), "text/plain", after=lambda: released.append(True), compress=True)

    async def small(_: Request) -> Response:
        return Response(200, b"s" * (GZIP_MIN - 1), "text/plain", compress=True)

    server = Listener({"/metrics": metrics, "/small": small})
    host, port = await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            response, raw = await get(client, f"http://{host}:{port}/metrics", "gzip")
            assert response.headers["content-encoding"] == "gzip"
            # one gzip member, whose decoder ends exactly at the body's end
            decoder = zlib.decompressobj(wbits=31)
            assert decoder.decompress(raw) == b"".join(text) and decoder.eof and not decoder.unused_data
            _, plain = await get(client, f"http://{host}:{port}/metrics", "identity")
            assert plain == b"".join(text)
            response, raw = await get(client, f"http://{host}:{port}/small", "gzip")
            assert "content-encoding" not in response.headers and response.headers["vary"] == "Accept-Encoding"
            assert raw == b"s" * (GZIP_MIN - 1)
    finally:
        await server.aclose()
    assert released == [True, True]
