"""Resolution below the exchange: httpcore network backends that resolve a pool's
domains through its resolver and fail over between the addresses of one domain.

httpcore2 (httpx2's) has the same backend interface under another name: the backends
here take the connection package they work in (``core``: ``httpcore`` or ``httpcore2``),
open their streams with its backend and raise its ``ConnectError`` / ``ConnectTimeout``,
which its httpx maps to its own; nothing here imports either package.

Rules and theory of operation
-----------------------------
httpcore asks its network backend for a TCP stream with ``connect_tcp(host, port,
timeout)``, then calls ``start_tls(server_hostname=<the origin's host>)`` on it and
writes the request with the origin's ``Host``. A backend that turns ``host`` into an
address therefore changes where the bytes go and nothing else: SNI, the certificate
check and the ``Host`` header stay bound to the domain's name.

For a host of a pool with a resolver (:class:`Dialer` ``.resolvers``):

1. the resolver answers (a ``ResolveError`` is the attempt's ``httpcore.ConnectError``:
   the domain could not be reached);
2. its addresses are tried in the resolver's order (Happy Eyeballs, RFC 8305, section
   4), the addresses that failed lately moved to the end (they are still tried: a
   stale memory must never make a domain fail);
3. each gets its share of the time left, ``left / addresses left`` (a black hole
   first in line costs half the time of two addresses, not all of it);
4. a refused or timed-out connect marks the address bad for ``forget_after`` seconds
   and the next one is tried, a span event ``failover.address.switch``; the pool and
   the breakers hear nothing of it;
5. when every address refused (a refusal is instant, and an address may come back
   between two tries: with one of two addresses going down as the other comes back,
   100 tasks saw both refused in one pass about one run in six), they are all tried
   once more, in the same order, if time is left;
6. the domain fails (one ``ConnectError`` or ``ConnectTimeout`` for the attempt)
   only when every address failed or the time ran out.

Any other host goes to the inner backend unchanged, as it would without a resolver.

Each resolution (rule 1) is measured here, the one place every resolution of the
transports passes, sync and async, whatever the resolver: ``failover.resolve.duration``
(answered or failed) and ``failover.resolve.failures``, with ``failover.resolver`` (the
configured resolver's class) and ``failover.resolve.source`` (``cache`` and ``stale``
included, which only the outermost resolver knows: a resolver wrapped in a cache or a
chain never sees a cache hit, and would count a chain's fallback as a failure the
attempt never had). The instruments are the transport's (``Telemetry``), made once
with its meter provider.

Telemetry reaches the attempt's span as the current OpenTelemetry span: the
transports send each attempt in a context holding it (``_telemetry.attempt_started``),
a context variable set around the send already, so the backend adds no work per
request and nothing at all to a request that opens no connection. (httpcore's
``trace`` extension would do too, but it is a callback per phase of every request,
set on every request's extensions; a connection is opened far more rarely.) A pooled
connection does not come back here: the stream it returns carries the address and
its source (``failover_peer``), and the exchange reads them off the response's
``network_stream`` extension (:meth:`Dialer.peer`). (The kernel's peer name would not
do: the connection may be closed by then, and the simulator redirects connects.)
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as otel_trace

from .resolve import ResolveError
from .semconv import (
    ERROR_TYPE,
    EVENT_ADDRESS_SWITCH,
    FAILOVER_FROM,
    FAILOVER_REASON,
    FAILOVER_RESOLVE_SOURCE,
    FAILOVER_RESOLVER,
    FAILOVER_TO,
    NETWORK_PEER_ADDRESS,
    SERVER_ADDRESS,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ._lib import HTTPLib, Response
    from ._telemetry import Telemetry
    from .resolve import Answer, Resolver

__all__ = ["AsyncResolvingBackend", "Dialer", "ResolvingBackend", "async_resolving_backend", "resolving_backend"]

#: How long an address that refused or timed out goes to the end of its domain's line.
BAD_ADDRESS_SECONDS = 30.0


def resolving_backend(lib: HTTPLib, dialer: Dialer) -> ResolvingBackend:
    """The sync backend of ``dialer`` in ``lib``'s connection package."""
    return ResolvingBackend(dialer, lib.core_module())


def async_resolving_backend(lib: HTTPLib, dialer: Dialer) -> AsyncResolvingBackend:
    """The async backend of ``dialer`` in ``lib``'s connection package."""
    return AsyncResolvingBackend(dialer, lib.core_module())


