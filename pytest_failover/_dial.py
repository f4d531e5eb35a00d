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
   the breakers hear nothing of it. So does a TLS handshake that fails at the address
   (reset, end of stream, timed out, a protocol error), except for the certificate
   check (:func:`address_failure` says why);
5. when every address refused (a refusal is instant, and an address may come back
   between two tries: with one of two addresses going down as the other comes back,
   100 tasks saw both refused in one pass about one run in six), they are all tried
   once more, in the same order, if time is left;
6. the domain fails (one ``ConnectError`` or ``ConnectTimeout`` for the attempt)
   only when every address failed or the time ran out.

Any other host goes to the inner backend unchanged, as it would without a resolver.

The TLS handshake is httpcore's: it calls ``start_tls`` on the stream ``connect_tcp``
returned. So that stream (``_Stream``) keeps its dial until the handshake is done: a
handshake that fails at the address closes it (httpcore's backends close the stream
they could not wrap), dials the next address of the same line and shakes hands there.
httpcore gives the handshake its connect timeout again; the dial's deadline is moved
to ``now + timeout`` when the first handshake starts, and each handshake and connect
after it gets its share of the time left, as in rule 3.

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

import functools
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as otel_trace

from ._fork import renew_locks
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
    RESOLVE_SOURCE_SYSTEM,
    SERVER_ADDRESS,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ._lib import HTTPLib, Response
    from ._telemetry import Telemetry
    from .resolve import Answer, Resolver

__all__ = [
    "AsyncResolvingBackend",
    "Dialer",
    "ResolvingBackend",
    "address_failure",
    "async_resolving_backend",
    "resolving_backend",
]

#: How long an address that refused or timed out goes to the end of its domain's line.
BAD_ADDRESS_SECONDS = 30.0
#: The least time a handshake is given, when the dial's time is (nearly) spent.
_LEAST_SECONDS = 0.001


def resolving_backend(lib: HTTPLib, dialer: Dialer) -> ResolvingBackend:
    """The sync backend of ``dialer`` in ``lib``'s connection package."""
    return ResolvingBackend(dialer, lib.core_module())


def async_resolving_backend(lib: HTTPLib, dialer: Dialer) -> AsyncResolvingBackend:
    """The async backend of ``dialer`` in ``lib``'s connection package."""
    return AsyncResolvingBackend(dialer, lib.core_module())


