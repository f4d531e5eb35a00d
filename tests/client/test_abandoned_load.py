"""Hundreds of tasks and a dozen threads leave their requests at random points while the
primary flaps, then the domains heal: whatever was left behind shows. Seeded and bounded
(in requests and in time); no timing is asserted.

After each run: every breaker closes once the domains heal (a probe lease left held would
keep one half-open for good), the next request is answered, the retry budget's and the
hedge throttle's tokens are within their bounds, nothing counts as a slow call in flight,
the deadline watch and the watchdog hold no attempt, no task or thread is left, and the
inner pool holds no request and no busy connection (but one no request used: httpcore#1093).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from pytest_failover import (
    AsyncFailoverTransport,
    ExponentialBackoff,
    FailoverError,
    FailoverTransport,
    Hedging,
    Policy,
    Pool,
    SlowCalls,
)
from pytest_failover._deadline import _watches, watchdog
from pytest_failover._slowness import HEDGE_BURST

from .servers import LoopbackServer
from .test_abandoned import Leaving, busy, settled, until

SEED = 20261205
COOLDOWN = 0.05
ATTEMPT_TIME = 5.0  # a hedge's loser that the race could not cut runs this long at most
BIG = b"x" * 200_000  # past the body limit: handed over unread, streamed
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "hedging": {"hedging": Hedging(delay=0.005, max_ratio=1.0)},
    # (slow under the load of 300 tasks, seconds on a loaded 2-core machine; not the heal's
    # requests, one at a time)
    "slow-calls": {"slow_calls": SlowCalls(threshold=1.0, rate=0.5, minimum_calls=5, window=2.0)},
}


def policy(variant: str) -> Policy:
    return Policy(
        schedule=ExponentialBackoff(base=0.005, cap=0.02, max_attempts=3),
        attempt_timeout=ATTEMPT_TIME,
        deadline=10.0,
        breaker_threshold=2,
        breaker_cooldown=COOLDOWN,
        **VARIANTS[variant],
    )


Flapping = tuple[LoopbackServer, LoopbackServer, Callable[[], None]]


@pytest.fixture
def flapping(servers: dict[str, LoopbackServer]) -> Iterator[Flapping]:
    """Server a flips every 10 ms between healthy, slow, 503, reset, cut mid-body and a large
    chunked body; b between healthy and slow (seeded; 60 s at most); and the function that
    heals both (the flipping stops, both healthy)."""
    a, b = servers["a"], servers["b"]
    stop = threading.Event()

    def flip() -> None:
        draw = random.Random(SEED)
        states: list[dict[str, Any]] = [
            {}, {"delay": 0.03}, {"status": 503}, {"reset": True}, {"truncate": True}, {"chunked": True, "body": BIG},
        ]
        deadline = time.monotonic() + 60
        while not stop.wait(0.01) and time.monotonic() < deadline:
            a.set(**draw.choice(states))
            b.set(**draw.choice([{}, {"delay": 0.01}]))

    def heal() -> None:
        stop.set()
        thread.join(10)
        a.set()
        b.set()

    thread = threading.Thread(target=flip)
    thread.start()
    yield a, b, heal
    heal()


def held(inner: Any) -> list[Any]:
    """What ``inner``'s pool holds for requests that are over (:func:`busy`), but connections
    no request used: a request cancelled once the pool made it a connection, before it used
    it, leaves that connection behind, whoever cancels it (httpcore#1093, open; httpx2's
    httpcore2 fixed it)."""
    return [
        item
        for item in busy(inner)
        if not (hasattr(item, "is_idle") and (item._connection is None or item._connection._request_count == 0))
    ]


def healed(
    transport: AsyncFailoverTransport | FailoverTransport, heal: Callable[[], None], answer: Callable[[], int]
) -> None:
    """Once the domains heal (``heal()``), the next request is answered, and every breaker
    closes within a few requests a cooldown apart (a probe lease left held keeps one
    half-open for good), but a backup's that opened under the load: the healed primary
    answers every request, so nothing probes it, and it must be open with its probe due
    and requestable, never half-open; the pool's bounded state is within its bounds, and
    nothing counts as in flight. (A loaded 2-core machine can time a backup out twice
    under 300 tasks: its breaker opens, rightly.)"""
    heal()
    time.sleep(2 * COOLDOWN)  # every breaker's cooldown is over: a request is let through
    assert answer() == 200, transport.state()
    for _ in range(40):
        if all(d.breaker == "closed" for d in transport.state().pools["api"].domains):
            break
        time.sleep(2 * COOLDOWN)
        assert answer() == 200, transport.state()
    pool = transport.state().pools["api"]
    first, backup = pool.domains
    assert (first.breaker, first.can_request) == ("closed", True), pool
    assert (backup.breaker, backup.can_request) == ("closed", True) or (
        pool.sticky == first.domain and backup.breaker == "open" and backup.probe_due and backup.can_request
    ), pool
    assert pool.budget_tokens is not None and 0.0 <= pool.budget_tokens <= 100.0
    core = transport._state.core.pools["api"]
    if core.slow_calls is not None:  # (no public view of the calls in flight)
        flying = [dict(window._flying) for window in core.slow_calls.values()]
        assert flying == [{}, {}], f"calls counted in flight after every request ended: {flying}"
    if core.throttle is not None:
        throttle = core.throttle
        assert 0.0 <= throttle.tokens <= HEDGE_BURST, throttle.tokens
        assert throttle.hedges <= throttle.requests, (throttle.hedges, throttle.requests)


# How an async request is left: anyio's cancellations (httpcore's shields hold against
# them), a stream read in part, or not at all; and asyncio's own (a task's cancel(), which
# no shield stops: bare httpx's pool then keeps some connections busy too).
ANYIO_WAYS = ("move_on_after", "scope_cancelled", "stream_broken", "whole")
ASYNCIO_WAYS = ("wait_for", "timeout", "task_cancelled", "stream_broken", "whole")


@pytest.mark.parametrize(
    ("variant", "ways", "backend"),
    [
        ("plain", ANYIO_WAYS, "asyncio"),
        ("hedging", ANYIO_WAYS, "asyncio"),
        ("slow-calls", ANYIO_WAYS, "asyncio"),
        ("plain", ASYNCIO_WAYS, "asyncio"),
        ("plain", ANYIO_WAYS, "trio"),
        ("hedging", ANYIO_WAYS, "trio"),
    ],
    ids=["plain-anyio", "hedging-anyio", "slow-calls-anyio", "plain-asyncio", "plain-trio", "hedging-trio"],
)
def test_300_tasks_leave_their_requests_at_random_points(
    flapping: Flapping, variant: str, ways: tuple[str, ...], backend: str
) -> None:
    a, b, heal = flapping
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
    transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], policy(variant), inner)
    url = f"{a.url()}/x"
    ended: list[str] = []

    async def request(client: httpx.AsyncClient, way: str, after: float) -> None:
        try:
            if way == "move_on_after":
                with anyio.move_on_after(after):
                    await client.get(url)
            elif way == "scope_cancelled":
                async with anyio.create_task_group() as group:
                    group.start_soon(client.get, url)
                    await anyio.sleep(after)
                    group.cancel_scope.cancel()
            elif way == "wait_for":
                await asyncio.wait_for(client.get(url), after)
            elif way == "timeout":
                async with asyncio.timeout(after):
                    await client.get(url)
            elif way == "task_cancelled":
                task = asyncio.ensure_future(client.get(url))
                await asyncio.sleep(after)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            elif way == "stream_broken":
                async with client.stream("GET", url) as response:
                    async for _ in response.aiter_raw():
                        break
            else:
                await client.get(url)
        # (``except*``: a request that fails inside the task group of ``scope_cancelled``
        # reaches here in an exception group, as a flapping domain's failure may)
        except* (FailoverError, TimeoutError):
            pass
        ended.append(way)

    async def worker(client: httpx.AsyncClient, n: int) -> None:
        draw = random.Random(SEED + n)
        for _ in range(2):
            await request(client, draw.choice(ways), draw.uniform(0.0, 0.04))

    async def main() -> tuple[list[Any], list[Any], set[Any]]:
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            with anyio.fail_after(120):
                async with anyio.create_task_group() as group:
                    for n in range(300):
                        group.start_soon(worker, client, n)

            async def answer() -> int:
                return (await client.get(url)).status_code

            # (the heal's requests from a thread: this loop serves them meanwhile)
            await anyio.to_thread.run_sync(healed, transport, heal, lambda: anyio.from_thread.run(answer))

            def left() -> tuple[list[Any], list[Any], set[Any]]:
                """What is still armed on the loop's deadline watch, held by the inner pool,
                and running besides this task."""
                if backend == "trio":  # no deadline watch (anyio's scopes), no asyncio task
                    return [], held(inner), set()
                watch = _watches.get(asyncio.get_running_loop())
                armed = [] if watch is None or watch() is None else list(watch().armed)  # type: ignore[union-attr]  # just read
                return armed, held(inner), asyncio.all_tasks() - {asyncio.current_task()}

            # A hedge that lost may still be handing its connection back (its task cut once
            # that is over): let it end (5 s at most). What is left for good stays.
            await settled(lambda: left() == ([], [], set()))
            return left()

    armed, kept, tasks = anyio.run(main, backend=backend)
    assert len(ended) == 600
    assert (armed, tasks) == ([], set()), "armed on the loop's deadline watch, or tasks left running"
    if ways is ANYIO_WAYS:
        assert kept == [], "held by the inner pool for good"


class LeavingTransport(httpx.HTTPTransport):
    """httpx's own transport, which leaves a request where its ``X-Leave`` header says, as
    a KeyboardInterrupt would: before sending it, or after the first chunk of its body."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        where = request.headers.get("X-Leave")
        if where == "before":
            raise Leaving
        response = super().handle_request(request)
        if where == "mid-body":
            response.stream = _LeavingMidBody(response.stream)
        return response


