"""The aiohttp middleware inside a real ``aiohttp.ClientSession``: the session's own
settings (timeouts, status checks, decompression, tracing, cookies, redirects) behave
as they do without the middleware, on loopback servers."""

from __future__ import annotations

import asyncio
import gc
import gzip
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.client_middlewares import ClientHandlerType
from yarl import URL

import pytest_failover
from pytest_failover import Hedging, Pool, faults
from pytest_failover._values import AttemptRecord
from pytest_failover.integrations.aiohttp import AllDomainsFailed, FailoverMiddleware
from pytest_failover.semconv import ERROR_REMOTE_PROTOCOL
from pytest_failover.simulator import FakeDomains, RecordedRequest, Response

from .servers import Flapping, LoopbackServer, closed_port
from .test_concurrency import POLICY as FLAPPING_POLICY
from .test_concurrency import check
from .test_transport import fast

Servers = dict[str, LoopbackServer]


def breakers(middleware: FailoverMiddleware) -> list[tuple[str, int]]:
    """Each domain's breaker and its count of consecutive failures."""
    return [(d.breaker, d.consecutive_failures) for d in middleware.state().pools["api"].domains]


HOSTS = ("api.aio-session.test", "api2.aio-session.test")
OUTSIDE = "elsewhere.aio-session.test"  # a host of no pool
PRIMARY, BACKUP = (f"http://{host}" for host in HOSTS)


LONG = 300_000  # a login answer's padding that does not come whole with its head


def _site(name: str) -> Callable[[RecordedRequest], Response]:
    """A domain of the pool that logs in with a cookie (``/login``, and ``/login-long`` with
    ``LONG`` bytes of padding), redirects ``/start`` to ``/final`` on its own host (an
    absolute ``Location``) and ``/away`` to ``OUTSIDE``, and says what it received."""

    def answer(request: RecordedRequest) -> Response:
        if request.path == "/login-pinned":  # a cookie for this host by name
            return Response(200, f"{name}: in", {"Set-Cookie": f"pinned={name}; Domain={request.host}; Path=/"})
        if request.path.startswith("/login"):
            padding = " " * (LONG if request.path == "/login-long" else 0)
            return Response(200, f"{name}: in{padding}", {"Set-Cookie": f"session={name}; Path=/"})
        if request.path == "/start":
            return Response(302, "", {"Location": f"http://{request.host}/final"})
        if request.path == "/away":
            return Response(302, "", {"Location": f"http://{OUTSIDE}/final"})
        return Response(200, f"{name}: {request.path}")

    return answer


@pytest.fixture(scope="module")
def domains() -> Iterator[FakeDomains]:
    with FakeDomains() as fake:
        yield fake


@pytest.fixture
def primary_down(domains: FakeDomains) -> FakeDomains:
    """The pool's two domains, fresh, the primary refusing connections."""
    domains.reset()
    domains.add(HOSTS[0], _site("primary"))
    domains.add(HOSTS[1], _site("backup"))
    domains.fail(HOSTS[0], faults.refused())
    return domains


def _session(middleware: FailoverMiddleware) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver())
    return aiohttp.ClientSession(connector=connector, middlewares=(middleware,))


@pytest.mark.parametrize("hedged", [False, True])
@pytest.mark.parametrize("where", ["session", "request"])
def test_the_sessions_total_time_running_out_is_the_callers_timeout_not_the_domains_failure(
    servers: Servers, where: str, hedged: bool
) -> None:
    """When aiohttp's own ``ClientTimeout(total=...)`` runs out while the primary (and the
    hedge racing it) is slow, the caller gets aiohttp's ``TimeoutError`` as from a bare
    session: no attempt is sent with no time left, no breaker counts a failure (the healthy
    backup's would open, and every request fail fast, for the whole cooldown), and no
    task is left with an error nobody reads."""
    a, b = servers["a"], servers["b"]
    a.set(delay=0.6)
    b.set(delay=0.6 if hedged else 0.0)
    hedging = Hedging(delay=0.05, max_ratio=1.0) if hedged else None
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast(breaker_threshold=2, hedging=hedging))
    short = aiohttp.ClientTimeout(total=0.2)
    reported: list[dict[str, Any]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))
        session_timeout = short if where == "session" else aiohttp.ClientTimeout(total=30)
        request_timeout: dict[str, Any] = {"timeout": short} if where == "request" else {}
        async with aiohttp.ClientSession(middlewares=(middleware,), timeout=session_timeout) as session:
            for _ in range(3):
                with pytest.raises(TimeoutError) as caught:
                    await session.get(a.url() + "/slow", **request_timeout)
                assert not isinstance(caught.value, aiohttp.ClientError)  # aiohttp's own, as without the middleware
            assert breakers(middleware) == [("closed", 0), ("closed", 0)]
            a.set()
            async with session.get(a.url() + "/v1/x", timeout=aiohttp.ClientTimeout(total=30)) as response:
                assert response.failover.domain == a.url()  # type: ignore[attr-defined]  # the middleware sets it
        gc.collect()  # a task done with an error nobody read reports it when collected

    asyncio.run(run())
    assert reported == []
    assert b.total_settled(3 if hedged else 0) <= (3 if hedged else 0)  # a hedge each at most (one may be late), no retry



