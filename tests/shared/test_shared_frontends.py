"""Shared health behind a state several front-ends share (``X.sharing(other)``): RedisHealth,
bound to the front-end that built the state, carries every sharer's news, sync or async."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any

import anyio
import httpx
import pytest

from benchmarks._redis_server import RedisServer
from pytest_failover import AsyncFailoverTransport, FailoverTransport, Pool
from pytest_failover._breaker import Standing
from pytest_failover.shared import AsyncRedisHealth, RedisHealth

from .test_redis_health import POLICY, A, B, Domains, connected, standing, wait_for


@pytest.fixture
def fleet(redis_server: RedisServer, prefix: str) -> Iterator[tuple[Domains, FailoverTransport, FailoverTransport]]:
    """Two processes' transports on one Redis (the first builds the state to share)."""
    domains = Domains()
    owner, other = (
        FailoverTransport(
            [Pool("api", [A, B])], POLICY, domains.sync(), shared=RedisHealth(redis_server.url, prefix=prefix)
        )
        for _ in range(2)
    )
    connected(owner, other)
    yield domains, owner, other
    owner.close()
    other.close()


def test_an_async_sharer_tells_the_fleet_through_the_owners_redis_health(
    fleet: tuple[Domains, FailoverTransport, FailoverTransport],
) -> None:
    """The dead primary fails the async sharer's requests; the other process hears the
    opening before it tries the primary; closing the sharer leaves shared health running."""
    domains, owner, other = fleet
    sharer = AsyncFailoverTransport.sharing(owner, domains.asynchronous())
    domains.down.add(A)

    async def requests() -> list[str]:
        async with httpx.AsyncClient(transport=sharer) as client:  # closes the sharer at the end
            return [(await client.get(f"{A}/x")).text for _ in range(2)]

    assert asyncio.run(requests()) == [B, B]
    wait_for(lambda: standing(other, A) in (Standing.RESTING, Standing.OPEN), "the other process heard it")
    before = domains.hits[A]
    with httpx.Client(transport=other) as client:
        assert client.get(f"{A}/x").text == B
    assert domains.hits[A] == before
    state = owner.state().shared
    assert state is not None and state.state == "connected" and sharer.state().shared == state


async def longest_stall(work: Coroutine[Any, Any, object]) -> float:
    """The longest the event loop kept a 1 ms ticker waiting while ``work`` ran (seconds)."""
    task = asyncio.ensure_future(work)
    longest, last = 0.0, time.monotonic()
    while not task.done():
        await asyncio.sleep(0.001)
        longest, last = max(longest, time.monotonic() - last), time.monotonic()
    await task
    return longest


# -- an all-async application owns the binding with RedisHealth ------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_transport_owns_redis_health_and_shares_it_across_loops(
    redis_server: RedisServer, prefix: str, backend: str
) -> None:
    """AsyncFailoverTransport(shared=RedisHealth) under asyncio or trio (where AsyncRedisHealth
    stays local-only), shared with an async sharer running in another thread's event loop:
    the sharer's openings reach another process, and that process's reach the owner."""
    domains = Domains()
    owner = AsyncFailoverTransport(
        [Pool("api", [A, B])], POLICY, domains.asynchronous(),
        shared=RedisHealth(redis_server.url, prefix=prefix),
    )
    sharer = AsyncFailoverTransport.sharing(owner, domains.asynchronous())
    other = FailoverTransport(
        [Pool("api", [A, B])], POLICY, domains.sync(), shared=RedisHealth(redis_server.url, prefix=prefix)
    )
    connected(owner, other)

    async def in_the_owners_loop() -> str:
        response = await owner.handle_async_request(httpx.Request("GET", f"{A}/x"))
        return (await response.aread()).decode()

    assert anyio.run(in_the_owners_loop, backend=backend) == A
    domains.down.add(A)

    async def in_another_loop() -> list[str]:  # asyncio, in a thread of its own
        async with httpx.AsyncClient(transport=sharer) as client:  # closes the sharer at the end
            return [(await client.get(f"{A}/x")).text for _ in range(2)]

    answers: list[list[str]] = []
    thread = threading.Thread(target=lambda: answers.append(asyncio.run(in_another_loop())))
    thread.start()
    thread.join(10)
    assert answers == [[B, B]]
    wait_for(lambda: standing(other, A) in (Standing.RESTING, Standing.OPEN), "the other process heard the sharer")
    domains.down.add(B)
    with httpx.Client(transport=other) as client, pytest.raises(httpx.TransportError):
        client.get(f"{B}/x", extensions={"failover": {"domain": B}})  # pinned: the other process opens B
    wait_for(lambda: standing(owner, B) is not Standing.HEALTHY, "the owner heard the other process")
    assert owner.state().shared.state == "connected"  # type: ignore[union-attr]  # configured
    anyio.run(owner.aclose, backend=backend)  # the last of its front-ends: the binding closes
    assert owner.state().shared.state == "closed"  # type: ignore[union-attr]  # configured
    other.close()


