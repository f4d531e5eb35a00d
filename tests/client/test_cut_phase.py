"""An async attempt cut by its guard (not by the library's own timeout) names the phase the
cut found it in, as the library would have: a connect or a wait for a connection sent
nothing, so a POST moves to the backup at once.

The library's own timeouts are pushed out of reach by the inner transport, as a busy event
loop does when it runs the guard's timer before them: the guard then fires first every time,
with no timing luck, while httpcore (httpcore2 under httpx2) is in the phase each case sets up
on real loopback sockets.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import pytest_failover
from pytest_failover import ExponentialBackoff, Policy, Pool, faults, semconv
from pytest_failover import httpx2 as failover_httpx2
from pytest_failover.simulator import FakeDomains

PRIMARY = "primary.cut.test"
BACKUP = "backup.cut.test"
HELD = "held.cut.test"  # outside the pool: its streamed answer holds the one connection
ATTEMPT = 0.3  # seconds: the guard cuts an attempt GRACE after it
LATE = 60.0  # the library's own timeouts: far beyond the guard
# one attempt, and a move to each untried domain after a failure that sent nothing (which
# the schedule does not count): at most one attempt on each domain
POLICY = Policy(
    schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=1),
    attempt_timeout=ATTEMPT,
    deadline=10.0,
    sticky=False,
)


class LateTimeouts:
    """The library's ``AsyncHTTPTransport`` whose own timeouts never fire first."""

    def __init__(self, http: ModuleType, **kwargs: Any) -> None:
        self.inner = http.AsyncHTTPTransport(**kwargs)

    async def handle_async_request(self, request: Any) -> Any:
        request.extensions = {**request.extensions, "timeout": dict.fromkeys(("connect", "read", "write", "pool"), LATE)}
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The event loop a test runs in (under trio, the guard is anyio's cancel scope)."""
    name: str = request.param
    return name


def run(backend: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`post` in an event loop of ``backend``."""
    return anyio.run(functools.partial(post, *args, **kwargs), backend=backend)


async def post(
    http: ModuleType,
    pool: Pool,
    inner: LateTimeouts,
    url: str,
    body: bytes | AsyncIterator[bytes] = b"{}",
    hold: bool = False,
    options: dict[str, Any] | None = None,
) -> Any:
    """POST ``body`` (no Idempotency-Key) through the library's failover transport over
    ``inner``: the response, or the failover error (of the library's front-end) the caller
    got. ``hold``: while a streamed answer from a host outside the pool holds a connection;
    ``options``: the transport's (a tracer provider)."""
    front: ModuleType = failover_httpx2 if http.__name__ == "httpx2" else pytest_failover
    transport = front.AsyncFailoverTransport([pool], POLICY, transport=inner, **(options or {}))
    async with http.AsyncClient(transport=transport) as client, contextlib.AsyncExitStack() as stack:
        if hold:
            await stack.enter_async_context(client.stream("GET", f"http://{HELD}/held"))  # passes through
        try:
            return await client.post(url, content=body)
        except front.FailoverError as exc:
            return exc


@pytest.fixture(scope="module")
def domains() -> Iterator[FakeDomains]:
    with FakeDomains(block_unknown_hosts=True) as fd:
        for host in (PRIMARY, BACKUP, HELD):
            fd.add(host)
        yield fd


@pytest.fixture
def pool(domains: FakeDomains) -> Pool:
    domains.heal()
    return Pool("api", [f"http://{PRIMARY}", f"http://{BACKUP}"])


def test_a_post_cut_while_connecting_moves_to_the_backup(http: ModuleType, backend: str, domains: FakeDomains, pool: Pool) -> None:
    """The guard cuts a connect that never completes: a ``connect_timeout`` that sent nothing,
    so a POST without an Idempotency-Key is answered by the backup."""
    domains.fail(PRIMARY, faults.connect_timeout())
    response = run(backend, http, pool, LateTimeouts(http), f"http://{PRIMARY}/v1/rooms")
    assert response.status_code == 200
    result = response.extensions["failover"]
    assert result.domain == f"http://{BACKUP}"
    first = result.attempts[0]
    assert (first.error_type, first.sent) == ("connect_timeout", False), first
    assert first.duration < LATE / 10, first  # cut by the guard, not by the library's own timeout


def test_the_attempt_span_of_a_connect_cut_by_the_guard_names_a_connect_timeout(
    http: ModuleType, backend: str, domains: FakeDomains, pool: Pool
) -> None:
    """Telemetry names the phase the guard cut: the primary's attempt span says
    ``connect_timeout``, the backup's answered. (A provider of the test's own: a global one
    would turn telemetry on for every later test of the process.)"""
    domains.fail(PRIMARY, faults.connect_timeout())
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    traced = {"tracer_provider": provider}
    response = run(backend, http, pool, LateTimeouts(http), f"http://{PRIMARY}/v1/rooms", options=traced)
    assert response.status_code == 200
    attempts = [dict(s.attributes or {}) for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert [(a[semconv.FAILOVER_DOMAIN], a.get(semconv.ERROR_TYPE)) for a in attempts] == [
        (f"http://{PRIMARY}", "connect_timeout"),
        (f"http://{BACKUP}", None),
    ]


def test_a_connect_cut_by_the_guard_raises_the_library_s_connect_timeout(
    http: ModuleType, backend: str, domains: FakeDomains, pool: Pool
) -> None:
    """With every domain out of reach, the caller's error is caused by the library's own
    ``ConnectTimeout``, as the library raises it."""
    domains.fail(PRIMARY, faults.connect_timeout())
    domains.fail(BACKUP, faults.connect_timeout())
    error = run(backend, http, pool, LateTimeouts(http), f"http://{PRIMARY}/v1/rooms")
    assert isinstance(error, http.TransportError)  # the library's family
    assert [(a.error_type, a.sent) for a in error.attempts] == [("connect_timeout", False)] * 2
    assert isinstance(error.__cause__, http.ConnectTimeout), repr(error.__cause__)


def test_a_wait_for_a_connection_cut_by_the_guard_is_a_pool_timeout(http: ModuleType, backend: str, pool: Pool) -> None:
    """An attempt cut while it waits for the pool's one connection (held by another answer)
    is a ``pool_timeout`` that sent nothing, on each domain."""
    inner = LateTimeouts(http, limits=http.Limits(max_connections=1))
    error = run(backend, http, pool, inner, f"http://{PRIMARY}/v1/rooms", hold=True)
    assert [(a.error_type, a.sent) for a in error.attempts] == [("pool_timeout", False)] * 2
    assert isinstance(error.__cause__, http.PoolTimeout), repr(error.__cause__)


def test_a_read_cut_by_the_guard_stays_a_read_timeout(http: ModuleType, backend: str, domains: FakeDomains, pool: Pool) -> None:
    """A request that went out and was never answered is cut as a ``read_timeout`` that may
    have been sent: a POST without an Idempotency-Key is not sent again."""
    domains.fail(PRIMARY, faults.read_timeout())
    error = run(backend, http, pool, LateTimeouts(http), f"http://{PRIMARY}/v1/rooms")
    assert [(a.error_type, a.sent) for a in error.attempts] == [("read_timeout", True)]
    assert isinstance(error.__cause__, http.ReadTimeout), repr(error.__cause__)


def test_a_cut_while_a_streamed_body_sleeps_is_not_a_connect_timeout(
    http: ModuleType, backend: str, pool: Pool
) -> None:
    """An upload whose body waits between chunks is cut after its headers went out: a sleep
    the body makes is not httpcore's wait between connect retries, and bytes left."""

    async def body() -> AsyncIterator[bytes]:
        yield b"first chunk"
        await anyio.sleep(LATE)  # the next chunk comes too late

    error = run(backend, http, pool, LateTimeouts(http), f"http://{PRIMARY}/v1/upload", body())
    assert [(a.error_type, a.sent) for a in error.attempts] == [("read_timeout", True)]


@pytest.fixture
def unread() -> Iterator[int]:
    """A loopback port whose connections complete (the kernel's accept queue) and are never
    read: a TLS handshake waits for ever, a large request body fills the buffers and its
    write blocks."""
    with socket.create_server(("127.0.0.1", 0), backlog=8) as listener:
        yield int(listener.getsockname()[1])


def test_a_write_cut_by_the_guard_is_a_write_timeout(http: ModuleType, backend: str, unread: int) -> None:
    """An attempt cut while it writes a body nobody reads is a ``write_timeout``: bytes left."""
    body = b"x" * (32 * 1024 * 1024)  # far more than a loopback socket's buffers hold
    url = f"http://127.0.0.1:{unread}"
    error = run(backend, http, Pool("api", [url]), LateTimeouts(http), f"{url}/upload", body)
    assert [(a.error_type, a.sent) for a in error.attempts] == [("write_timeout", True)]
    assert isinstance(error.__cause__, http.WriteTimeout), repr(error.__cause__)


def test_a_tls_handshake_cut_by_the_guard_is_a_connect_timeout(http: ModuleType, backend: str, unread: int) -> None:
    """An attempt cut while its TLS handshake waits for the server's hello sent nothing."""
    url = f"https://127.0.0.1:{unread}"
    error = run(backend, http, Pool("api", [url]), LateTimeouts(http), f"{url}/v1/rooms")
    assert [(a.error_type, a.sent) for a in error.attempts] == [("connect_timeout", False)]
    assert isinstance(error.__cause__, http.ConnectTimeout), repr(error.__cause__)


@pytest.fixture
def refused() -> Iterator[int]:
    """A loopback port bound and not listening: every connect is refused at once."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield int(bound.getsockname()[1])


def test_a_connect_retry_s_wait_cut_by_the_guard_is_a_connect_timeout(
    http: ModuleType, backend: str, refused: int
) -> None:
    """An attempt cut while httpcore waits to connect again (``retries``: 0 s, then 0.5 s,
    longer than the attempt) sent nothing."""
    url = f"http://127.0.0.1:{refused}"
    error = run(backend, http, Pool("api", [url]), LateTimeouts(http, retries=3), f"{url}/v1/rooms")
    assert [(a.error_type, a.sent) for a in error.attempts] == [("connect_timeout", False)]
    assert isinstance(error.__cause__, http.ConnectTimeout), repr(error.__cause__)