def test_closing_the_session_mid_request_is_the_callers_doing_not_the_domains_failure(servers: Servers) -> None:
    """Requests in flight when their session is closed end with an
    ``aiohttp.ClientConnectionError``, as without the middleware (not aiohttp's bare
    ``AssertionError`` from a retry on the closed session, nor ``AllDomainsFailed``): the
    backup is not tried, and no breaker or budget pays for it, so another session sharing
    the middleware is served by the primary at once."""
    a, b = servers["a"], servers["b"]
    a.set(delay=5.0)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast(breaker_threshold=2))
    budget = middleware.state().pools["api"].budget_tokens

    async def run() -> None:
        session = aiohttp.ClientSession(middlewares=(middleware,))

        async def get() -> None:
            async with session.get(a.url() + "/slow") as response:
                await response.read()

        calls = [asyncio.create_task(get()) for _ in range(3)]
        for _ in range(500):  # bounded: 5 s for the three to reach the server
            if a.total == 3:
                break
            await asyncio.sleep(0.01)
        await session.close()
        ended = await asyncio.gather(*calls, return_exceptions=True)
        assert [type(e) for e in ended if not isinstance(e, aiohttp.ClientConnectionError)] == []
        assert not any(isinstance(e, pytest_failover.FailoverError) for e in ended)
        assert breakers(middleware) == [("closed", 0), ("closed", 0)]
        assert middleware.state().pools["api"].budget_tokens == budget
        a.set()
        async with aiohttp.ClientSession(middlewares=(middleware,)) as other, other.get(a.url() + "/v1/x") as response:
            assert response.failover.domain == a.url()  # type: ignore[attr-defined]  # the middleware sets it

    asyncio.run(run())
    assert b.total == 0



_STALLS = {  # where the primary (and the backup a hedge races to) keeps a request waiting
    "connect": faults.connect_timeout(),
    "head": faults.read_timeout(),
    "body": faults.trickle(0.2, b"x" * 50),
}


@pytest.mark.parametrize("hedged", [False, True], ids=["alone", "hedged"])
@pytest.mark.parametrize("stall", list(_STALLS))
@pytest.mark.parametrize("leave", ["asyncio.timeout", "wait_for", "cancel"])
def test_a_caller_that_leaves_mid_request_leaves_nothing_behind(
    domains: FakeDomains, leave: str, stall: str, hedged: bool
) -> None:
    """A caller that leaves while the primary (and a hedge racing it on the backup) is
    still connecting, waiting for the head or reading a trickled body leaves no response
    or connection unclosed, every connection back in the connector (one per host: the next
    request would wait for a lost one), the breakers and the budget as they were; the
    next request is answered at once."""
    domains.reset()
    domains.add(HOSTS[0], _site("primary"))
    domains.add(HOSTS[1], _site("backup"))
    domains.fail(HOSTS[0], _STALLS[stall])
    if hedged:
        domains.fail(HOSTS[1], _STALLS[stall])
    hedging = Hedging(delay=0.05, max_ratio=1.0) if hedged else None
    middleware = FailoverMiddleware(
        [Pool("api", [PRIMARY, BACKUP])], fast(hedging=hedging, attempt_timeout=10.0, deadline=20.0)
    )
    budget = middleware.state().pools["api"].budget_tokens
    reported: list[dict[str, Any]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))
        connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver(), limit_per_host=1)
        async with aiohttp.ClientSession(connector=connector, middlewares=(middleware,)) as session:

            async def get() -> bytes:
                async with session.get(PRIMARY + "/x") as response:
                    return await response.read()

            if leave == "asyncio.timeout":
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.4):
                        await get()
            elif leave == "wait_for":
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(get(), 0.4)
            else:
                call = asyncio.create_task(get())
                await asyncio.sleep(0.4)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
            assert breakers(middleware) == [("closed", 0), ("closed", 0)]
            assert middleware.state().pools["api"].budget_tokens == budget
            domains.heal()
            async with asyncio.timeout(5):  # bounded: a connection never given back would hold it
                assert await get() == b"primary: /x"
        gc.collect()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(run(), debug=True)  # debug: aiohttp reports what was left unclosed
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert [c["message"] for c in reported] == []



