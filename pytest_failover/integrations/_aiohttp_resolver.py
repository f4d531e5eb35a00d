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
address), and it does not say which address failed, so nothing is remembered as bad.
Any host outside the pools goes to aiohttp's default resolver.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from opentelemetry import trace as otel_trace

from ..resolve import ResolveError
from ..semconv import FAILOVER_RESOLVE_SOURCE

if TYPE_CHECKING:
    from .._dial import Dialer

__all__ = ["FailoverResolver"]

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
            raise OSError(str(dialer.resolve_failed(name, exc, started))) from exc
        dialer.resolved(name, answer, started)
        span = otel_trace.get_current_span()  # the attempt's: aiohttp resolves in its task
        if span.is_recording():
            span.set_attribute(FAILOVER_RESOLVE_SOURCE, answer.source)
        results: list[ResolveResult] = []
        for address in dialer.order(name, answer.addresses):
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