class _LeavingMidBody(httpx.SyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            yield chunk
            raise Leaving

    def close(self) -> None:
        self._stream.close()


SYNC_WAYS = ("hook", "before", "mid-body", "stream_broken", "whole")


@pytest.mark.parametrize("variant", ["plain", "hedging", "slow-calls"])
def test_12_threads_leave_their_requests_at_random_points(
    flapping: Flapping, variant: str
) -> None:
    """Each thread's requests are left by a KeyboardInterrupt-like exception from a response
    hook, from the inner transport before it sends or in the middle of the body; by a
    consumer that stops reading a stream; or not at all."""
    a, b, heal = flapping
    inner = LeavingTransport(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy(variant), inner)
    url = f"{a.url()}/x"
    before = set(threading.enumerate())
    errors: list[BaseException] = []
    ended: list[str] = []

    def hook(response: httpx.Response) -> None:
        if response.request.headers.get("X-Leave") == "hook":
            raise Leaving

    client = httpx.Client(transport=transport, timeout=30, event_hooks={"response": [hook]})

    def worker(n: int) -> None:
        draw = random.Random(SEED + n)
        try:
            for _ in range(15):
                way = draw.choice(SYNC_WAYS)
                try:
                    if way == "stream_broken":
                        with client.stream("GET", url) as response:
                            for _ in response.iter_raw():
                                break
                    else:
                        client.get(url, headers={"X-Leave": way})
                except (FailoverError, Leaving):
                    pass
                ended.append(way)
        except BaseException as exc:  # anything else is a bug
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(ended) == 12 * 15
    healed(transport, heal, lambda: client.get(url).status_code)
    hedgers = transport._hedgers
    if hedgers is not None:
        deadline = time.monotonic() + 5.0
        while (hedgers._joining or hedgers._busy) and time.monotonic() < deadline:  # a hedge's thread ends
            time.sleep(0.01)
        assert (hedgers._joining, hedgers._busy) == ({}, 0)
    assert watchdog._armed == {}  # (once the hedges' threads are done: a loser's attempt is armed until it ends)
    # A loser's connection is being handed back: at its attempt's time at most, when the race
    # could not cut it (its connection handed on meanwhile), then the watchdog's cut.
    until(lambda: not held(inner), ATTEMPT_TIME + 2.0)
    assert held(inner) == [], "held by the inner pool for good"
    client.close()
    assert {t for t in threading.enumerate() if t not in before and t.is_alive()} - {watchdog._thread} == set()
