"""The operating system's resolver: ``socket.getaddrinfo``, in a worker thread so a timeout holds.

``getaddrinfo`` says nothing of TTLs: an answer carries ``ttl`` (0 by default: a cache in front
keeps it ``min_ttl``). The function is looked up on each call, so whatever stands at
``socket.getaddrinfo`` then (the simulator's fake names, say) answers.
"""

from __future__ import annotations

import concurrent.futures
import socket
import threading

from .. import semconv
from .._fork import call_in_child
from ._aio import wait_future
from ._base import (
    AddressFilter,
    Answer,
    NoAddresses,
    ResolveError,
    ResolverUnavailable,
    ResolveTimeout,
    check_ttl,
    make_answer,
    normalize_host,
)

__all__ = ["SystemResolver"]

SOURCE = semconv.RESOLVE_SOURCE_SYSTEM
#: getaddrinfo's errors that mean "the name has no address".
_NO_ADDRESS = {
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA", "EAI_ADDRFAMILY") if hasattr(socket, name)
}
_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _threads() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=16, thread_name_prefix="pytest-failover resolve"
            )
        return _executor


def _forked() -> None:
    """In a fork's child (``_fork``): no pool yet. The parent's would take lookups that no
    thread of the child ever runs, each failing only at its timeout."""
    global _executor, _executor_lock  # this module's pool, made by _threads()
    _executor, _executor_lock = None, threading.Lock()


call_in_child(_forked)


class SystemResolver:
    """Resolve with ``socket.getaddrinfo``: what every client does by default.

    ``timeout``: seconds to wait for it (the lookup runs in a worker thread, sync and async
    alike). ``ttl``: the TTL its answers carry. ``allow``: a predicate every address must pass.
    """

    def __init__(
        self, *, timeout: float = 5.0, ttl: float = 0.0, allow: AddressFilter | None = None
    ) -> None:
        if not 0 < timeout < float("inf"):
            raise ValueError(f"SystemResolver(timeout=...) takes seconds > 0, got {timeout!r}")
        self.timeout = timeout
        self.ttl = check_ttl(ttl, host="(any)", source=SOURCE)
        self.allow = allow

    def __repr__(self) -> str:
        return "SystemResolver()"

    def resolve(self, host: str) -> Answer:
        name = normalize_host(host)
        future = _threads().submit(_lookup, name)
        try:
            return self._answer(name, future.result(timeout=self.timeout))
        except concurrent.futures.TimeoutError:
            raise self._timed_out(name) from None

    async def aresolve(self, host: str) -> Answer:
        name = normalize_host(host)
        try:
            return self._answer(name, await wait_future(_threads().submit(_lookup, name), self.timeout))
        except TimeoutError:
            raise self._timed_out(name) from None

    def close(self) -> None:
        """Nothing to release: the worker threads are shared by every system resolver."""

    async def aclose(self) -> None:
        """Nothing to release."""

    def _answer(self, name: str, outcome: list[str] | ResolveError) -> Answer:
        if isinstance(outcome, ResolveError):
            raise outcome
        return make_answer(name, outcome, self.ttl, source=SOURCE, allow=self.allow)

    def _timed_out(self, name: str) -> ResolveTimeout:
        return ResolveTimeout(
            f"the system resolver did not answer for {name!r} within {self.timeout} s",
            host=name,
            source=SOURCE,
        )


def _lookup(name: str) -> list[str] | ResolveError:
    """The addresses of ``name`` in getaddrinfo's order (RFC 6724), or the error."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        kind = NoAddresses if exc.errno in _NO_ADDRESS else ResolverUnavailable
        return kind(f"the system resolver failed for {name!r}: {exc}", host=name, source=SOURCE)
    except (OSError, UnicodeError) as exc:
        return ResolverUnavailable(
            f"the system resolver failed for {name!r}: {exc!r}", host=name, source=SOURCE
        )
    return [str(info[4][0]) for info in infos]
