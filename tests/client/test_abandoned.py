"""Requests that end early, and attempts cut at their time, leave nothing behind: no
connection of the inner pool busy for good, no probe lease held, nothing counted in flight,
no task, thread or deadline entry, and the next request is answered at once. Real loopback
servers, httpx's own inner transports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from pytest_failover import AsyncFailoverTransport, ExponentialBackoff, Policy, Pool

from .servers import LoopbackServer


def busy(inner: httpx.AsyncHTTPTransport | httpx.HTTPTransport) -> list[Any]:
    """What ``inner``'s connection pool still holds for requests that are over: the
    requests it has not let go of (a response never closed), the connections it keeps
    busy (empty once every response is closed)."""
    pool = inner._pool
    return [*pool._requests, *(c for c in pool.connections if not (c.is_idle() or c.is_closed()))]


class SlowToClose(httpx.AsyncHTTPTransport):
    """httpx's own transport, whose responses take a moment to close: the close of httpcore's
    stream (``PoolByteStream.aclose``) marks it closed, then waits, shielded from anyio's
    cancellations, for its connection's lock (another task's, a moment, on a loaded loop)
    before it hands the connection back. Modelled here with the wait made long."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        response.stream = _SlowClose(response.stream)
        return response


class _SlowClose(httpx.AsyncByteStream):
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
    servers: dict[str, LoopbackServer], chunked: bool
) -> None:
    """An async attempt that read its whole body within its time is not cut while the inner
    transport closes the body's stream (httpcore shields that close from anyio's
    cancellations, not from a task's ``cancel()``): the request is answered, its domain
    counts no failure, and the inner pool lets go of the request and its connection (a cut
    there left both busy for good, one connection of the pool's limit each). A body of
    declared length (read whole) and one read by count alike."""
    a = servers["a"]
    a.set(chunked=chunked)
    inner = SlowToClose()
    # (two attempts: a body of no declared length is then counted as it comes)
    policy = Policy(schedule=ExponentialBackoff(max_attempts=2), attempt_timeout=0.1, deadline=2.0)
    transport = AsyncFailoverTransport([Pool("api", [a.url()])], policy, inner)

    async def main() -> tuple[int, list[Any]]:
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.get(f"{a.url()}/x")
            return response.status_code, busy(inner)

    status, left = anyio.run(main)
    assert (status, left) == (200, [])
    [domain] = transport.state().pools["api"].domains
    assert (domain.breaker, domain.consecutive_failures) == ("closed", 0)
