"""The two waits the resolvers' async side needs, under asyncio and under trio (anyio).

asyncio has its own fast path (no thread, no task group: what the resolvers did before);
any other event loop anyio runs (trio) goes through anyio, as the transports' trio paths
do (``_deadline``, ``_race``): the test is the same, ``asyncio.get_running_loop()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["both", "wait_future"]

T = TypeVar("T")


def _asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop: trio
        return False
    return True


async def wait_future(future: concurrent.futures.Future[T], timeout: float | None) -> T:
    """The result of ``future``, waited for without blocking the event loop, at most
    ``timeout`` seconds (``TimeoutError``). Cancelling the wait, or running out of time,
    leaves the future alone: other callers may be waiting for it too.

    asyncio: ``wrap_future`` under ``shield``. trio: a worker thread blocks on
    ``future.result`` (anyio's ``to_thread``, abandoned if the wait is cancelled)."""
    if _asyncio():
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
        except TimeoutError:  # one of its own, without the chain of the wait asyncio cancelled
            raise TimeoutError from None
    import anyio.to_thread  # httpx's own dependency

    try:
        return await anyio.to_thread.run_sync(future.result, timeout, abandon_on_cancel=True)
    except concurrent.futures.TimeoutError:
        raise TimeoutError from None


async def both(first: Awaitable[T], second: Awaitable[T]) -> list[T]:
    """``[await first, await second]``, run concurrently (``asyncio.gather``, or an anyio
    task group); an exception of either is raised, and cancels the other."""
    if _asyncio():
        return list(await asyncio.gather(first, second))
    import anyio  # httpx's own dependency

    results: list[T] = []
    slots: dict[int, T] = {}

    async def run(index: int, awaitable: Awaitable[T]) -> None:
        slots[index] = await awaitable

    async with anyio.create_task_group() as group:
        group.start_soon(run, 0, first)
        group.start_soon(run, 1, second)
    results.extend(slots[i] for i in (0, 1))
    return results
