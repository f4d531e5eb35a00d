"""Threads and an event loop's tasks at once: the load of the concurrency tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def alongside(threads: list[threading.Thread], tasks: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Start ``threads``, run ``tasks()`` in a new event loop meanwhile, and wait for
    the threads to end (30 s at most each)."""
    for thread in threads:
        thread.start()
    asyncio.run(tasks())
    for thread in threads:
        thread.join(30)


def in_threads(count: int, target: Callable[[], object], seconds: float = 60) -> None:
    """Run ``target()`` in each of ``count`` threads at once, and wait for them to end
    (``seconds`` at most each)."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds)


def loops_in_threads(count: int, run: Callable[[], Coroutine[Any, Any, T]]) -> list[T | BaseException]:
    """Run ``run()`` in a new event loop in each of ``count`` threads at once; what each
    returned, or raised (a thread's failure is the test's to count), once all ended (60 s
    at most each)."""
    results: list[T | BaseException] = []

    def thread() -> None:
        try:
            results.append(asyncio.run(run()))
        except BaseException as exc:  # (returned: the caller counts it)
            results.append(exc)

    in_threads(count, thread)
    return results