def test_trace_configs_see_the_request_once_and_each_attempts_own_work(servers: Servers) -> None:
    """A session's ``trace_configs`` see the request once, with the URL asked for
    (``on_request_start``, ``on_request_end``), and each attempt's own work with the
    attempt's URL (a new connection, the request headers sent), as the docs say."""
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast(sticky=False))
    seen: list[tuple[str, str]] = []
    trace = aiohttp.TraceConfig()

    def record(name: str, signal: Any) -> None:
        async def on(session: aiohttp.ClientSession, context: Any, params: Any) -> None:
            seen.append((name, str(params.url) if hasattr(params, "url") else ""))

        signal.append(on)

    for name in ("request_start", "request_end", "request_exception", "connection_create_start",
                 "connection_reuseconn", "request_headers_sent"):
        record(name, getattr(trace, f"on_{name}"))

    async def run() -> None:
        async with aiohttp.ClientSession(middlewares=(middleware,), trace_configs=[trace]) as session:
            for _ in range(2):
                async with session.get(a.url() + "/v1/x") as response:
                    assert response.status == 200

    asyncio.run(run())
    asked, backup = a.url() + "/v1/x", b.url() + "/v1/x"
    first = [
        ("request_start", asked),
        ("connection_create_start", ""),
        ("request_headers_sent", asked),
        ("connection_create_start", ""),
        ("request_headers_sent", backup),
        ("request_end", asked),
    ]
    again = [(name if name != "connection_create_start" else "connection_reuseconn", url) for name, url in first]
    assert seen == first + again



def test_raise_for_status_judges_the_answer_the_caller_gets(servers: Servers) -> None:
    """With ``raise_for_status`` (``True`` or a callable) the session judges only the
    answer the caller gets: a 503 the backup replaced raises nothing, a 404 raises as from
    a bare session, and the callable is called once per request, with that answer."""
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast(sticky=False))
    judged: list[tuple[int, str]] = []

    async def judge(response: aiohttp.ClientResponse) -> None:
        judged.append((response.status, str(response.url)))
        response.raise_for_status()

    async def run() -> None:
        for judging in (True, judge):
            async with aiohttp.ClientSession(middlewares=(middleware,), raise_for_status=judging) as session:
                b.set()
                async with session.get(a.url() + "/v1/x") as response:
                    assert (response.status, response.failover.domain) == (200, b.url())  # type: ignore[attr-defined]  # the middleware sets it
                b.set(status=404)
                with pytest.raises(aiohttp.ClientResponseError) as caught:
                    await session.get(a.url() + "/v1/x")
                assert caught.value.status == 404 and not isinstance(caught.value, pytest_failover.FailoverError)

    asyncio.run(run())
    assert judged == [(200, b.url() + "/v1/x"), (404, b.url() + "/v1/x")]


@pytest.mark.parametrize("asked_by", ["session", "request"])
@pytest.mark.parametrize("decompress", [True, False])
def test_a_compressed_answer_after_a_failover_is_as_asked(servers: Servers, decompress: bool, asked_by: str) -> None:
    """A gzip body from the backup reaches the caller decoded, or with
    ``auto_decompress=False`` (the session's, or the request's own) as the server sent it
    (its ``Content-Encoding`` kept)."""
    a, b = servers["a"], servers["b"]
    plain = b"hello gzip " * 100
    compressed = gzip.compress(plain)  # once: its header holds the second it was made in
    a.set(status=503)
    b.set(body=compressed, headers={"Content-Encoding": "gzip"})
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast())
    session_asks, request_asks = (decompress, None) if asked_by == "session" else (not decompress, decompress)

    async def run() -> tuple[bytes, str | None]:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,), auto_decompress=session_asks) as session,
            session.get(a.url() + "/v1/x", auto_decompress=request_asks) as response,
        ):
            return await response.read(), response.headers.get("Content-Encoding")

    body, encoding = asyncio.run(run())
    assert encoding == "gzip"
    assert body == (plain if decompress else compressed)


@pytest.mark.parametrize("chained", [False, True], ids=["alone", "before-another-middleware"])
def test_a_stale_copy_of_an_answer_a_request_left_encoded_keeps_its_encoding(servers: Servers, chained: bool) -> None:
    """An answer fetched with the request's own ``auto_decompress=False`` is stored as it
    is: a later request served the stale copy gets a body it can read. (The middleware read
    the session's ``auto_decompress`` alone: it took the encoded bytes for decoded and
    stored them without their ``Content-Encoding``, and the later request got gzip bytes
    as plain text.) The same with another middleware after it."""
    a = servers["a"]
    plain = b"hello gzip " * 100
    a.set(body=gzip.compress(plain), headers={"Content-Encoding": "gzip", "Cache-Control": "max-age=60"})
    middleware = FailoverMiddleware([Pool("api", [a.url()])], fast(stale_on_failure=True))

    async def passing(request: aiohttp.ClientRequest, handler: ClientHandlerType) -> aiohttp.ClientResponse:
        return await handler(request)

    async def run() -> tuple[bytes, str | None]:
        async with aiohttp.ClientSession(middlewares=(middleware, passing) if chained else (middleware,)) as session:
            async with session.get(a.url() + "/v1/x", auto_decompress=False) as response:
                assert await response.read() == gzip.compress(plain)
            a.set(status=503)
            async with session.get(a.url() + "/v1/x") as response:
                assert response.headers["X-Failover-Stale"] == "1"
                return await response.read(), response.headers.get("Content-Encoding")

    body, encoding = asyncio.run(run())
    assert (body, encoding) in ((plain, None), (gzip.compress(plain), "gzip"))