def test_construction_names_what_each_kind_of_front_end_takes(redis_server: RedisServer, prefix: str) -> None:
    """Async front-ends take either twin; sync ones RedisHealth only; anything else is named."""
    from pytest_failover.integrations.aiohttp import FailoverMiddleware

    with pytest.raises(TypeError, match=r"AsyncFailoverTransport\(shared=\.\.\.\) takes RedisHealth or AsyncRedisHealth, got dict"):
        AsyncFailoverTransport([Pool("api", [A, B])], shared={})  # type: ignore[arg-type]  # the error under test
    with pytest.raises(TypeError, match=r"takes RedisHealth, got AsyncRedisHealth \(its tasks need an event loop"):
        FailoverTransport([Pool("api", [A, B])], shared=AsyncRedisHealth(redis_server.url))  # type: ignore[arg-type]  # the error under test
    health = RedisHealth(redis_server.url, prefix=prefix)
    middleware = FailoverMiddleware([Pool("api", [A, B])], shared=health)
    wait_for(lambda: health.state == "connected", "connected")
    asyncio.run(middleware.aclose())
    assert health.state == "closed"
    owner = AsyncFailoverTransport([Pool("api", [A, B])], shared=AsyncRedisHealth(redis_server.url, prefix=prefix))
    with pytest.raises(TypeError, match=r"shared=RedisHealth\(url\) instead \(every front-end takes it, async ones too\)"):
        AsyncFailoverTransport.sharing(owner)
    asyncio.run(owner.aclose())


# -- the binding lives as long as the front-ends using it ------------------------------------


def test_the_binding_closes_with_the_last_front_end_using_it(
    fleet: tuple[Domains, FailoverTransport, FailoverTransport],
) -> None:
    """Closing the front-end built with shared= first leaves its sharers sharing; closing a
    sharer twice counts once; the last one to close stops the threads."""
    domains, owner, other = fleet
    health = owner._state.shared
    assert isinstance(health, RedisHealth)
    sync_sharer = FailoverTransport.sharing(owner, domains.sync())
    async_sharer = AsyncFailoverTransport.sharing(owner, domains.asynchronous())
    owner.close()
    for _ in range(2):
        asyncio.run(async_sharer.aclose())
    assert health.state == "connected"
    domains.down.add(A)
    with httpx.Client(transport=sync_sharer) as client:  # closes the last user at the end
        assert [client.get(f"{A}/x").text for _ in range(2)] == [B, B]
        wait_for(lambda: standing(other, A) in (Standing.RESTING, Standing.OPEN), "the other process heard it")
        assert health.state == "connected"
    assert health.state == "closed" and not any(thread.is_alive() for thread in health._threads)
    assert other.state().shared.state == "connected"  # type: ignore[union-attr]  # configured


def test_a_sharer_left_unclosed_and_collected_does_not_keep_the_binding_open(
    fleet: tuple[Domains, FailoverTransport, FailoverTransport],
) -> None:
    """The count holds front-ends weakly: one dropped without closing no longer counts."""
    domains, owner, _ = fleet
    health = owner._state.shared
    assert health is not None
    sharer: FailoverTransport | None = FailoverTransport.sharing(owner, domains.sync())
    assert sharer is not None
    del sharer
    gc.collect()
    owner.close()
    assert health.state == "closed"


def test_closing_an_async_owner_stops_redis_health_off_the_loop(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RedisHealth.close waits for its threads (a listener tick, 0.25 s, typically); the
    async transport's aclose runs it in a worker thread: another task keeps ticking."""
    health = RedisHealth(redis_server.url, prefix=prefix)
    owner = AsyncFailoverTransport([Pool("api", [A, B])], POLICY, Domains().asynchronous(), shared=health)
    connected(owner)
    real_close = RedisHealth.close
    took: list[float] = []

    def slow_close(self: RedisHealth) -> None:  # the threads as slow to stop as they may be
        started = time.monotonic()
        time.sleep(0.5)
        real_close(self)
        took.append(time.monotonic() - started)

    monkeypatch.setattr(RedisHealth, "close", slow_close)

    stall = asyncio.run(longest_stall(owner.aclose()))
    # closed on the loop, the stall would be the whole 0.5 s; a loaded machine's stalls stay well under 0.25 s
    assert took and took[0] >= 0.5 and stall < 0.25, (took, stall)
    assert health.state == "closed"


# -- a flood on the channel does not starve an event loop -------------------------------------

_FLOOD = """
import sys, redis
client = redis.Redis(port=int(sys.argv[1]))
while True:
    pipe = client.pipeline(transaction=False)
    for _ in range(100):
        pipe.publish(sys.argv[2], "not a word")
    pipe.execute()
"""


@pytest.mark.parametrize("twin", [RedisHealth, AsyncRedisHealth])
def test_a_flood_of_messages_does_not_starve_the_event_loop(
    redis_server: RedisServer, prefix: str, twin: type[RedisHealth | AsyncRedisHealth]
) -> None:
    """Another process publishes junk on the channel as fast as it can: the listener drops
    it, and the loop's other tasks still run every few milliseconds (without the listener
    handing the loop, or the GIL, back between messages, ticks took 0.8 s, and 6 ms)."""
    health = twin(redis_server.url, prefix=prefix)

    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    async def flooded() -> float:
        owner = AsyncFailoverTransport([Pool("api", [A, B])], POLICY, httpx.MockTransport(handle), shared=health)
        await owner.handle_async_request(httpx.Request("GET", f"{A}/x"))  # starts AsyncRedisHealth's tasks
        deadline = time.monotonic() + 5
        while health.state != "connected":
            assert time.monotonic() < deadline, "not connected"
            await asyncio.sleep(0.01)
        flood = await asyncio.create_subprocess_exec(sys.executable, "-c", _FLOOD, str(redis_server.port), health.keys.channel)
        try:
            while health.ignored < 1000:  # the flood is arriving
                assert time.monotonic() < deadline + 10, "no flood arrived"
                await asyncio.sleep(0.01)
            return await longest_stall(asyncio.sleep(1.0))
        finally:
            flood.kill()  # by its PID
            await asyncio.wait_for(flood.wait(), 10)
            await owner.aclose()

    stall = asyncio.run(flooded())
    assert stall < 0.2, stall
