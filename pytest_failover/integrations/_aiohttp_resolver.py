"""The aiohttp middleware's seam for resolvers: an ``aiohttp.abc.AbstractResolver`` that
answers a pool's hosts from its resolver, for the connector the middleware makes
(``FailoverMiddleware.connector()``).

aiohttp's ``TCPConnector`` asks its resolver for a host's addresses, then connects to them
in turn itself (Happy Eyeballs, aiohappyeyeballs) and shakes hands with
``server_hostname=<the host>``: SNI, the certificate check and the ``Host`` header stay
bound to the domain's name. The order is the resolver's, the addresses that failed lately
last (:meth:`~pytest_failover._dial.Dialer.order`); each resolution is measured like the
httpx transports' (``failover.resolve.duration`` / ``.failures``) and names its source on
the attempt's span. What aiohttp's own loop decides, this seam cannot change: it moves to
the next address after a refused or timed-out connect and after any failed handshake, a
refused certificate included (the certificate is still checked against the name at every
address). It does not say which address failed: :class:`FailoverConnector` notes the
address a new connection reached, and the addresses offered before it are the ones that
failed (:meth:`~pytest_failover._dial.Dialer.landed`): they are remembered as bad, the move
is the attempt's address switch, and the middleware puts the peer and its source on the
attempt's span. Any host outside the pools goes to aiohttp's default resolver.
"""

from __future__ import annotations

import socket
import weakref
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from opentelemetry import trace as otel_trace

from ..resolve import ResolveError
from ..semconv import FAILOVER_RESOLVE_SOURCE

if TYPE_CHECKING:
    from .._dial import Dialer

__all__ = ["PEERS", "FailoverConnector", "FailoverResolver"]

#: The peer of each connection ``FailoverConnector`` opened to a pool's host (keyed by its
#: aiohttp protocol, which the response keeps): the address and how it was found.
PEERS: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()

_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class FailoverResolver(AbstractResolver):
    """Resolves the hosts of ``dialer`` through their pool's resolver; any other host
    through ``inner`` (aiohttp's ``DefaultResolver()``)."""

    def __init__(self, dialer: Dialer, inner: AbstractResolver | None = None) -> None:
        self._dialer = dialer
        self._inner = inner if inner is not None else aiohttp.DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        dialer = self._dialer
        name = host.rstrip(".")
        resolver = dialer.resolvers.get(name)
        if resolver is None:
            return await self._inner.resolve(host, port, family)
        started = dialer.clock()
        try:
            answer = await resolver.aresolve(name)
        except ResolveError as exc:
            raise OSError(dialer.resolve_failed(name, exc, started)) from exc
        dialer.resolved(name, answer, started)
        span = otel_trace.get_current_span()  # the attempt's: aiohttp resolves in its task
        if span.is_recording():
            span.set_attribute(FAILOVER_RESOLVE_SOURCE, answer.source)
        results: list[ResolveResult] = []
        ordered = dialer.order(name, answer.addresses)
        dialer.offered(name, ordered, answer.source)  # the peer's, once a connection lands (Dialer.landed)
        for address in ordered:
            kind = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family in (socket.AF_UNSPEC, kind):
                results.append(
                    ResolveResult(hostname=host, host=address, port=port, family=kind, proto=0, flags=_FLAGS)
                )
        if not results:
            raise OSError(f"resolving {name!r}: no address of the family {family!r} in {answer.addresses}")
        return results

    async def close(self) -> None:
        await self._inner.close()


class FailoverConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that notes where each new connection to a pool's host landed
    (:data:`PEERS`, :meth:`~pytest_failover._dial.Dialer.landed`). aiohttp's connect loop
    says nothing of the address it reached, so the socket factory (aiohttp's
    ``socket_factory``, the caller's one wrapped) notes each socket's target address, and
    ``_wrap_create_connection`` (the step that opens one connection, TCP and TLS, to the
    addresses aiohttp tries) looks the connected socket up. aiohttp has kept that method's
    shape since 3.8; a change to it fails the resolver tests."""

    def __init__(self, dialer: Dialer, **options: Any) -> None:
        made = options.pop("socket_factory", None)
        targets: dict[int, str] = {}  # a socket's file number -> the address it connects to

        def socket_factory(info: Any) -> socket.socket:
            family, kind, proto, _, address = info
            sock = made(info) if made is not None else socket.socket(family=family, type=kind, proto=proto)
            targets[sock.fileno()] = address[0]
            return sock

        super().__init__(socket_factory=socket_factory, **options)
        self._failover_dialer = dialer
        self._failover_targets = targets

    async def _wrap_create_connection(self, *args: Any, **kwargs: Any) -> Any:
        transport, protocol = await super()._wrap_create_connection(*args, **kwargs)
        request = kwargs.get("req")
        host = None if request is None else request.url.host.rstrip(".")
        sock = transport.get_extra_info("socket")
        address = None if sock is None else self._failover_targets.pop(sock.fileno(), None)
        dialer = self._failover_dialer
        if host in dialer.resolvers and address is not None:
            # aiohttp connects in the attempt's task: its span is the current one
            PEERS[protocol] = dialer.landed(host, address, otel_trace.get_current_span())
        return transport, protocol