@pytest.mark.parametrize("read", ["iter_chunked", "readline", "iter_any"])
def test_a_body_past_the_read_limit_streams_whole_through_a_small_read_buffer(servers: Servers, read: str) -> None:
    """A chunked body longer than ``read_body_max_bytes``, from the backup, streams to the
    caller whole and in order through a session's small ``read_bufsize``, whichever way
    it reads it."""
    a, b = servers["a"], servers["b"]
    body = b"".join(b"line %06d %s\n" % (n, b"x" * 90) for n in range(3000))  # 300 KB
    a.set(status=503)
    b.set(body=body, chunked=True)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast(read_body_max_bytes=100 << 10))

    async def run() -> list[bytes]:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,), read_bufsize=1024) as session,
            session.get(a.url() + "/file") as response,
        ):
            assert response.failover.domain == b.url()  # type: ignore[attr-defined]  # the middleware sets it
            if read == "iter_chunked":
                return [chunk async for chunk in response.content.iter_chunked(7000)]
            if read == "iter_any":
                return [chunk async for chunk in response.content.iter_any()]
            lines = []
            while line := await response.content.readline():
                lines.append(line)
            return lines

    pieces = asyncio.run(run())
    assert b"".join(pieces) == body
    if read == "readline":
        assert len(pieces) == 3000


def test_a_sock_read_timeout_under_the_attempts_time_fails_the_attempt_over(servers: Servers) -> None:
    """The session's ``ClientTimeout(sock_read=...)``, shorter than the attempt's time, cuts a
    slow primary's attempt as a ``read_timeout``, and the backup answers."""
    a, b = servers["a"], servers["b"]
    a.set(delay=1.0)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast(attempt_timeout=5.0))

    async def run() -> list[str | None]:
        timeout = aiohttp.ClientTimeout(sock_read=0.2)
        async with (
            aiohttp.ClientSession(middlewares=(middleware,), timeout=timeout) as session,
            session.get(a.url() + "/v1/x") as response,
        ):
            assert response.failover.domain == b.url()  # type: ignore[attr-defined]  # the middleware sets it
            return [r.error_type for r in response.failover.attempts]  # type: ignore[attr-defined]  # the middleware sets it

    assert asyncio.run(run()) == ["read_timeout", None]



_REPLAYABLE = ("bytes", "str", "json", "form")  # what the middleware may send again


def _body(kind: str, tmp_path: Path) -> dict[str, Any]:
    """The keyword a caller gives ``session.post`` for a body of ``kind``, made anew."""

    async def generated() -> AsyncIterator[bytes]:
        yield b"part1-"
        yield b"part2"

    if kind == "multipart":
        form = aiohttp.FormData()
        form.add_field("a", "1")
        form.add_field("f", b"bytes", filename="x.bin")
        return {"data": form}
    if kind == "file":
        path = tmp_path / "upload.bin"
        path.write_bytes(b"file-content")
        return {"data": path.open("rb")}
    bodies: dict[str, dict[str, Any]] = {
        "bytes": {"data": b"raw"},
        "str": {"data": "text"},
        "json": {"json": {"k": 1}},
        "form": {"data": {"a": "1"}},
        "generator": {"data": generated()},
    }
    return bodies[kind]


_BODIES = (*_REPLAYABLE, "multipart", "generator", "file")


@pytest.mark.parametrize("kind", _BODIES)
def test_every_kind_of_body_moves_to_the_backup_when_nothing_was_sent(
    servers: Servers, tmp_path: Path, kind: str
) -> None:
    """A POST whose primary refuses the connection (no byte left) reaches the backup with
    its body whole, whatever the body: bytes, text, JSON, a form, multipart, an async
    generator, a file."""
    b = servers["b"]
    refusing = f"http://127.0.0.1:{closed_port()}"
    middleware = FailoverMiddleware([Pool("api", [refusing, b.url()])], fast())

    async def run() -> list[str | None]:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.post(refusing + "/orders", **_body(kind, tmp_path)) as response,
        ):
            return [r.error_type for r in response.failover.attempts]  # type: ignore[attr-defined]  # the middleware sets it

    assert asyncio.run(run()) == ["connection_refused", None]
    ((method, path, headers, body),) = b.seen
    assert (method, path) == ("POST", "/orders")
    assert len(body) == int(headers.get("Content-Length", len(body))) > 0
    expected = {"bytes": b"raw", "str": b"text", "json": b'{"k": 1}', "form": b"a=1",
                "generator": b"part1-part2", "file": b"file-content"}
    assert body == expected.get(kind, body) and (kind != "multipart" or b'filename="x.bin"' in body)