def address_failure(exc: BaseException) -> bool:
    """Does a failed TLS handshake count against the address, so that the next address
    of the same domain is tried? Yes for a reset, an end of stream, a time-out or a TLS
    protocol error; no when the certificate check refused the server
    (``ssl.SSLCertVerificationError`` anywhere in the exception's chain).

    Why a certificate failure is not an address failure: the certificate belongs to the
    name, not to the address. It fails the same way at every address when the domain's
    certificate itself is wrong (expired, renewed without its chain), or when something
    on this client's path intercepts TLS, and both are the domain's failure, to be seen
    as ``server_certificate_invalid`` by its breaker, its pool and its alerts, not hidden
    behind an address that happened to work. When only some addresses present a bad
    certificate, the answer that sent us there is in doubt: a resolver that gave one
    hostile address is not trusted for the others (as ``allow`` refuses a whole answer
    for one forbidden address), and the pool's next domain is the safer place to go.
    Trying another address would weaken no check (each handshake is verified against the
    name), but it would spend the attempt's time on handshakes with a server that
    already failed to prove who it is, and hide the signal.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return False
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return True


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
        renew_locks(self, "_lock")
        self._bad: dict[tuple[str, str], float] = {}  # (host, address) -> bad until
        # host -> the addresses last offered to a connector that connects by itself
        # (aiohttp's), in order, and how they were found: see :meth:`landed`
        self._offered: dict[str, tuple[list[str], str]] = {}

    def forget(self) -> None:
        """No address failed lately, none offered (``State.forget``); the resolvers keep
        their own caches."""
        with self._lock:
            self._bad.clear()
            self._offered.clear()

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

    def offered(self, host: str, addresses: list[str], source: str) -> None:
        """``addresses`` (in the order given) were handed to a connector that tries them
        itself and says nothing of those that failed (aiohttp's ``TCPConnector``)."""
        self._offered[host] = (addresses, source)

    def landed(self, host: str, address: str, span: otel_trace.Span) -> tuple[str, str]:
        """A new connection of such a connector reached ``address``: the addresses offered
        before it failed (the connector tries them in order), so they are remembered as bad
        and the move is the span's address switch, as :class:`Dial` records its own. The
        peer and how it was found (``Dialer.peer``'s pair)."""
        addresses, source = self._offered.get(host, ([], RESOLVE_SOURCE_SYSTEM))
        if address in addresses:
            skipped = addresses[: addresses.index(address)]
            for before in skipped:
                self.failed(host, before)
            if skipped and span.is_recording():
                span.add_event(
                    EVENT_ADDRESS_SWITCH, {FAILOVER_FROM: skipped[-1], FAILOVER_TO: address, FAILOVER_REASON: "connect"}
                )
            self.connected(host, address)
        return address, source

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

    def resolve_failed(self, host: str, exc: ResolveError, started: float) -> str:
        """Record a resolution of ``host`` that failed; the message of the attempt's error
        (each seam raises its own kind: its httpcore's ``ConnectError``, urllib3's, aiohttp's)."""
        if self.telemetry is not None:
            attributes = dict(self._labels[host])
            attributes[ERROR_TYPE] = type(exc).__name__
            if exc.source is not None:
                attributes[FAILOVER_RESOLVE_SOURCE] = exc.source
            self.telemetry.resolve_duration.record(self.clock() - started, attributes)
            self.telemetry.resolve_failures.add(1, attributes)
        return f"resolving {host!r}: {exc}"


class Dial:
    """One ``connect_tcp`` of a host that resolves: the addresses in their order, each
    with its share of the time left, and what happened to each (no I/O)."""

    def __init__(self, dialer: Dialer, host: str, answer: Answer, timeout: float | None, core: ModuleType) -> None:
        self.core = core  # the connection package (httpcore, httpcore2) whose errors the dial sees and raises
        self.connect_errors: tuple[type[Exception], ...] = (core.ConnectError, core.ConnectTimeout)
        self.dialer = dialer
        self.host = host
        self.source = answer.source
        self.addresses = dialer.order(host, answer.addresses)
        self.deadline = None if timeout is None else dialer.clock() + timeout
        self.errors: list[tuple[str, Exception]] = []
        span = otel_trace.get_current_span()
        self.span: Span | None = span if span.is_recording() else None
        self._left = 1  # addresses left in this pass, the one being tried included
        self._shaking = False  # has the first TLS handshake started?
        self._tries = self._all()

    def __iter__(self) -> Iterator[tuple[str, float | None]]:
        """Each address to try and the seconds it may take (None: httpcore's own limit):
        every address once, and once more if every one of them refused (rule 5). One
        line per dial: iterating again goes on where the last loop stopped."""
        return self._tries

    def _all(self) -> Iterator[tuple[str, float | None]]:
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
            self._left = count - i
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

    def handshake_limit(self, timeout: float | None) -> float | None:
        """The seconds the TLS handshake at the address being tried may take: its share
        of the time left, the dial's deadline moved to ``now + timeout`` (httpcore's
        connect timeout, which it gives the handshake too) when the first one starts."""
        if timeout is None:
            return None
        now = self.dialer.clock()
        if not self._shaking:
            self._shaking = True
            self.deadline = now + timeout if self.deadline is None else max(self.deadline, now + timeout)
        left = (self.deadline if self.deadline is not None else now + timeout) - now
        return max(left, _LEAST_SECONDS) / self._left

    def handshake_failed(self, address: str, exc: Exception) -> bool:
        """Note a failed TLS handshake at ``address``; True when the next address is to
        be tried (:func:`address_failure`), False when the error is the attempt's."""
        if not address_failure(exc):
            return False
        self.failed(address, exc)
        return True

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
            raise self._core.ConnectError(self._dialer.resolve_failed(host, exc, started)) from exc
        self._dialer.resolved(host, answer, started)
        options = None if socket_options is None else list(socket_options)  # used once per address
        return self._open(Dial(self._dialer, host, answer, timeout, self._core), port, local_address, options)

    def _open(self, dial: Dial, port: int, local_address: str | None, options: list[Any] | None) -> _Stream:
        """A TCP stream to the next address of ``dial`` that accepts; ``dial.error()`` when none is left."""
        for address, limit in dial:
            try:
                stream = self._inner.connect_tcp(address, port, limit, local_address, options)
            except dial.connect_errors as exc:
                dial.failed(address, exc)
                continue
            dial.connected(address)
            return _Stream(stream, (address, dial.source), dial, functools.partial(self._open, dial, port, local_address, options))
        raise dial.error()

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> Any:
        return self._inner.connect_unix_socket(path, timeout, socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AsyncResolvingBackend:
    """The async twin of :class:`ResolvingBackend` (``inner``: ``core.AnyIOBackend()``,
    asyncio or trio, as the resolvers' ``aresolve``)."""

    def __init__(self, dialer: Dialer, core: ModuleType, inner: Any = None) -> None:
        self._dialer = dialer
        self._core = core
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
            raise self._core.ConnectError(self._dialer.resolve_failed(host, exc, started)) from exc
        self._dialer.resolved(host, answer, started)
        options = None if socket_options is None else list(socket_options)
        return await self._open(Dial(self._dialer, host, answer, timeout, self._core), port, local_address, options)

    async def _open(
        self, dial: Dial, port: int, local_address: str | None, options: list[Any] | None
    ) -> _AsyncStream:
        """The async twin of :meth:`ResolvingBackend._open`."""
        for address, limit in dial:
            try:
                stream = await self._inner.connect_tcp(address, port, limit, local_address, options)
            except dial.connect_errors as exc:
                dial.failed(address, exc)
                continue
            dial.connected(address)
            return _AsyncStream(
                stream, (address, dial.source), dial, functools.partial(self._open, dial, port, local_address, options)
            )
        raise dial.error()

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> Any:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Stream:
    """A stream of the inner backend that knows its peer: the address and how it was
    found (``failover_peer``), through TLS too (``start_tls`` wraps the new stream).
    Until its handshake is done it keeps its dial and how to open the next address
    (``redial``): a handshake that fails at the address moves on to the next one."""

    __slots__ = ("_dial", "_inner", "_redial", "failover_peer")

    def __init__(
        self,
        inner: Any,
        peer: tuple[str, str],
        dial: Dial | None = None,
        redial: Callable[[], _Stream] | None = None,
    ) -> None:
        self._inner = inner
        self.failover_peer = peer
        self._dial = dial
        self._redial = redial

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
        stream = self
        while stream._dial is not None and stream._redial is not None:
            dial = stream._dial
            try:
                tls = stream._inner.start_tls(ssl_context, server_hostname, dial.handshake_limit(timeout))
            except dial.connect_errors as exc:
                if not dial.handshake_failed(stream.failover_peer[0], exc):
                    raise
                stream = stream._redial()  # the next address, or the dial's error
                continue
            return _Stream(tls, stream.failover_peer)
        return _Stream(stream._inner.start_tls(ssl_context, server_hostname, timeout), stream.failover_peer)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncStream:
    """The async twin of :class:`_Stream`."""

    __slots__ = ("_dial", "_inner", "_redial", "failover_peer")

    def __init__(
        self,
        inner: Any,
        peer: tuple[str, str],
        dial: Dial | None = None,
        redial: Callable[[], Awaitable[_AsyncStream]] | None = None,
    ) -> None:
        self._inner = inner
        self.failover_peer = peer
        self._dial = dial
        self._redial = redial

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
        stream = self
        while stream._dial is not None and stream._redial is not None:
            dial = stream._dial
            try:
                tls = await stream._inner.start_tls(ssl_context, server_hostname, dial.handshake_limit(timeout))
            except dial.connect_errors as exc:
                if not dial.handshake_failed(stream.failover_peer[0], exc):
                    raise
                stream = await stream._redial()
                continue
            return _AsyncStream(tls, stream.failover_peer)
        return _AsyncStream(await stream._inner.start_tls(ssl_context, server_hostname, timeout), stream.failover_peer)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
