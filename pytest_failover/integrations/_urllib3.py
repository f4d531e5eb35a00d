"""The requests adapter's seam for resolvers: urllib3 connections that resolve a pool's
hosts through its resolver and fail over between a domain's addresses.

urllib3 opens a connection's socket in ``HTTPConnection._new_conn`` (a documented hook of
its connection classes, overridden by its own ``HTTPSConnection`` too) and shakes hands in
``HTTPSConnection.connect``, with ``server_hostname=self.host``. The classes below keep
urllib3's own code for both and change one thing: the address ``_new_conn`` connects to.
SNI, the certificate check and the ``Host`` header thus stay bound to the domain's name.

The rules are the httpx transports' (:mod:`pytest_failover._dial`, where they live):
:class:`~pytest_failover._dial.Dial` gives the addresses in their order and each one's
share of the time, remembers the bad ones and names the peer on the attempt's span; a
TLS handshake that fails at an address moves to the next one unless the certificate was
refused (:func:`~pytest_failover._dial.address_failure`). Only the hosts of ``dialer``
resolve here; any other goes to urllib3 unchanged.

Every connection of these classes also announces itself as it sends a request, into the
slot its thread's attempt holds (:data:`SENDING`, ``_sockets.cut_announced``): urllib3
gives no handle on a connection before the answer's headers, and the watchdog needs its
socket to cut an attempt whose headers come a byte at a time.

The adapter gives its pool manager these classes (``PoolManager.pool_classes_by_scheme``):
:func:`pool_classes`, with a pool's resolver or without.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, ClassVar

import httpcore
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.connection import create_connection

from .._dial import Dial, Dialer
from ..resolve import ResolveError

__all__ = ["SENDING", "pool_classes"]


class _Sending(threading.local):
    """Per thread: the slot of the attempt the adapter is sending from it (None: none)."""

    slot: list[Any] | None = None


SENDING = _Sending()


_request = HTTPConnection.request


class _AnnouncingConnection(HTTPConnection):
    """An ``HTTPConnection`` that puts itself in its thread's slot (:data:`SENDING`) as it
    sends a request: connected, and the one that will read the answer. It counts the
    requests it sent since it last connected (``failover_carried``): a request on a
    connection that carried one before had no connect in its time, so the kernel's word
    on when it left is the client's delay (``_sockets.told``)."""

    failover_carried = 0

    def connect(self) -> None:
        self.failover_carried = 0  # (urllib3 connects again the same object once its socket dropped)
        super().connect()

    def request(  # type: ignore[override]  # urllib3's own signature (its own method is marked so too)
        self,
        method: str,
        url: str,
        body: Any = None,
        headers: Any = None,
        *,
        chunked: bool = False,
        preload_content: bool = True,
        decode_content: bool = True,
        enforce_content_length: bool = True,
    ) -> None:
        # urllib3's signature, written out, and its method called by name (neither its
        # HTTPSConnection nor ours defines another): no argument dict to build and
        # spread, no super object, on every request of the adapter's
        slot = SENDING.slot
        if slot is not None:
            slot[0] = self
        _request(
            self, method, url, body, headers, chunked=chunked, preload_content=preload_content,
            decode_content=decode_content, enforce_content_length=enforce_content_length,
        )  # fmt: skip
        self.failover_carried += 1  # once sent: a plain connection connects while sending, a TLS one before


class _AnnouncingTLSConnection(_AnnouncingConnection, HTTPSConnection):
    """The ``HTTPSConnection`` twin."""


class _ResolvingConnection(_AnnouncingConnection):
    """An ``HTTPConnection`` whose socket goes to an address of its host's resolver."""

    failover_dialer: ClassVar[Dialer]
    #: The address this connection went to and how it was found (None: urllib3's own connect).
    failover_peer: tuple[str, str] | None = None
    _failover_dial: Dial | None = None

    def _new_conn(self) -> socket.socket:
        dialer = self.failover_dialer
        resolver = dialer.resolvers.get(self.host)
        if resolver is None:
            return super()._new_conn()
        dial = self._failover_dial
        if dial is None:  # a handshake that failed at the last address comes back with its dial
            started = dialer.clock()
            try:
                answer = resolver.resolve(self.host)
            except ResolveError as exc:
                raise NewConnectionError(self, dialer.resolve_failed(self.host, exc, started)) from exc
            dialer.resolved(self.host, answer, started)
            timeout = self.timeout if isinstance(self.timeout, int | float) else None
            dial = self._failover_dial = Dial(dialer, self.host, answer, timeout, httpcore)  # the errors it keeps: httpcore's
        for address, limit in dial:
            try:
                sock = create_connection(
                    (address, self.port), limit, source_address=self.source_address, socket_options=self.socket_options
                )
            except OSError as exc:  # refused, unreachable, timed out (socket.timeout is an OSError)
                dial.failed(address, _as_httpcore(exc))
                continue
            dial.connected(address)
            self.failover_peer = (address, dial.source)
            return sock
        self._failover_dial = None
        error = dial.error()
        kind = ConnectTimeoutError if isinstance(error, httpcore.ConnectTimeout) else NewConnectionError
        raise kind(self, str(error)) from error

    def connect(self) -> None:
        self._failover_dial = None
        try:
            super().connect()
        finally:
            self._failover_dial = None


class _ResolvingTLSConnection(_ResolvingConnection, _AnnouncingTLSConnection):
    """The ``HTTPSConnection`` twin, whose handshake moves to the next address when it
    fails at one (not when the certificate is refused)."""

    def connect(self) -> None:
        self._failover_dial = None
        try:
            while True:
                try:
                    _AnnouncingConnection.connect(self)  # (urllib3's HTTPSConnection's, next in line)
                    return
                except OSError as exc:  # the handshake's: ssl.SSLError, a reset, a time-out
                    dial, peer = self._failover_dial, self.failover_peer
                    if dial is None or peer is None or not dial.handshake_failed(peer[0], _as_httpcore(exc)):
                        raise
                    if self.sock is not None:
                        self.sock.close()
                        self.sock = None
                    self.failover_peer = None  # the next address, or the dial's error
        finally:
            self._failover_dial = None


def _as_httpcore(exc: OSError) -> Exception:
    """``exc`` as the error :class:`~pytest_failover._dial.Dial` keeps per address (its
    cause: the precise kind, for ``error.type``)."""
    error = httpcore.ConnectTimeout(str(exc)) if isinstance(exc, TimeoutError) else httpcore.ConnectError(str(exc))
    error.__cause__ = exc
    return error


def pool_classes(dialer: Dialer | None) -> dict[str, type[HTTPConnectionPool]]:
    """urllib3 connection pool classes, by scheme, whose connections announce themselves
    (:data:`SENDING`) and resolve the hosts of ``dialer``, if any (one set per adapter with
    a dialer: it is a class attribute)."""
    if dialer is None:
        return _ANNOUNCING
    attributes: dict[str, Any] = {"failover_dialer": dialer}
    plain = type("ResolvingHTTPConnection", (_ResolvingConnection,), attributes)
    tls = type("ResolvingHTTPSConnection", (_ResolvingTLSConnection,), attributes)
    return {
        "http": type("ResolvingHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("ResolvingHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": tls}),
    }


_ANNOUNCING: dict[str, type[HTTPConnectionPool]] = {
    "http": type("AnnouncingHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": _AnnouncingConnection}),
    "https": type("AnnouncingHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": _AnnouncingTLSConnection}),
}