@pytest.mark.parametrize("kind", _BODIES)
def test_a_body_sent_to_a_failing_primary_is_sent_again_only_if_it_can_be(
    servers: Servers, tmp_path: Path, kind: str
) -> None:
    """A POST with an ``Idempotency-Key`` whose primary read it whole, then reset the
    connection before any answer: bytes, text, JSON and a form are sent there again once
    (a drop), then to the backup; multipart, an async generator or a file never are
    (``AllDomainsFailed``, an ``aiohttp.ClientConnectionError``); the backup sees nothing
    of them."""
    a, b = servers["a"], servers["b"]
    a.set(reset=True)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast())

    async def run() -> list[str | None]:
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            try:
                async with session.post(
                    a.url() + "/orders", headers={"Idempotency-Key": "k1"}, **_body(kind, tmp_path)
                ) as response:
                    return [r.error_type for r in response.failover.attempts]  # type: ignore[attr-defined]  # the middleware sets it
            except AllDomainsFailed as error:  # an aiohttp.ClientConnectionError
                return [r.error_type for r in error.attempts]

    attempts = asyncio.run(run())
    if kind in _REPLAYABLE:
        assert a.counts["POST"] == 2
        assert attempts == ["connection_reset", "connection_reset", None] and b.counts["POST"] == 1
        assert b.seen[0][3] == a.seen[0][3] == a.seen[1][3]  # the same bytes
    else:
        assert a.counts["POST"] == 1
        assert attempts == ["connection_reset"] and b.total == 0



@pytest.mark.parametrize(
    ("method", "status", "body"),
    [("HEAD", 200, b'{"ok": true}'), ("GET", 204, b""), ("GET", 304, b""), ("GET", 200, b"")],
    ids=["HEAD", "204", "304", "length-0"],
)
def test_answers_without_a_body_come_from_the_backup_empty_and_keep_their_connection(
    servers: Servers, method: str, status: int, body: bytes
) -> None:
    """HEAD, 204, 304 and ``Content-Length: 0`` answers from the backup reach the caller
    with no body, and their connection serves the next request."""
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    b.set(status=status, body=body)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], fast())

    async def run() -> list[tuple[int, bytes, str | None]]:
        got = []
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            for _ in range(2):
                async with session.request(method, a.url() + "/v1/x") as response:
                    got.append((response.status, await response.read(), response.failover.domain))  # type: ignore[attr-defined]  # the middleware sets it
        return got

    accepted = b.accepted
    assert asyncio.run(run()) == [(status, b"", b.url())] * 2
    assert b.accepted == accepted + 1


def test_a_websocket_to_a_pool_domain_fails_over_like_any_request() -> None:
    """``session.ws_connect`` to the primary's URL goes through the middleware: when the
    primary refuses, its handshake moves to the backup (an aiohttp web server), and the
    socket works."""
    from aiohttp import web

    async def echo(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        async for message in socket:
            await socket.send_str(f"echo {message.data}")
        return socket

    async def run() -> str:
        app = web.Application()
        app.router.add_get("/ws", echo)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        backup = "http://{}:{}".format(*runner.addresses[0][:2])
        refusing = f"http://127.0.0.1:{closed_port()}"
        middleware = FailoverMiddleware([Pool("api", [refusing, backup])], fast())
        try:
            async with (
                aiohttp.ClientSession(middlewares=(middleware,)) as session,
                session.ws_connect(refusing + "/ws") as socket,
            ):
                await socket.send_str("hi")
                answer = await socket.receive_str()
            assert middleware.state().pools["api"].sticky == backup
            return answer
        finally:
            await runner.cleanup()

    assert asyncio.run(run()) == "echo hi"



def test_300_tasks_share_one_session_while_the_primary_flaps(
    flapping: Flapping,
) -> None:
    """300 tasks share one session (a GET, then a POST without an idempotency key, each)
    while the primary cycles healthy, 503, reset and cut mid-body: every GET is answered
    (the backup stays healthy) unless the retry budget said no, a POST fails only as
    ``AllDomainsFailed`` and is never sent twice, and the attempts the caller sees are
    those the servers saw."""
    a, b, _ = flapping
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], FLAPPING_POLICY)
    records: list[AttemptRecord] = []
    posts: Counter[str] = Counter()
    failed: Counter[str] = Counter()

    async def worker(session: aiohttp.ClientSession, n: int) -> None:
        for i in range(2):
            body = f"task-{n}-{i}"
            try:
                if i % 2:
                    posts[body] += 1
                    call = session.post(a.url() + "/orders", data=body.encode())
                else:
                    call = session.get(a.url() + "/rooms")
                async with call as response:
                    await response.read()
                    records.extend(response.failover.attempts)  # type: ignore[attr-defined]  # the middleware sets it
            except AllDomainsFailed as error:
                failed["POST" if i % 2 else f"GET: {error.reason}"] += 1
                records.extend(error.attempts)

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=100)
        async with aiohttp.ClientSession(connector=connector, middlewares=(middleware,)) as session:
            await asyncio.gather(*(worker(session, n) for n in range(300)))

    asyncio.run(main())
    assert {reason for reason in failed if reason.startswith("GET")} <= {"GET: retry_budget"}  # (storm protection)
    assert any(r.error_type is not None for r in records)  # the primary did flap under the load
    check(records, posts, a, b)



