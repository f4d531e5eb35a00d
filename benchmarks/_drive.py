"""Bounded asyncio load shapes: a burst (N operations, C at a time) or a steady rate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Op = Callable[[int], Awaitable[bool]]
"""One operation, given its index; returns True on success."""


async def burst(op: Op, *, count: int, concurrency: int, max_seconds: float) -> tuple[int, int]:
    """Run ``count`` operations, ``concurrency`` at a time; stop early after ``max_seconds``.

    Returns (operations run, successes).
    """
    deadline = time.monotonic() + max_seconds
    next_index = 0
    done = ok = 0

    async def worker() -> None:
        nonlocal next_index, done, ok
        while next_index < count and time.monotonic() < deadline:
            i = next_index
            next_index += 1
            success = await op(i)
            done += 1
            ok += bool(success)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, ok


async def steady(op: Op, *, rate: float, seconds: float, max_in_flight: int) -> tuple[int, int]:
    """Start ``rate`` operations per second for ``seconds``; at most ``max_in_flight`` at once
    (an operation due while that many are running is skipped and not counted)."""
    start = time.monotonic()
    total = int(rate * seconds)
    running: set[asyncio.Task[bool]] = set()
    done = ok = 0

    def finished(task: asyncio.Task[bool]) -> None:
        nonlocal done, ok
        running.discard(task)
        done += 1
        if not task.cancelled() and task.exception() is None and task.result():
            ok += 1

    for i in range(total):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(running) >= max_in_flight:
            continue
        task = asyncio.ensure_future(op(i))
        running.add(task)
        task.add_done_callback(finished)
    if running:
        await asyncio.wait(running, timeout=10)
    return done, ok
