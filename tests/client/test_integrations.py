"""What only the requests and aiohttp front-ends have: their own errors, retries, options, imports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

import pytest_failover
from pytest_failover import ExponentialBackoff, FailoverTransport, Policy, Pool
from pytest_failover.integrations import failover_options
from pytest_failover.integrations.requests import FailoverAdapter

from .frontends import http_of
from .servers import LoopbackServer, closed_port
from .test_transport import fast

Servers = dict[str, LoopbackServer]


def test_a_body_past_the_read_limit_without_a_length_reaches_the_caller_whole(
    make_client: Any, servers: Servers
) -> None:
    """A chunked body longer than ``read_body_max_bytes`` is read up to the limit, then
    handed over: the caller gets every byte, in order."""
    a = servers["a"]
    body = bytes(range(256)) * 1200  # 300 KiB, five chunks
    a.set(body=body, chunked=True)
    client = make_client([Pool("api", [a.url()])], fast(read_body_max_bytes=100 << 10))
    response = client.request("GET", a.url() + "/file")
    assert response.content == body and response.failover is not None
    small = b'{"small": true}'
    a.set(body=small, chunked=True)
    assert client.request("GET", a.url() + "/file").content == small  # under the limit: read whole


def test_chunked_bodies_read_within_the_limit_or_past_it_keep_their_connection(
    make_client: Any, servers: Servers
) -> None:
    """A body without a length, read in the transport (within the limit) or by the caller
    (past it), hands its connection back for the next request: one connection serves all."""
    a = servers["a"]
    client = make_client([Pool("api", [a.url()])], fast(read_body_max_bytes=100 << 10))
    small, big = b'{"small": true}', bytes(range(256)) * 1200
    accepted = a.accepted
    for body in (small, big, small, big):
        a.set(body=body, chunked=True)
        assert client.request("GET", a.url() + "/file").content == body
    assert a.accepted == accepted + 1


def test_sized_bodies_read_whole_keep_their_connection(make_client: Any, servers: Servers) -> None:
    """A body with a ``Content-Length``, read whole in the transport, hands its connection
    back for the next request: one connection serves all (the requests adapter leaves it to
    urllib3, which gives it back as the last byte comes)."""
    a = servers["a"]
    client = make_client([Pool("api", [a.url()])], fast())
    accepted = a.accepted
    for n in range(3):
        a.set(body=b'{"n": %d}' % n)
        response = client.request("GET", a.url() + "/file")
        assert response.content == b'{"n": %d}' % n and response.failover is not None
    assert a.accepted == accepted + 1


def test_a_sized_body_still_arriving_is_read_whole_and_keeps_its_connection(make_client: Any, servers: Servers) -> None:
    """A body with a ``Content-Length`` too long to come with its head (the aiohttp
    middleware reads it then, not from what aiohttp holds already) reaches the caller
    whole, and its connection serves the next request."""
    a = servers["a"]
    client = make_client([Pool("api", [a.url()])], fast(read_body_max_bytes=1 << 20))
    accepted = a.accepted
    for n in range(3):
        body = bytes([n]) * (600 << 10)
        a.set(body=body)
        assert client.request("GET", a.url() + "/file").content == body
    assert a.accepted == accepted + 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_chunked_body_past_the_limit_closed_early_frees_its_connection(kind: str, servers: Servers) -> None:
    """Streamed past the read limit and closed after one chunk, the response gives its
    connection back: the next request on a one-connection pool is not left waiting."""
    import asyncio

    from pytest_failover import AsyncFailoverTransport

    a = servers["a"]
    a.set(body=bytes(range(256)) * 1200, chunked=True)
    pools, policy = [Pool("api", [a.url()])], fast(read_body_max_bytes=100 << 10)
    limits, timeout = httpx.Limits(max_connections=1), httpx.Timeout(2.0, pool=0.5)
    if kind == "sync":
        inner = httpx.HTTPTransport(limits=limits)
        with httpx.Client(transport=FailoverTransport(pools, policy, inner), timeout=timeout) as client:
            with client.stream("GET", a.url() + "/file") as response:
                first = next(response.iter_raw())
            assert first and client.get(a.url() + "/again").status_code == 200
        return

    async def main() -> None:
        inner = httpx.AsyncHTTPTransport(limits=limits)
        async with httpx.AsyncClient(transport=AsyncFailoverTransport(pools, policy, inner), timeout=timeout) as client:
            async with client.stream("GET", a.url() + "/file") as response:
                first = await response.aiter_raw().__anext__()
            assert first and (await client.get(a.url() + "/again")).status_code == 200

    asyncio.run(main())


def test_requests_own_retry_is_off_inside_the_pools_and_kept_for_other_hosts(servers: Servers) -> None:
    """A wrapped adapter's urllib3 ``Retry`` never stacks on the policy: one attempt per
    policy step reaches a pool's domain, while a host outside the pools keeps its retries."""
    a, c = servers["a"], servers["c"]
    a.set(status=503)
    c.set(status=503)
    mine = HTTPAdapter(max_retries=Retry(total=3, status_forcelist=[503], backoff_factor=0, raise_on_status=False))
    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(schedule=ExponentialBackoff(base=0.001, max_attempts=2)), adapter=mine)
    with requests.Session() as session:
        session.mount("http://", adapter)
        assert session.get(a.url() + "/x").status_code == 503
        assert a.total == 2  # the policy's two attempts, not 2 x 4
        assert session.get(c.url() + "/x").status_code == 503
        assert c.total == 4  # the wrapped adapter's own 1 + 3 retries
        assert not hasattr(session.get(c.url() + "/x"), "failover")
    assert isinstance(mine.max_retries, Retry) and mine.max_retries.total == 3  # the caller's adapter is untouched