def test_a_keep_alive_connection_the_server_closed_is_sent_again_once_as_aiohttp_does(servers: Servers) -> None:
    """A request that finds its pooled connection closed by the server as it went out
    (no answer: the server's keep-alive timeout) is sent again on a fresh connection to
    the same domain, at once, as a bare session does for an idempotent request (RFC 9112,
    9.3.1): two attempts, as the server saw them, answered by the primary, and no breaker
    counts a failure (the backup would have served, and kept, the traffic of a healthy
    primary)."""
    b = servers["b"]
    sent: list[int] = []  # the requests each connection read, in order

    async def closing_after_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answers a connection's first request; closes it when the next one comes."""
        sent.append(0)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                sent[-1] += 1
                if sent[-1] > 1:
                    return
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def run() -> tuple[list[list[str | None]], list[tuple[str, int]]]:
        server = await asyncio.start_server(closing_after_one, "127.0.0.1", 0)
        primary = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        middleware = FailoverMiddleware([Pool("api", [primary, b.url()])], fast())
        attempts = []
        try:
            async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
                for _ in range(3):
                    async with session.get(primary + "/v1/x") as response:
                        assert await response.read() == b"ok"
                        attempts.append([r.error_type for r in response.failover.attempts])  # type: ignore[attr-defined]  # the middleware sets it
        finally:
            server.close()
        return attempts, breakers(middleware)

    attempts, states = asyncio.run(run())
    dropped = [ERROR_REMOTE_PROTOCOL, None]  # the middleware's httpx error for aiohttp's ServerDisconnectedError
    assert attempts == [[None], dropped, dropped]
    assert states == [("closed", 0), ("closed", 0)]
    assert sent == [2, 2, 1] and b.total == 0


def test_a_hedge_ending_with_an_error_of_its_own_ends_the_request_with_it(servers: Servers) -> None:
    """A hedge that ends with an error that says nothing about its domain (here a ``ValueError``
    from the caller's own inner middleware, as a retry there would raise it) ends the request
    with that error once the first attempt failed, as without hedging; the caller does not
    wait for its own timeout."""

    a, b = servers["a"], servers["b"]
    a.set(status=503, delay=0.3)  # the first attempt fails after the hedge ended

    async def refusing_b(request: aiohttp.ClientRequest, handler: ClientHandlerType) -> aiohttp.ClientResponse:
        if request.url.port == b.port:
            raise ValueError("the inner middleware refuses b")
        return await handler(request)

    middleware = FailoverMiddleware(
        [Pool("api", [a.url(), b.url()])], fast(hedging=Hedging(delay=0.05, max_ratio=1.0), sticky=False)
    )

    async def run() -> None:
        async with aiohttp.ClientSession(middlewares=(middleware, refusing_b)) as session:
            async with asyncio.timeout(3):  # bounded: it spins until then
                with pytest.raises(ValueError, match="refuses b"):
                    await session.get(a.url() + "/v1/x")

    asyncio.run(run())


@pytest.mark.parametrize("login", ["/login", "/login-long"], ids=["whole-with-its-head", "read-by-the-pool"])
def test_a_cookie_the_backup_sets_is_filed_under_the_url_asked_for(primary_down: FakeDomains, login: str) -> None:
    """A cookie set by the backup, answering a request for the primary's URL, is filed under
    that URL too: the next requests to it carry the cookie to whichever domain serves them,
    as the session's cookies for the primary's URL go to the backup (and as the requests
    adapter files them); it stays filed under the backup's host, as aiohttp files it. So
    for an answer that came whole with its head and one whose body the pool read."""
    middleware = FailoverMiddleware([Pool("api", [PRIMARY, BACKUP])], fast(sticky=False))

    async def run() -> None:
        async with _session(middleware) as session:
            async with session.get(PRIMARY + login) as response:
                assert (await response.text()).rstrip() == "backup: in"
            assert session.cookie_jar.filter_cookies(URL(PRIMARY))["session"].value == "backup"
            assert session.cookie_jar.filter_cookies(URL(BACKUP))["session"].value == "backup"
            async with session.get(PRIMARY + "/rooms") as response:  # the backup serves it again
                assert response.failover.domain == BACKUP  # type: ignore[attr-defined]  # the middleware sets it
            primary_down.heal(HOSTS[0])
            async with session.get(PRIMARY + "/rooms") as response:
                assert response.failover.domain == PRIMARY  # type: ignore[attr-defined]  # the middleware sets it

    asyncio.run(run())
    assert [r.headers.get("cookie") for r in primary_down.requests(HOSTS[1])] == [None, "session=backup"]
    assert [r.headers.get("cookie") for r in primary_down.requests(HOSTS[0])] == ["session=backup"]


