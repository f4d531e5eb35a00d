"""Shared health behind a state several front-ends share (``X.sharing(other)``): RedisHealth,
bound to the front-end that built the state, carries every sharer's news, sync or async."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from benchmarks._redis_server import RedisServer
from pytest_failover import AsyncFailoverTransport, FailoverTransport, Pool
from pytest_failover._breaker import Standing
from pytest_failover.shared import RedisHealth

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
