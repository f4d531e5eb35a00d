"""Requests that end early, and attempts cut at their time, leave nothing behind: no
connection of the inner pool busy for good, no probe lease held, nothing counted in flight,
no task, thread or deadline entry, and the next request is answered at once. Real loopback
servers, httpx's own inner transports.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import anyio
import httpx
import pytest

import pytest_failover
from pytest_failover import ExponentialBackoff, Hedging, Policy, Pool
from pytest_failover import httpx2 as pf2

from .servers import LoopbackServer


def failover(http: ModuleType) -> Any:
    """The module of the failover transports over ``http`` (httpx or httpx2)."""
    return pytest_failover if http is httpx else pf2


def busy(inner: Any) -> list[Any]:
    """What ``inner``'s connection pool still holds for requests that are over: the
    requests it has not let go of (a response never closed), the connections it keeps
    busy (empty once every response is closed)."""
    pool = inner._pool
    return [*pool._requests, *(c for c in pool.connections if not (c.is_idle() or c.is_closed()))]


def slow_to_close(http: ModuleType) -> Any:
    """``http``'s own async transport, whose responses take a moment to close: the close of
    httpcore's stream (``PoolByteStream.aclose``) marks it closed, then waits, shielded from
    anyio's cancellations, for its connection's lock (another task's, a moment, on a loaded
    loop) before it hands the connection back. Modelled here with the wait made long."""

    class SlowToClose(http.AsyncHTTPTransport):  # type: ignore[name-defined,misc]  # the library's, chosen at run time
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            response.stream = _SlowClose(response.stream)
            return response

    return SlowToClose()


class _SlowClose:
    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        if self._closed:  # as httpcore's: closed once, whatever became of it
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.3)
            await self._stream.aclose()


@pytest.mark.parametrize("chunked", [False, True], ids=["declared-length", "counted"])
def test_an_attempt_whose_body_arrived_in_time_is_not_cut_while_its_stream_closes(
    servers: dict[str, LoopbackServer], http: ModuleType, chunked: bool
) -> None:
    """An async attempt that read its whole body within its time is not cut while the inner
    transport closes the body's stream (httpcore shields that close from anyio's
    cancellations, not from a task's ``cancel()``): the request is answered, its domain
    counts no failure, and the inner pool lets go of the request and its connection (a cut
    there left both busy for good, one connection of the pool's limit each). A body of
    declared length (read whole) and one read by count alike."""
    a = servers["a"]
    a.set(chunked=chunked)
    inner = slow_to_close(http)
    # (two attempts: a body of no declared length is then counted as it comes)
    policy = Policy(schedule=ExponentialBackoff(max_attempts=2), attempt_timeout=0.1, deadline=2.0)
    transport = failover(http).AsyncFailoverTransport([Pool("api", [a.url()])], policy, inner)

    async def main() -> tuple[int, list[Any]]:
        async with http.AsyncClient(transport=transport) as client:
            response = await client.get(f"{a.url()}/x")
            return response.status_code, busy(inner)

    status, left = anyio.run(main)
    assert (status, left) == (200, [])
    [domain] = transport.state().pools["api"].domains
    assert (domain.breaker, domain.consecutive_failures) == ("closed", 0)


class Leaving(BaseException):
    """The caller leaves (as a KeyboardInterrupt would)."""


def leave(thread: threading.Thread) -> None:
    """Raise :class:`Leaving` in ``thread`` at its next bytecode: a KeyboardInterrupt-like
    exception in a thread other than the main one (after a ``time.sleep`` it is in, returns)."""
    assert thread.ident is not None
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Leaving))
    assert done == 1


@contextmanager
def interrupted() -> Iterator[Callable[[Callable[[], bool], float], None]]:
    """A signal to the main thread (this test's) whose handler raises :class:`Leaving`, as
    Ctrl-C raises KeyboardInterrupt there: it ends a wait the thread is blocked in. Armed
    by the function given, with the condition to wait for and the seconds after it."""
    assert threading.current_thread() is threading.main_thread()

    def handler(signum: int, frame: object) -> None:
        raise Leaving

    previous = signal.signal(signal.SIGUSR1, handler)
    timers: list[threading.Thread] = []

    def arm(condition: Callable[[], bool], after: float) -> None:
        def fire() -> None:
            until(condition)
            time.sleep(after)
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)

        timers.append(threading.Thread(target=fire))
        timers[-1].start()

    try:
        yield arm
    finally:
        for timer in timers:
            timer.join(10)
        signal.signal(signal.SIGUSR1, previous)


async def settled(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    """:func:`until`, in an event loop (asyncio's or trio's)."""
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await anyio.sleep(0.005)


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Back once ``condition()`` holds (a server's count, from its own thread), ``timeout`` at most."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


# One domain answering 503, whose retry waits a whole second (``random``: the top of the
# jitter): the 503's body is not read (only a 2xx body is), so its connection is busy until
# the answer is closed.
WAITS = Policy(schedule=ExponentialBackoff(base=1.0, cap=1.0, max_attempts=2), attempt_timeout=2.0, deadline=10.0)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_request_left_while_it_waits_to_retry_closes_the_answer_it_moved_past(
    servers: dict[str, LoopbackServer], http: ModuleType, kind: str
) -> None:
    """A caller that leaves a request while it waits to retry after a 503 (a task cancelled;
    a KeyboardInterrupt-like exception in a sync thread) leaves the 503's connection to the
    pool, closed: the inner pool holds no request and no busy connection, and the next
    request is answered."""
    a = servers["a"]
    a.set(status=503)
    url = f"{a.url()}/x"
    if kind == "async":
        inner: Any = http.AsyncHTTPTransport()
        transport: Any = failover(http).AsyncFailoverTransport([Pool("api", [a.url()])], WAITS, inner, random=lambda: 0.999)

        async def main() -> tuple[list[Any], int]:
            async with http.AsyncClient(transport=transport) as client:
                request = asyncio.ensure_future(client.get(url))
                await settled(lambda: a.total >= 1)  # the 503 arrived: the request waits to retry
                await asyncio.sleep(0.2)
                request.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await request
                left = busy(inner)
                a.set()
                return left, (await client.get(url)).status_code

        assert asyncio.run(main()) == ([], 200)
        return
    inner = http.HTTPTransport()
    transport = failover(http).FailoverTransport([Pool("api", [a.url()])], WAITS, inner, random=lambda: 0.999)
    left: list[BaseException] = []
    with http.Client(transport=transport) as client:

        def run() -> None:
            try:
                client.get(url)
            except Leaving as exc:
                left.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        until(lambda: a.total >= 1)
        time.sleep(0.2)
        leave(thread)
        thread.join(10)
        assert len(left) == 1
        assert busy(inner) == []
        a.set()
        assert client.get(url).status_code == 200


# A hedging pool whose primary answers 503 after 0.3 s, its hedge (due at 0.05 s) on a backup
# that is slower still: the request holds the 503, its body unread, while it waits for the hedge.
HEDGED = Policy(
    schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
    attempt_timeout=1.0,
    deadline=10.0,
    hedging=Hedging(delay=0.05, max_ratio=1.0),
)


class Wrapping:
    """A sync inner transport of the caller's own, over ``inner``: the race cannot cut its
    sockets, so it sends the attempt and its hedges from its threads (``ThreadRace._pooled``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def handle_request(self, request: Any) -> Any:
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("kind", ["sync", "sync-pooled", "asyncio", "trio"])
def test_a_request_left_while_its_hedge_races_closes_the_answer_it_holds(
    servers: dict[str, LoopbackServer], http: ModuleType, kind: str
) -> None:
    """A caller that leaves while its request waits for a hedge, holding the primary's 503
    (a KeyboardInterrupt-like exception in a sync thread, the race's threads sending or
    not; a task cancelled; a trio cancel scope), leaves that answer closed: once the
    hedge's attempt is over the inner pool holds no request and no busy connection, and
    the next request is answered."""
    a, b = servers["a"], servers["b"]
    a.set(status=503, delay=0.3)
    b.set(delay=3.0)
    pools = [Pool("api", [a.url(), b.url()])]
    url = f"{a.url()}/x"

    def sent() -> bool:  # the 503 arrived, the hedge is on the wire
        return a.total >= 1 and b.total >= 1

    if kind in ("asyncio", "trio"):
        inner: Any = http.AsyncHTTPTransport()
        transport: Any = failover(http).AsyncFailoverTransport(pools, HEDGED, inner)

        async def main() -> tuple[list[Any], int]:
            async with http.AsyncClient(transport=transport) as client:
                if kind == "asyncio":
                    request = asyncio.ensure_future(client.get(url))
                    await settled(sent)
                    await anyio.sleep(0.4)
                    request.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await request
                else:
                    async with anyio.create_task_group() as group:
                        group.start_soon(client.get, url)
                        await settled(sent)
                        await anyio.sleep(0.4)
                        group.cancel_scope.cancel()
                await settled(lambda: not busy(inner))  # the hedge's task ends, cancelled
                left = busy(inner)
                a.set()
                b.set()
                return left, (await client.get(url)).status_code

        assert anyio.run(main, backend=kind) == ([], 200)
        return
    inner = http.HTTPTransport()
    transport = failover(http).FailoverTransport(pools, HEDGED, inner if kind == "sync" else Wrapping(inner))
    with http.Client(transport=transport) as client, interrupted() as interrupt:
        # Ctrl-C, as it were, once the 503 arrived: it ends the calling thread's wait for the hedge
        interrupt(sent, 0.4)
        with pytest.raises(Leaving):
            client.get(url)
        until(lambda: not busy(inner))  # the hedge's thread ends
        assert busy(inner) == []
        a.set()
        b.set()
        assert client.get(url).status_code == 200


def failing_after_cleanup(http: ModuleType) -> Any:
    """``http``'s own async transport, whose responses fail at once, as a read that broke
    does; the failure hands the connection back in a section shielded from anyio's
    cancellations, as httpcore's does (``_response_closed``), which takes a moment (its
    connection's lock, another task's on a loaded loop; modelled here with the wait made
    long)."""

    class FailingAfterCleanup(http.AsyncHTTPTransport):  # type: ignore[name-defined,misc]  # the library's, chosen at run time
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            try:
                raise http.ReadError("the connection broke", request=request)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.3)
                    await response.aclose()

    return FailingAfterCleanup()


def test_an_attempt_is_not_cut_at_its_time_while_its_transport_cleans_up_shielded(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """An async attempt whose time runs out while the inner transport hands a connection back
    in a section shielded from anyio's cancellations (httpcore's cleanup after a failure) is
    cut once the section is over, not in it (a task's ``cancel()`` is not stopped by anyio's
    shield): the cleanup runs to its end, and the inner pool holds no request and no busy
    connection."""
    a = servers["a"]
    inner = failing_after_cleanup(http)
    policy = Policy(schedule=ExponentialBackoff(max_attempts=1), attempt_timeout=0.1, deadline=2.0)
    transport = failover(http).AsyncFailoverTransport([Pool("api", [a.url()])], policy, inner)

    async def main() -> list[Any]:
        async with http.AsyncClient(transport=transport) as client:
            with pytest.raises(http.TransportError):
                await client.get(f"{a.url()}/x")
            return busy(inner)

    assert asyncio.run(main()) == []


def test_a_hedge_that_wins_does_not_cut_the_first_attempt_in_its_shielded_cleanup(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """The primary's attempt fails and its transport hands the connection back in a shielded
    section that takes a moment; the hedge to the backup wins meanwhile: the first attempt is
    interrupted once that section is over, not in it (a task's ``cancel()`` is not stopped by
    anyio's shield), so the cleanup runs to its end, and the inner pool holds no request and
    no busy connection."""
    a, b = servers["a"], servers["b"]
    base = failing_after_cleanup(http)

    class PrimaryFails(type(base)):  # type: ignore[misc]  # the library's, chosen at run time
        async def handle_async_request(self, request: Any) -> Any:
            if request.url.port == a.port:
                return await super().handle_async_request(request)
            return await http.AsyncHTTPTransport.handle_async_request(self, request)

    inner = PrimaryFails()
    transport = failover(http).AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], HEDGED, inner)

    async def main() -> tuple[str, list[Any]]:
        async with http.AsyncClient(transport=transport) as client:
            response = await client.get(f"{a.url()}/x")
            await settled(lambda: not busy(inner), 1.5)  # the primary's cleanup takes 0.3 s
            return response.headers["X-Served-By"], busy(inner)

    assert asyncio.run(main()) == ("b", [])


@pytest.mark.parametrize("chunked", [False, True], ids=["declared-length", "counted"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_streamed_response_read_in_part_and_dropped_leaves_nothing_held(
    servers: dict[str, LoopbackServer], http: ModuleType, kind: str, chunked: bool
) -> None:
    """A streamed response whose body is too large to read in the transport (its first
    chunk read by the caller, then the response dropped, never closed) gives its connection
    back once it is collected, as with the bare client: the body handed over unread, and the
    one counted and continued (``_lib.Continued``) alike. The next request is answered."""
    a = servers["a"]
    a.set(chunked=chunked, body=b"x" * 200_000)  # past the body limit
    pools = [Pool("api", [a.url()])]
    url = f"{a.url()}/x"
    if kind == "async":
        inner: Any = http.AsyncHTTPTransport()
        transport: Any = failover(http).AsyncFailoverTransport(pools, WAITS, inner)

        async def main() -> tuple[list[Any], int]:
            async with http.AsyncClient(transport=transport) as client:
                response = await client.send(client.build_request("GET", url), stream=True)
                async for _ in response.aiter_raw():
                    break
                del response
                gc.collect()
                await settled(lambda: not busy(inner))  # (an async generator is closed by its loop)
                return busy(inner), (await client.get(url)).status_code

        assert asyncio.run(main()) == ([], 200)
        return
    inner = http.HTTPTransport()
    transport = failover(http).FailoverTransport(pools, WAITS, inner)
    with http.Client(transport=transport) as client:
        response = client.send(client.build_request("GET", url), stream=True)
        next(response.iter_raw())
        del response
        gc.collect()
        assert busy(inner) == []
        assert client.get(url).status_code == 200