def test_a_cookie_whose_domain_names_the_backup_stays_the_backups(primary_down: FakeDomains) -> None:
    """A cookie the backup sets for its own host by name (``Domain=``) is not the URL asked
    for's (the cookie jar refuses it there): it stays filed under the backup only, as the
    docs say."""
    middleware = FailoverMiddleware([Pool("api", [PRIMARY, BACKUP])], fast(sticky=False))

    async def run() -> tuple[list[str], list[str]]:
        async with _session(middleware) as session:
            async with session.get(PRIMARY + "/login-pinned") as response:
                assert await response.text() == "backup: in"
            return list(session.cookie_jar.filter_cookies(URL(PRIMARY))), list(session.cookie_jar.filter_cookies(URL(BACKUP)))

    assert asyncio.run(run()) == ([], ["pinned"])


def test_a_redirect_to_the_host_that_answered_keeps_the_requests_credentials(primary_down: FakeDomains) -> None:
    """An absolute redirect from the backup to its own host, answering a request for the
    primary's URL, is followed as a redirect to the URL asked for (as a relative one is):
    through the pool, with the request's ``Authorization``, which aiohttp drops for a
    Location on another origin than the URL asked for (a bare session asked the backup
    keeps it, as the requests adapter and the httpx transports do)."""
    middleware = FailoverMiddleware([Pool("api", [PRIMARY, BACKUP])], fast())

    async def run() -> None:
        async with (
            _session(middleware) as session,
            session.get(PRIMARY + "/start", headers={"Authorization": "Bearer t"}) as response,
        ):
            assert await response.text() == "backup: /final"
            assert response.url == URL(BACKUP + "/final")
            assert response.failover.domain == BACKUP  # type: ignore[attr-defined]  # the middleware sets it
            (hop,) = response.history
            assert (hop.status, hop.url) == (302, URL(BACKUP + "/start"))
            assert hop.headers["Location"] == PRIMARY + "/final"  # the URL asked for's
            assert [a.domain for a in hop.failover.attempts] == [PRIMARY, BACKUP]  # type: ignore[attr-defined]  # each hop's own

    asyncio.run(run())
    assert [(r.path, r.headers.get("authorization")) for r in primary_down.requests(HOSTS[1])] == [
        ("/start", "Bearer t"),
        ("/final", "Bearer t"),
    ]


@pytest.mark.parametrize("http", ["httpx", "httpx2"])
def test_the_httpx_transport_follows_a_redirect_to_the_host_that_answered_with_the_requests_credentials(
    primary_down: FakeDomains, http: str
) -> None:
    """The httpx twin: the answer is the URL asked for's (``response.request.url``), so an
    absolute redirect from the backup to its own host is made one to the origin asked for,
    which httpx follows through the pool with the request's ``Authorization`` (it drops
    that for another origin)."""
    module = __import__(http)
    failover = pytest_failover if http == "httpx" else pytest_failover.httpx2
    transport = failover.FailoverTransport([Pool("api", [PRIMARY, BACKUP])], fast())
    with module.Client(transport=transport, follow_redirects=True) as client:
        response = client.get(PRIMARY + "/start", headers={"Authorization": "Bearer t"})
        assert response.text == "backup: /final"
        assert str(response.url) == PRIMARY + "/final"
        assert response.extensions["failover"].domain == BACKUP
        (hop,) = response.history
        assert (hop.status_code, hop.headers["Location"]) == (302, PRIMARY + "/final")
    assert [(r.path, r.headers.get("authorization")) for r in primary_down.requests(HOSTS[1])] == [
        ("/start", "Bearer t"),
        ("/final", "Bearer t"),
    ]


def test_a_hedge_that_wins_with_a_redirect_to_its_own_host_is_followed_as_asked(primary_down: FakeDomains) -> None:
    """The same when the backup's answer is a hedge's, whose request is a copy of its own:
    the redirect is made one to the origin asked for all the same."""
    import httpx

    primary_down.fail(HOSTS[0], faults.latency(1.0))
    hedging = Hedging(delay=0.05, max_ratio=1.0)
    transport = pytest_failover.FailoverTransport([Pool("api", [PRIMARY, BACKUP])], fast(hedging=hedging, sticky=False))
    with httpx.Client(transport=transport) as client:
        hop = client.get(PRIMARY + "/start", headers={"Authorization": "Bearer t"})
    assert hop.extensions["failover"].domain == BACKUP
    assert (hop.status_code, hop.headers["Location"], str(hop.request.url)) == (302, PRIMARY + "/final", PRIMARY + "/start")


