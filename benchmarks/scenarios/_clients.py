"""The three clients compared, and the inner transports that count every network attempt.

- ``ours``: ``FailoverTransport`` / ``AsyncFailoverTransport`` with the default ``Policy()``
  (only the time constants a scenario must scale, such as ``breaker_cooldown``, changed);
- ``seed``: the same transports with the seed schedule,
  ``Policy.agora(retry_budget=None, breaker_threshold=10**9)``: no budget, no breakers;
- ``httpx-retries``: ``httpx_retries.RetryTransport()`` with its defaults, pointed at the
  primary (it cannot fail over, which is the point of the comparison).

Each wraps a counting transport around the real ``httpx`` one, so the attempts that
reached the network layer are known for every client, tagged with the logical
request (the ``x-scenario-id`` header) and the host, whatever the client reports.
The async side spreads requests over several httpcore pools: httpcore's async pool
rescans every connection for every waiting request (encode/httpcore#1035), which
makes one pool with hundreds of waiters quadratic and would measure httpcore, not
the clients.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
from httpx_retries import RetryTransport

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool

__all__ = [
    "RID",
    "AsyncCountingTransport",
    "Call",
    "Calls",
    "Client",
    "CountingTransport",
    "ShardedTransport",
    "clients",
]

#: The header that names the logical request on every attempt (servers record it too).
RID = "x-scenario-id"

#: Seconds: httpx's own timeouts for every client (per connect, read, write, pool wait).
REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Call:
    """One attempt that reached the network layer: for which request, to which host, when."""

    rid: str
    host: str
    at: float
    error: str | None  # the exception class it raised, if any


class Calls:
    """Every :class:`Call` of one run (appended from any thread or task)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.items: list[Call] = []

    def add(self, request: httpx.Request, at: float, error: BaseException | None) -> None:
        call = Call(request.headers.get(RID, ""), request.url.host, at, None if error is None else type(error).__name__)
        with self._lock:
            self.items.append(call)


class CountingTransport(httpx.BaseTransport):
    """Counts every attempt handed to the real transport."""

    def __init__(self, inner: httpx.BaseTransport, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        at = self.calls.clock()
        try:
            response = self.inner.handle_request(request)
        except BaseException as exc:
            self.calls.add(request, at, exc)
            raise
        self.calls.add(request, at, None)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncCountingTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`CountingTransport`."""

    def __init__(self, inner: httpx.AsyncBaseTransport, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        at = self.calls.clock()
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            self.calls.add(request, at, exc)
            raise
        self.calls.add(request, at, None)
        return response

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


def _sync_inner() -> httpx.HTTPTransport:
    # a thread burst fires every request at once: let each have its own connection
    return httpx.HTTPTransport(limits=httpx.Limits(max_connections=2000, max_keepalive_connections=200))


@dataclass(frozen=True, slots=True)
class Client:
    """One of the compared clients: how to build its sync and async transports."""

    key: str
    label: str
    policy: Policy | None  # None: httpx-retries on the primary alone

    @property
    def deadline(self) -> float | None:
        """The client's own bound on a logical request, if it has one."""
        return None if self.policy is None else self.policy.deadline

    @property
    def reports_attempts(self) -> bool:
        """Does it say, per request, which attempts it made?"""
        return self.policy is not None

    def sync_transport(self, urls: Sequence[str], calls: Calls) -> httpx.BaseTransport:
        inner = CountingTransport(_sync_inner(), calls)
        if self.policy is None:
            return RetryTransport(transport=inner)
        return FailoverTransport([Pool("scenario", list(urls))], self.policy, transport=inner)

    def async_transport(self, urls: Sequence[str], calls: Calls, shards: int) -> httpx.AsyncBaseTransport:
        inner = AsyncCountingTransport(ShardedTransport(shards), calls)
        if self.policy is None:
            return RetryTransport(transport=inner)
        return AsyncFailoverTransport([Pool("scenario", list(urls))], self.policy, transport=inner)


def clients(*, cooldown: float, deadline: float | None = None) -> tuple[Client, Client, Client]:
    """The three clients with the same scaled time constants."""
    extra: dict[str, float] = {"breaker_cooldown": cooldown}
    if deadline is not None:
        extra["deadline"] = deadline
    ours = (
        Policy(breaker_cooldown=cooldown)
        if deadline is None
        else Policy(breaker_cooldown=cooldown, deadline=deadline)
    )
    seed = Policy.agora(retry_budget=None, breaker_threshold=10**9, **extra)
    shown = ", ".join(f"{k}={v:g}" for k, v in extra.items())
    return (
        Client("ours", f"ours: Policy({shown})", ours),
        Client("seed", f"seed: Policy.agora(retry_budget=None, breaker_threshold=10**9, {shown})", seed),
        Client("httpx-retries", "httpx-retries: RetryTransport() on the primary", None),
    )
