"""A client lives as long as its process: what it keeps stays flat under load.

Each front-end's client (httpx2's too: the same request path on its own library) takes three rounds of :data:`ROUND` requests, from a dozen threads
or a hundred tasks, while the primary flaps (conftest's ``flapping``). Every request is new
in every way a table could be keyed by: its URL (a query of its own), and its headers'
values. After the first round (the warm-up: connections opened, hedging threads started,
the library's bounded tables filled), and again after the third, every request has ended
and the cyclic collector has run; then the process's objects are counted by type, with its
open files and threads.

Between the two counts went 2 x :data:`ROUND` requests. A request that left one object
behind would add that many objects of a type. The tables the library bounds start afresh
when full, so each can swing by its size between two counts. The largest, the front-ends'
parsed URLs, holds 512 (``integrations._convert``): hence :data:`SWING`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp
import httpx
import httpx2
import pytest
import requests
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Hedging, Pool
from pytest_failover import httpx2 as on_httpx2
from pytest_failover.integrations.aiohttp import FailoverMiddleware
from pytest_failover.integrations.requests import FailoverAdapter

from .servers import Flapping
from .test_concurrency import POLICY as CONCURRENCY

ROUND = 1200  # requests a round
THREADS, TASKS = 12, 100
SWING = 800  # objects of one type the bounded tables may add between two counts (512 URLs at most)
# Open files two counts may differ by: each client here keeps at most 20 connections alive
# (httpx's pool, urllib3's 10 a host, the aiohttp connector's limit), both of their ends in
# this process, and a few being closed.
FILES = 2 * 20 + 20

# The concurrency tests' policy, with hedging and the stale cache on (and telemetry
# recording, below): the paths that keep the most.
HEDGING = Hedging(delay=0.003)
POLICY = replace(CONCURRENCY, hedging=HEDGING, stale_on_failure=True)
# Threads that may start after the warm-up: hedges' (a pool of them, started as needed),
# and the library's own (the deadline watchdog, the sticky-file writer).
THREADS_ADDED = HEDGING.threads + 2

Send = Callable[[int], Any]  # request number -> its body (sync); or a coroutine of it (async)


def _request(k: int, base: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    """The ``k``-th request: a GET, a POST with an idempotency key or one without, each
    to a URL of its own and with a header value of its own."""
    headers = {"X-Request-Id": f"req-{k}"}
    if k % 3 == 0:
        return "GET", f"{base}/rooms/{k}?q={k}", None, headers
    if k % 3 == 1:
        return "POST", f"{base}/orders?n={k}", f"order-{k}".encode(), {**headers, "Idempotency-Key": f"key-{k}"}
    return "POST", f"{base}/notes?n={k}", f"note-{k}".encode(), headers


def _providers() -> dict[str, Any]:
    return {"tracer_provider": TracerProvider(), "meter_provider": MeterProvider(metric_readers=[InMemoryMetricReader()])}


class Load:
    """Rounds of requests through one client: from threads (a sync ``send``) or from
    tasks on a loop of its own (an async one)."""

    def __init__(self, send: Send, errors: tuple[type[BaseException], ...], loop: asyncio.AbstractEventLoop | None) -> None:
        self.send, self.errors, self.loop = send, errors, loop
        self.answered = self.failed = 0
        self.bugs: list[BaseException] = []  # anything but the client's own transport errors
        self._next = 0

    def round(self) -> None:
        first, self._next = self._next, self._next + ROUND
        lock = threading.Lock()

        def ended(outcome: BaseException | None) -> None:
            with lock:
                if outcome is None:
                    self.answered += 1
                elif isinstance(outcome, self.errors):
                    self.failed += 1  # a POST without a key cut mid-answer: never sent again
                else:
                    self.bugs.append(outcome)

        if self.loop is None:

            def worker(w: int) -> None:
                for k in range(first + w, first + ROUND, THREADS):
                    try:
                        self.send(k)
                    except BaseException as exc:  # (counted: the test fails on a bug)
                        ended(exc)
                    else:
                        ended(None)

            threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            return

        async def task(w: int) -> None:
            for k in range(first + w, first + ROUND, TASKS):
                try:
                    await self.send(k)
                except BaseException as exc:  # (counted: the test fails on a bug)
                    ended(exc)
                else:
                    ended(None)

        async def tasks() -> None:
            await asyncio.gather(*(task(w) for w in range(TASKS)))

        self.loop.run_until_complete(asyncio.wait_for(tasks(), 120))


def _httpx(a: str, b: str) -> tuple[Load, Callable[[], None]]:
    client = httpx.Client(transport=FailoverTransport([Pool("api", [a, b])], POLICY, **_providers()), timeout=30)

    def send(k: int) -> bytes:
        method, url, body, headers = _request(k, a)
        return client.request(method, url, content=body, headers=headers).content

    return Load(send, (httpx.TransportError,), None), client.close


def _httpx2(a: str, b: str) -> tuple[Load, Callable[[], None]]:
    transport = on_httpx2.FailoverTransport([Pool("api", [a, b])], POLICY, **_providers())
    client = httpx2.Client(transport=transport, timeout=30)

    def send(k: int) -> bytes:
        method, url, body, headers = _request(k, a)
        return client.request(method, url, content=body, headers=headers).content

    return Load(send, (httpx2.TransportError,), None), client.close


def _httpx_async(a: str, b: str) -> tuple[Load, Callable[[], None]]:
    loop = asyncio.new_event_loop()
    transport = AsyncFailoverTransport([Pool("api", [a, b])], POLICY, **_providers())
    client = httpx.AsyncClient(transport=transport, timeout=30)

    async def send(k: int) -> bytes:
        method, url, body, headers = _request(k, a)
        return (await client.request(method, url, content=body, headers=headers)).content

    def close() -> None:
        loop.run_until_complete(client.aclose())
        loop.close()

    return Load(send, (httpx.TransportError,), loop), close


def _requests(a: str, b: str) -> tuple[Load, Callable[[], None]]:
    session = requests.Session()
    session.mount("http://", FailoverAdapter([Pool("api", [a, b])], POLICY, **_providers()))

    def send(k: int) -> bytes:
        method, url, body, headers = _request(k, a)
        return session.request(method, url, data=body, headers=headers, timeout=30).content

    return Load(send, (requests.RequestException,), None), session.close


def _aiohttp(a: str, b: str) -> tuple[Load, Callable[[], None]]:
    loop = asyncio.new_event_loop()
    middleware = FailoverMiddleware([Pool("api", [a, b])], POLICY, **_providers())

    async def start() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=20), middlewares=(middleware,))

    session = loop.run_until_complete(start())

    async def send(k: int) -> bytes:
        method, url, body, headers = _request(k, a)
        async with session.request(method, url, data=body, headers=headers) as response:
            return await response.read()

    def close() -> None:
        loop.run_until_complete(session.close())
        loop.close()

    return Load(send, (aiohttp.ClientError,), loop), close


CLIENTS: dict[str, Callable[[str, str], tuple[Load, Callable[[], None]]]] = {
    "httpx": _httpx,
    "httpx-async": _httpx_async,
    "httpx2": _httpx2,
    "requests": _requests,
    "aiohttp": _aiohttp,
}


def _count() -> tuple[Counter[type], int, int]:
    """The process's objects by type, its open files and its threads."""
    gc.collect()
    return Counter(map(type, gc.get_objects())), len(os.listdir("/proc/self/fd")), threading.active_count()


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_client_keeps_nothing_per_request_while_domains_flap(
    kind: str, flapping: Flapping, caplog: pytest.LogCaptureFixture
) -> None:
    """Two rounds of new requests after a warm-up leave no more objects of any type, open
    files or threads than the bounded tables and connection pools account for, and no
    request raises anything but the client's own transport errors."""
    caplog.set_level(logging.ERROR)  # (pytest keeps every record it captures)
    a, b, _ = flapping
    load, close = CLIENTS[kind](a.url(), b.url())
    try:
        load.round()
        objects, files, threads = _count()
        load.round()
        load.round()
        a.reset_records()  # (the servers keep what they saw: not the client's)
        b.reset_records()
        objects_after, files_after, threads_after = _count()
    finally:
        close()
    assert not load.bugs, load.bugs[:3]
    assert load.answered + load.failed == 3 * ROUND
    assert load.answered > 2 * ROUND, f"only {load.answered} of {3 * ROUND} answered"
    grown = {t.__qualname__: n for t, n in (objects_after - objects).items() if n > SWING}
    assert not grown, f"after {2 * ROUND} requests, more objects of these types (by how many): {grown}"
    assert files_after - files <= FILES, f"{files_after - files} more open files after {2 * ROUND} requests"
    assert threads_after - threads <= THREADS_ADDED, f"{threads_after - threads} more threads after {2 * ROUND} requests"