def test_requests_errors_are_connection_errors_that_carry_the_attempts(servers: Servers) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    adapter = FailoverAdapter([Pool("api", [dead])], fast(breaker_threshold=1))
    with requests.Session() as session:
        session.mount("http://", adapter)
        with pytest.raises(requests.exceptions.ConnectionError) as caught:
            session.get(dead + "/x")
        error = caught.value
        assert isinstance(error, pytest_failover.AllDomainsFailed)
        assert [a.error_type for a in error.attempts] == ["connection_refused"] and error.pool == "api"
        assert isinstance(error.request, requests.PreparedRequest) and error.request.url == dead + "/x"
        assert isinstance(error.__cause__, requests.exceptions.ConnectionError)  # requests' own, as raised
        with failover_options({"domain": dead}), pytest.raises(requests.exceptions.ConnectionError) as refused:
            session.get(dead + "/x")
        assert isinstance(refused.value, pytest_failover.CircuitOpenError) and refused.value.attempts == ()


def test_aiohttp_errors_are_client_errors_that_carry_the_attempts() -> None:
    import asyncio

    from pytest_failover.integrations.aiohttp import FailoverMiddleware

    dead = f"http://127.0.0.1:{closed_port()}"
    middleware = FailoverMiddleware([Pool("api", [dead])], fast())

    async def main() -> BaseException:
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            with pytest.raises(aiohttp.ClientConnectionError) as caught:
                await session.get(dead + "/x")
            return caught.value

    error = asyncio.run(main())
    assert isinstance(error, pytest_failover.AllDomainsFailed) and error.reason == "exhausted"
    assert isinstance(error.__cause__, aiohttp.ClientConnectorError)


def test_one_adapter_on_both_schemes_is_one_set_of_breakers(servers: Servers) -> None:
    """Mounting the same adapter for ``http://`` and ``https://`` shares its breakers."""
    dead = f"http://127.0.0.1:{closed_port()}"
    adapter = FailoverAdapter([Pool("api", [dead, servers["a"].url()])], fast(breaker_threshold=1))
    with requests.Session() as session:
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.get(dead + "/x")
    assert session.get_adapter("https://x") is session.get_adapter("http://x")
    assert adapter.state().pools["api"].domain(dead).breaker == "open"


