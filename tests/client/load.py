"""Threads and an event loop's tasks at once: the load of the concurrency tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any


def alongside(threads: list[threading.Thread], tasks: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Start ``threads``, run ``tasks()`` in a new event loop meanwhile, and wait for
    the threads to end (30 s at most each)."""
    for thread in threads:
        thread.start()
    asyncio.run(tasks())
    for thread in threads:
        thread.join(30)
