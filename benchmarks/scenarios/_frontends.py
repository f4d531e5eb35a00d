"""The front-ends' sides: ``requests`` with ``FailoverAdapter`` for threads, ``aiohttp`` with
``FailoverMiddleware`` for tasks, the attempts counted under each.

- Threads share one ``requests.Session`` with a ``FailoverAdapter`` mounted on ``http://``;
  its ``adapter=`` is a :class:`CountingAdapter` (an ``HTTPAdapter`` that records each
  ``send``), which is what the adapter's inner transport sends every attempt through.
- Tasks share one ``aiohttp.ClientSession`` with ``middlewares=(FailoverMiddleware,
  CountingMiddleware)``: the failover middleware's ``handler`` is the counting one, so
  each attempt it makes passes it once before the connector.

Connections as on the httpx side (each request of a burst may have its own): the
adapter keeps up to 200 per host, the connector has no limit. aiohttp's resolver is
the threaded one (the simulator's names resolve through ``socket.getaddrinfo``), and
its DNS cache is off: a cached lookup would hide a later NXDOMAIN from it (a documented
aiohttp behaviour, tested in tests/simulator), and the timeline must be what every
client meets.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import requests
from aiohttp import ClientRequest, ClientResponse
from aiohttp.client_middlewares import ClientHandlerType
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError

from pytest_failover import Policy
from pytest_failover.integrations.aiohttp import FailoverMiddleware
from pytest_failover.integrations.requests import FailoverAdapter

from ._sides import REQUEST_TIMEOUT, RID, Answer, AsyncSide, Calls, SyncSide, scenario_pool

__all__ = ["FRONTENDS", "CountingAdapter", "CountingMiddleware", "FrontendStack"]


def _urllib3_reason(exc: BaseException) -> str:
    """The class of what urllib3 raised under a requests error (``ProtocolError`` for a
    connection that went away, ``NewConnectionError`` for a refused one, ...)."""
    reason = exc.args[0] if isinstance(exc, requests.RequestException) and exc.args else exc
    if isinstance(reason, MaxRetryError) and reason.reason is not None:
        reason = reason.reason
    return type(reason if isinstance(reason, BaseException) else exc).__name__


class CountingAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` that records every request it sends (see the module doc)."""

    def __init__(self, calls: Calls, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = calls  # FailoverAdapter copies the adapter's attributes: this one too

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        host = urlsplit(request.url or "").hostname or ""
        with self.calls.attempt(request.headers.get(RID, ""), host, name=_urllib3_reason):
            return super().send(request, *args, **kwargs)


class CountingMiddleware:
    """An aiohttp client middleware that records every request passed to the connector."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    async def __call__(self, request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        with self.calls.attempt(request.headers.get(RID, ""), request.url.host or ""):
            return await handler(request)


def _policy(policy: Policy | None) -> Policy:
    if policy is None:
        raise ValueError("the requests and aiohttp front-ends fail over: give them a Policy")
    return policy


class FrontendStack:
    """``requests`` + ``FailoverAdapter`` for threads, ``aiohttp`` + ``FailoverMiddleware`` for tasks."""

    def sync_side(self, policy: Policy | None, urls: Sequence[str], calls: Calls) -> SyncSide:
        inner = CountingAdapter(calls, pool_maxsize=200)
        adapter = FailoverAdapter([scenario_pool(urls)], _policy(policy), adapter=inner)
        session = requests.Session()
        session.mount("http://", adapter)

        def get(url: str, headers: Mapping[str, str]) -> Answer:
            response = session.get(url, headers=headers, timeout=REQUEST_TIMEOUT)
            host = urlsplit(response.url).hostname or ""
            return Answer(response.status_code, host, getattr(response, "failover", None))

        return SyncSide(get, (requests.RequestException,), session.close)

    @contextlib.asynccontextmanager
    async def async_side(
        self, policy: Policy | None, urls: Sequence[str], calls: Calls, *, shards: int
    ) -> AsyncIterator[AsyncSide]:
        failover = FailoverMiddleware([scenario_pool(urls)], _policy(policy))
        connector = aiohttp.TCPConnector(limit=0, use_dns_cache=False, resolver=aiohttp.ThreadedResolver())
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT, sock_read=REQUEST_TIMEOUT)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, middlewares=(failover, CountingMiddleware(calls))
        ) as session:

            async def get(url: str, headers: Mapping[str, str]) -> Answer:
                async with session.get(url, headers=headers) as response:
                    await response.read()
                    return Answer(response.status, response.url.host or "", getattr(response, "failover", None))

            yield AsyncSide(get, (aiohttp.ClientError,))


FRONTENDS = FrontendStack()
