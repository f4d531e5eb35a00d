"""The httpx clients' sides: ``httpx.Client`` and ``httpx.AsyncClient`` over our transports
(or ``httpx_retries.RetryTransport`` when there is no policy), with a counting transport
around the real ``httpx`` one.

The async side spreads requests over several httpcore pools: httpcore's async pool
rescans every connection for every waiting request (encode/httpcore#1035), which
makes one pool with hundreds of waiters quadratic and would measure httpcore, not
the clients.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence

import httpx
from httpx_retries import RetryTransport

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy

from ._sides import REQUEST_TIMEOUT, RID, Answer, AsyncSide, Calls, SyncSide, scenario_pool

__all__ = ["HTTPX", "AsyncCountingTransport", "CountingTransport", "HttpxStack", "ShardedTransport"]

ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError,)


class CountingTransport(httpx.BaseTransport):
    """Counts every attempt handed to the real transport."""

    def __init__(self, inner: httpx.BaseTransport, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.calls.attempt(request.headers.get(RID, ""), request.url.host):
            return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class AsyncCountingTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`CountingTransport`."""

    def __init__(self, inner: httpx.AsyncBaseTransport, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with self.calls.attempt(request.headers.get(RID, ""), request.url.host):
            return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class ShardedTransport(httpx.AsyncBaseTransport):
    """Real sockets through several httpcore pools, taken in turn (see the module doc)."""

    def __init__(self, shards: int) -> None:
        tls = httpx.create_ssl_context()  # one, not one per shard: each costs a CA bundle load
        self._shards = [httpx.AsyncHTTPTransport(verify=tls) for _ in range(max(1, shards))]
        self._next = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._next = (self._next + 1) % len(self._shards)
        return await self._shards[self._next].handle_async_request(request)

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


def _answer(response: httpx.Response) -> Answer:
    return Answer(response.status_code, response.request.url.host, response.extensions.get("failover"))


class HttpxStack:
    """httpx on both sides: our transports for a policy, httpx-retries on the primary without one."""

    def sync_side(self, policy: Policy | None, urls: Sequence[str], calls: Calls) -> SyncSide:
        # a thread burst fires every request at once: let each have its own connection
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
        inner = CountingTransport(httpx.HTTPTransport(limits=limits), calls)
        transport: httpx.BaseTransport = (
            RetryTransport(transport=inner)
            if policy is None
            else FailoverTransport([scenario_pool(urls)], policy, transport=inner)
        )
        client = httpx.Client(transport=transport, timeout=REQUEST_TIMEOUT)

        def get(url: str, headers: Mapping[str, str]) -> Answer:
            return _answer(client.get(url, headers=headers))

        return SyncSide(get, ERRORS, client.close)

    @contextlib.asynccontextmanager
    async def async_side(
        self, policy: Policy | None, urls: Sequence[str], calls: Calls, *, shards: int
    ) -> AsyncIterator[AsyncSide]:
        inner = AsyncCountingTransport(ShardedTransport(shards), calls)
        transport: httpx.AsyncBaseTransport = (
            RetryTransport(transport=inner)
            if policy is None
            else AsyncFailoverTransport([scenario_pool(urls)], policy, transport=inner)
        )
        async with httpx.AsyncClient(transport=transport, timeout=REQUEST_TIMEOUT) as client:

            async def get(url: str, headers: Mapping[str, str]) -> Answer:
                return _answer(await client.get(url, headers=headers))

            yield AsyncSide(get, ERRORS)


HTTPX = HttpxStack()