class Dialer:
    """What the sync and async backends share, without I/O: the resolver of each
    host, the order to try a host's addresses in, the addresses that failed lately
    and how each address was found. One per transport state (``sharing`` front-ends
    share it); safe for threads and tasks."""

    def __init__(
        self,
        resolvers: Mapping[str, Resolver],
        *,
        clock: Callable[[], float],
        forget_after: float = BAD_ADDRESS_SECONDS,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.resolvers = dict(resolvers)
        self.clock = clock
        self.forget_after = forget_after
        self.telemetry = telemetry
        # host -> the attributes no resolution of it changes (copied per record: the SDK may keep them)
        self._labels: dict[str, Mapping[str, str]] = {
            host: {SERVER_ADDRESS: host, FAILOVER_RESOLVER: type(resolver).__name__}
            for host, resolver in self.resolvers.items()
        }
        self._lock = threading.Lock()
        self._bad: dict[tuple[str, str], float] = {}  # (host, address) -> bad until

    def order(self, host: str, addresses: Iterable[str]) -> list[str]:
        """``addresses`` in the order to try them: the resolver's, the addresses that
        failed lately last (the one to be forgiven first, first)."""
        if not self._bad:
            return list(addresses)
        now = self.clock()
        good: list[str] = []
        later: list[tuple[float, str]] = []
        with self._lock:
            for address in addresses:
                until = self._bad.get((host, address))
                if until is None or until <= now:
                    good.append(address)
                else:
                    later.append((until, address))
        return good + [address for _, address in sorted(later)]

    def bad(self, host: str) -> list[str]:
        """The addresses of ``host`` that failed lately (for tests and the docs)."""
        now = self.clock()
        with self._lock:
            return [a for (h, a), until in self._bad.items() if h == host and until > now]

    def failed(self, host: str, address: str) -> None:
        with self._lock:
            self._bad[(host, address)] = self.clock() + self.forget_after

    def connected(self, host: str, address: str) -> None:
        with self._lock:
            self._bad.pop((host, address), None)

    @staticmethod
    def peer(response: Response) -> tuple[str, str] | None:
        """The address ``response`` came from and how it was found, when its connection
        was opened here (httpcore's ``network_stream`` extension is then one of ours)."""
        return getattr(response.extensions.get("network_stream"), "failover_peer", None)

    def resolved(self, host: str, answer: Answer, started: float) -> None:
        """Record a resolution of ``host`` that answered (``started``: the clock before it)."""
        if self.telemetry is not None:
            attributes = dict(self._labels[host])
            attributes[FAILOVER_RESOLVE_SOURCE] = answer.source
            self.telemetry.resolve_duration.record(self.clock() - started, attributes)

    def resolve_failed(self, host: str, exc: ResolveError, started: float, core: ModuleType) -> Exception:
        """Record a resolution of ``host`` that failed; the attempt's error."""
        if self.telemetry is not None:
            attributes = dict(self._labels[host])
            attributes[ERROR_TYPE] = type(exc).__name__
            if exc.source is not None:
                attributes[FAILOVER_RESOLVE_SOURCE] = exc.source
            self.telemetry.resolve_duration.record(self.clock() - started, attributes)
            self.telemetry.resolve_failures.add(1, attributes)
        error: Exception = core.ConnectError(f"resolving {host!r}: {exc}")
        return error


class Dial:
    """One ``connect_tcp`` of a host that resolves: the addresses in their order, each
    with its share of the time left, and what happened to each (no I/O)."""

    def __init__(self, dialer: Dialer, host: str, answer: Answer, timeout: float | None, core: ModuleType) -> None:
        self.core = core  # the connection package whose errors the dial sees and raises
        self.dialer = dialer
        self.host = host
        self.source = answer.source
        self.addresses = dialer.order(host, answer.addresses)
        self.deadline = None if timeout is None else dialer.clock() + timeout
        self.errors: list[tuple[str, Exception]] = []
        span = otel_trace.get_current_span()
        self.span: Span | None = span if span.is_recording() else None

    def __iter__(self) -> Iterator[tuple[str, float | None]]:
        """Each address to try and the seconds it may take (None: httpcore's own limit):
        every address once, and once more if every one of them refused (rule 5)."""
        yield from self._pass(self.addresses)
        refused = len(self.errors) == len(self.addresses) and not any(
            isinstance(exc, self.core.ConnectTimeout) for _, exc in self.errors
        )
        if refused:
            yield from self._pass(self.addresses)

    def _pass(self, addresses: list[str]) -> Iterator[tuple[str, float | None]]:
        count = len(addresses)
        for i, address in enumerate(addresses):
            limit: float | None = None
            if self.deadline is not None:
                left = self.deadline - self.dialer.clock()
                if left <= 0:
                    return  # the attempt's connect time ran out
                limit = left / (count - i)
            if self.errors and self.span is not None:
                before, error = self.errors[-1]
                self.span.add_event(
                    EVENT_ADDRESS_SWITCH,
                    {FAILOVER_FROM: before, FAILOVER_TO: address, FAILOVER_REASON: type(error).__name__},
                )
            yield address, limit

    def failed(self, address: str, exc: Exception) -> None:
        self.errors.append((address, exc))
        self.dialer.failed(self.host, address)

    def connected(self, address: str) -> None:
        self.dialer.connected(self.host, address)
        if self.span is not None:
            self.span.set_attributes({NETWORK_PEER_ADDRESS: address, FAILOVER_RESOLVE_SOURCE: self.source})

    def error(self) -> Exception:
        """The attempt's error: every address failed, or the time ran out first."""
        tried = "; ".join(f"{address}: {type(exc).__name__}: {exc}" for address, exc in self.errors)
        out_of_time = len(self.errors) < len(self.addresses)
        what = (
            f"ran out of time after {len(self.errors)} of {len(self.addresses)} addresses"
            if out_of_time
            else f"every address failed ({len(self.errors)})"
        )
        message = f"connecting to {self.host!r} ({self.source}): {what}" + (f": {tried}" if tried else "")
        core = self.core
        timed_out = out_of_time or all(isinstance(exc, core.ConnectTimeout) for _, exc in self.errors)
        error: Exception = core.ConnectTimeout(message) if timed_out else core.ConnectError(message)
        if self.errors:
            error.__cause__ = self.errors[-1][1]
        return error


class ResolvingBackend:
    """An httpcore network backend (``core``'s: httpcore's or httpcore2's, whose pools
    take any object with its methods) that resolves the hosts of ``dialer`` through their
    resolver and fails over between their addresses; every other host goes to
    ``inner`` (``core.SyncBackend()``) unchanged."""

    def __init__(self, dialer: Dialer, core: ModuleType, inner: Any = None) -> None:
        self._dialer = dialer
        self._core = core
        self._connect_errors = (core.ConnectError, core.ConnectTimeout)
        self._inner = inner if inner is not None else core.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        resolver = self._dialer.resolvers.get(host)
        if resolver is None:
            return self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        started = self._dialer.clock()
        try:
            answer = resolver.resolve(host)
        except ResolveError as exc:
            raise self._dialer.resolve_failed(host, exc, started, self._core) from exc
        self._dialer.resolved(host, answer, started)
        options = None if socket_options is None else list(socket_options)  # used once per address
        dial = Dial(self._dialer, host, answer, timeout, self._core)
        for address, limit in dial:
            try:
                stream = self._inner.connect_tcp(address, port, limit, local_address, options)
            except self._connect_errors as exc:
                dial.failed(address, exc)
                continue
            dial.connected(address)
            return _Stream(stream, (address, dial.source))
        raise dial.error()

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> Any:
        return self._inner.connect_unix_socket(path, timeout, socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AsyncResolvingBackend:
    """The async twin of :class:`ResolvingBackend` (``inner``: ``core.AnyIOBackend()``,
    asyncio or trio; the resolvers' ``aresolve`` needs asyncio)."""

    def __init__(self, dialer: Dialer, core: ModuleType, inner: Any = None) -> None:
        self._dialer = dialer
        self._core = core
        self._connect_errors = (core.ConnectError, core.ConnectTimeout)
        self._inner = inner if inner is not None else core.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        resolver = self._dialer.resolvers.get(host)
        if resolver is None:
            return await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        started = self._dialer.clock()
        try:
            answer = await resolver.aresolve(host)
        except ResolveError as exc:
            raise self._dialer.resolve_failed(host, exc, started, self._core) from exc
        self._dialer.resolved(host, answer, started)
        options = None if socket_options is None else list(socket_options)
        dial = Dial(self._dialer, host, answer, timeout, self._core)
        for address, limit in dial:
            try:
                stream = await self._inner.connect_tcp(address, port, limit, local_address, options)
            except self._connect_errors as exc:
                dial.failed(address, exc)
                continue
            dial.connected(address)
            return _AsyncStream(stream, (address, dial.source))
        raise dial.error()

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> Any:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Stream:
    """A stream of the inner backend that knows its peer: the address and how it was
    found (``failover_peer``), through TLS too (``start_tls`` wraps the new stream)."""

    __slots__ = ("_inner", "failover_peer")

    def __init__(self, inner: Any, peer: tuple[str, str]) -> None:
        self._inner = inner
        self.failover_peer = peer

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, timeout)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout), self.failover_peer)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncStream:
    """The async twin of :class:`_Stream`."""

    __slots__ = ("_inner", "failover_peer")

    def __init__(self, inner: Any, peer: tuple[str, str]) -> None:
        self._inner = inner
        self.failover_peer = peer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = await self._inner.read(max_bytes, timeout)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any:
        return _AsyncStream(await self._inner.start_tls(ssl_context, server_hostname, timeout), self.failover_peer)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