def test_the_httpx_transports_error_names_the_request_asked_for(primary_down: FakeDomains) -> None:
    """An error ends the request as asked: the exception's request is the URL asked for, not
    the last domain an attempt went to."""
    import httpx

    primary_down.fail(HOSTS[1], faults.reset())
    policy = fast(schedule=pytest_failover.ExponentialBackoff(max_attempts=1))  # the move after a refusal is free
    transport = pytest_failover.FailoverTransport([Pool("api", [PRIMARY, BACKUP])], policy)
    with httpx.Client(transport=transport) as client, pytest.raises(pytest_failover.AllDomainsFailed) as raised:
        client.get(PRIMARY + "/x")
    assert [a.domain for a in raised.value.attempts] == [PRIMARY, BACKUP]  # it ended on the backup
    assert (str(raised.value.request.url), raised.value.request.headers["host"]) == (PRIMARY + "/x", HOSTS[0])


def test_a_redirect_out_of_the_pools_is_followed_as_by_a_bare_session(primary_down: FakeDomains) -> None:
    """A redirect from the backup to a host of no pool is followed by aiohttp as it would
    be without the middleware: the last hop has no ``response.failover`` (it went straight
    through), the hop the pool answered has its own, and the other origin gets no
    ``Authorization``."""
    primary_down.add(OUTSIDE, _site("outside"))
    middleware = FailoverMiddleware([Pool("api", [PRIMARY, BACKUP])], fast())

    async def run() -> None:
        async with (
            _session(middleware) as session,
            session.get(PRIMARY + "/away", headers={"Authorization": "Bearer t"}) as response,
        ):
            assert (await response.text(), response.url) == ("outside: /final", URL(f"http://{OUTSIDE}/final"))
            assert not hasattr(response, "failover")
            (hop,) = response.history
            assert hop.failover.domain == BACKUP  # type: ignore[attr-defined]  # the middleware sets it
            assert hop.headers["Location"] == f"http://{OUTSIDE}/final"  # not the pool's: as it came

    asyncio.run(run())
    assert [r.headers.get("authorization") for r in primary_down.requests(OUTSIDE)] == [None]


def test_the_httpx_transport_files_a_cookie_the_backup_sets_under_the_url_asked_for(primary_down: FakeDomains) -> None:
    """The httpx twin of the middleware's cookie test: the backup's login cookie goes back to
    it. The answer's request is the URL asked for, as a bare client's (the client files the
    cookie by it); the result says which domain answered."""
    import httpx

    from pytest_failover import AsyncFailoverTransport

    transport = AsyncFailoverTransport([Pool("api", [PRIMARY, BACKUP])], fast(sticky=False))

    async def run() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            login = await client.get(PRIMARY + "/login")
            assert login.text == "backup: in"
            assert (str(login.url), login.request.headers["host"]) == (PRIMARY + "/login", URL(PRIMARY).host)
            assert login.extensions["failover"].domain == BACKUP
            await client.get(PRIMARY + "/rooms")

    asyncio.run(run())
    assert [r.headers.get("cookie") for r in primary_down.requests(HOSTS[1])] == [None, "session=backup"]


def test_a_handler_that_keeps_no_auto_decompress_leaves_the_sessions() -> None:
    """Where the sending closure is not aiohttp's (another aiohttp, a handler of a test's
    own), nothing is read from it: the session's value stands."""
    from pytest_failover.integrations.aiohttp import _asked

    async def plain(request: aiohttp.ClientRequest) -> aiohttp.ClientResponse:
        raise AssertionError("never sent")

    def unfilled() -> ClientHandlerType:
        async def send(request: aiohttp.ClientRequest) -> aiohttp.ClientResponse:
            raise AssertionError(auto_decompress)  # noqa: F821  # never sent: only its closure, emptied below, is read

        auto_decompress = True
        del auto_decompress  # its cell emptied
        return send

    def chained(handler: ClientHandlerType) -> ClientHandlerType:
        async def wrapped(request: aiohttp.ClientRequest) -> aiohttp.ClientResponse:
            return await next_h(request)

        next_h = handler
        return wrapped

    assert _asked(plain, "auto_decompress") is None
    assert _asked(unfilled(), "auto_decompress") is None
    assert _asked(chained(plain), "auto_decompress") is None


def test_a_request_that_fails_leaves_no_reference_cycle_of_the_middlewares() -> None:
    """Every domain refused: the caller gets ``AllDomainsFailed``, and refcounting frees the
    request's lane and exchange. The httpx error the inner transport raised for each
    attempt, kept in a local of the frame its traceback holds, was a cycle with that frame,
    and through it with the request's, in an outage for every request (aiohttp leaves its
    own connect error on a cycle, as without failover: not counted)."""
    from pytest_failover._exchange import Exchange, Lane

    from .garbage import left_for_the_collector

    dead = [f"http://127.0.0.1:{closed_port()}" for _ in range(2)]
    middleware = FailoverMiddleware([Pool("api", dead)], fast(breaker_threshold=10**6, retry_budget=None))

    async def main() -> None:
        async with _session(middleware) as session:
            for _ in range(3):
                with pytest.raises(AllDomainsFailed):
                    async with session.get(dead[0] + "/x"):
                        pass

    assert left_for_the_collector(lambda: asyncio.run(main()), (Exchange, Lane)) == []