def test_failover_options_are_checked_on_entry_and_nest() -> None:
    from pytest_failover.integrations._options import current_extensions

    with pytest.raises(ValueError, match="unknown option"), failover_options({"pinned": "x"}):
        pass
    assert current_extensions() == {}
    with failover_options({"enabled": False}):
        with failover_options({"pool": "api"}):
            assert current_extensions() == {"failover": {"pool": "api"}}
        assert current_extensions() == {"failover": {"enabled": False}}
    assert current_extensions() == {}


def test_a_wrapped_adapter_must_be_an_http_adapter() -> None:
    with pytest.raises(TypeError, match="HTTPAdapter"):
        FailoverAdapter([Pool("api", ["http://a.test"])], adapter=object())  # type: ignore[arg-type]  # the wrong type on purpose


@pytest.mark.parametrize(("module", "extra"), [("requests", "requests"), ("aiohttp", "aiohttp")])
def test_a_missing_library_says_which_extra_to_install(module: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        f"try:\n    import pytest_failover.integrations.{module}\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install 'pytest-failover[{extra}]'" in out.stdout


def test_the_package_imports_neither_library() -> None:
    code = "import sys, pytest_failover.integrations; print('requests' in sys.modules, 'aiohttp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("content", [b"cached", bytes(range(256)) * 2400], ids=["short", "600 KiB"])
def test_a_fallback_answer_becomes_the_library_response(make_client: Any, content: bytes) -> None:
    """The fallback returns a response of the front-end's httpx library (httpx inside the
    requests and aiohttp front-ends); every client hands it over as its own, a body past
    aiohttp's stream buffer too (its stream once refused it)."""
    dead = f"http://127.0.0.1:{closed_port()}"
    client = make_client(
        [Pool("api", [dead])],
        fast(),
        fallback=lambda request, error: http_of(request).Response(203, headers={"X-Offline": "1"}, content=content),
    )
    response = client.request("GET", dead + "/x")
    assert (response.status_code, response.headers["x-offline"], response.content) == (203, "1", content)
    assert response.failover is not None and response.failover.fallback


def test_the_policy_is_the_transports(make_client: Any) -> None:
    """Each front-end runs the transports' loop: the same Policy type, the same state shape."""
    client = make_client([Pool("api", ["http://a.test", "http://b.test"])], Policy())
    assert [d.domain for d in client.transport.state().pools["api"].domains] == ["http://a.test", "http://b.test"]


def test_a_hedge_through_the_adapter_leaves_the_request_it_races_as_it_was_sent(servers: Servers) -> None:
    """An attempt on another domain sends a copy of the ``PreparedRequest`` of its own: a
    hedge that goes out while the first attempt waits for its answer never rewrites the
    URL (or headers) of the request that attempt is sending, and the answer's ``request``
    and ``url`` are those of the attempt that answered."""
    a, b = servers["a"], servers["b"]
    a.set(delay=0.4)  # the first attempt still waits for its answer when the hedge goes
    sent: list[tuple[str, str]] = []  # each send's URL before it, and after

    class Watching(HTTPAdapter):
        def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
            before = request.url or ""
            try:
                return super().send(request, *args, **kwargs)
            finally:
                sent.append((before, request.url or ""))

    policy = fast(hedging=pytest_failover.Hedging(delay=0.05, max_ratio=1.0), sticky=False)
    adapter = FailoverAdapter([Pool("api", [a.url(), b.url()])], policy, adapter=Watching())
    with requests.Session() as session:
        session.mount("http://", adapter)
        response = session.get(a.url() + "/v1/x")
        assert response.failover.domain == b.url()  # type: ignore[attr-defined]  # the adapter sets it
        assert response.url == response.request.url == b.url() + "/v1/x"
        deadline = time.monotonic() + 5.0
        while len(sent) < 2 and time.monotonic() < deadline:  # the loser ends, cut or answered
            time.sleep(0.01)
    adapter.close()
    assert sorted(before for before, _ in sent) == sorted([a.url() + "/v1/x", b.url() + "/v1/x"])
    assert [after for _, after in sent] == [before for before, _ in sent]  # nothing rewritten mid-send


def test_a_hedge_through_the_middleware_leaves_the_request_it_races_as_it_was_sent(servers: Servers) -> None:
    """The aiohttp twin of the adapter's test: the hedge's ``ClientRequest`` is its own, so
    the request the first attempt is still sending keeps its URL, and the answer's URL is
    the domain's that answered."""
    from aiohttp.client_middlewares import ClientHandlerType

    from pytest_failover.integrations.aiohttp import FailoverMiddleware

    a, b = servers["a"], servers["b"]
    a.set(delay=0.4)  # the first attempt still waits for its answer when the hedge goes
    sent: list[tuple[str, str]] = []  # each send's URL before it, and after

    async def watching(request: aiohttp.ClientRequest, handler: ClientHandlerType) -> aiohttp.ClientResponse:
        before = str(request.url)
        try:
            return await handler(request)
        finally:
            sent.append((before, str(request.url)))

    policy = fast(hedging=pytest_failover.Hedging(delay=0.05, max_ratio=1.0), sticky=False)
    middleware = FailoverMiddleware([Pool("api", [a.url(), b.url()])], policy)

    async def run() -> tuple[str, str | None]:
        async with aiohttp.ClientSession(middlewares=(middleware, watching)) as session:
            async with session.get(a.url() + "/v1/x") as response:
                await response.read()
                answered = (str(response.url), response.failover.domain)  # type: ignore[attr-defined]  # the middleware sets it
            for _ in range(500):  # the loser ends, cut or answered (bounded: 5 s)
                if len(sent) == 2:
                    break
                await asyncio.sleep(0.01)
        return answered

    url, domain = asyncio.run(run())
    assert (url, domain) == (b.url() + "/v1/x", b.url())
    assert sorted(before for before, _ in sent) == sorted([a.url() + "/v1/x", b.url() + "/v1/x"])
    assert [after for _, after in sent] == [before for before, _ in sent]  # nothing rewritten mid-send


def test_the_middleware_names_the_phase_the_loops_time_limit_cut(servers: Servers) -> None:
    """aiohttp's attempts run under the loop's one time limit: one cut while connecting
    is a ``connect_timeout`` (nothing was sent: a POST moves on), one cut while waiting
    for the answer a ``read_timeout`` (a POST without an idempotency key does not)."""
    from pytest_failover.integrations.aiohttp import FailoverMiddleware
    from pytest_failover.simulator._server import _full_listener

    listener, fillers = _full_listener()  # its SYNs are dropped: a connect never completes
    hanging = f"http://127.0.0.1:{listener.getsockname()[1]}"
    a, b = servers["a"], servers["b"]
    a.set(delay=1.0)  # connects at once, answers late

    async def post(pool: list[str]) -> tuple[list[str | None], str | None]:
        middleware = FailoverMiddleware([Pool("api", pool)], fast(attempt_timeout=0.2, sticky=False))
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            try:
                async with session.post(pool[0] + "/orders", data=b"{}") as response:
                    result = response.failover  # type: ignore[attr-defined]  # the middleware sets it
                    return [r.error_type for r in result.attempts], result.domain
            except aiohttp.ClientConnectionError as error:
                return [r.error_type for r in error.attempts], None  # type: ignore[attr-defined]  # AllDomainsFailed

    refusing = f"http://127.0.0.1:{closed_port()}"
    try:
        assert asyncio.run(post([hanging, b.url()])) == (["connect_timeout", None], b.url())
        assert asyncio.run(post([a.url(), b.url()])) == (["read_timeout"], None)
        # On another domain than the URL's, the attempt sends its own copy of the request: its phase
        assert asyncio.run(post([refusing, hanging, b.url()])) == (["connection_refused", "connect_timeout", None], b.url())
        assert asyncio.run(post([refusing, a.url(), b.url()])) == (["connection_refused", "read_timeout"], None)
    finally:
        for sock in (listener, *fillers):
            sock.close()
