"""What every client offers the load driver, whatever its library, and what it records.

A client has two sides: a thread side (one :class:`SyncSide` shared by every thread)
and a task side (one :class:`AsyncSide` shared by every task, opened inside the event
loop). Each side is a GET that returns an :class:`Answer`, plus the base classes of the
errors its library documents (anything else that escapes is a bug of the client). A
:class:`Stack` builds both sides on some library for a policy (``None``: no failover).

Under each side, the layer that hands attempts to the network records every one of them
as a :class:`Call` in :class:`Calls`, tagged with the logical request (the ``RID``
header, which the servers record too) and the host, whatever the client reports.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from pytest_failover import FailoverResult, Policy, Pool

__all__ = [
    "REQUEST_TIMEOUT",
    "RID",
    "Answer",
    "AsyncSide",
    "Call",
    "Calls",
    "Stack",
    "SyncSide",
    "scenario_pool",
]

#: The header that names the logical request on every attempt (servers record it too).
RID = "x-scenario-id"

#: Seconds: the libraries' own timeouts for every client (per connect and read).
REQUEST_TIMEOUT = 10.0


def scenario_pool(urls: Sequence[str]) -> Pool:
    """The one pool every failover client of a run has: the run's domains, in order."""
    return Pool("scenario", list(urls))


@dataclass(frozen=True, slots=True)
class Call:
    """One attempt that reached the network layer: for which request, to which host, when."""

    rid: str
    host: str
    at: float
    error: str | None  # the exception it raised (its class, or the library's reason), if any


def _class_name(exc: BaseException) -> str:
    return type(exc).__name__


class Calls:
    """Every :class:`Call` of one run (appended from any thread or task)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.items: list[Call] = []

    @contextlib.contextmanager
    def attempt(
        self, rid: str, host: str, *, name: Callable[[BaseException], str] = _class_name
    ) -> Iterator[None]:
        """Record the attempt the block makes, and what it raised (named by ``name``)."""
        at = self.clock()
        try:
            yield
        except BaseException as exc:
            self._add(Call(rid, host, at, name(exc)))
            raise
        self._add(Call(rid, host, at, None))

    def _add(self, call: Call) -> None:
        with self._lock:
            self.items.append(call)


@dataclass(frozen=True, slots=True)
class Answer:
    """A GET's final answer, in the terms every client shares."""

    status: int
    host: str  # the host of the URL that answered (when the client reports no result)
    result: FailoverResult | None  # what a failover client says it did


@dataclass(frozen=True, slots=True)
class SyncSide:
    """The thread side of a client: a blocking GET, its library's errors, how to close it."""

    get: Callable[[str, Mapping[str, str]], Answer]
    errors: tuple[type[BaseException], ...]
    close: Callable[[], None]


@dataclass(frozen=True, slots=True)
class AsyncSide:
    """The task side of a client: a GET to await and its library's errors."""

    get: Callable[[str, Mapping[str, str]], Awaitable[Answer]]
    errors: tuple[type[BaseException], ...]


class Stack(Protocol):
    """Builds a client's two sides on some library, counting every attempt in ``calls``."""

    def sync_side(self, policy: Policy | None, urls: Sequence[str], calls: Calls) -> SyncSide: ...

    def async_side(
        self, policy: Policy | None, urls: Sequence[str], calls: Calls, *, shards: int
    ) -> AbstractAsyncContextManager[AsyncSide]: ...
