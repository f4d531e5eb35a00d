"""The one place that reaches below httpx into httpcore (httpx2 into httpcore2), for a
socket to shut down, or to ask the kernel when an answer came.

httpcore2 is httpcore's fork under another name, with the same private names this
module reads (``ConnectionPool._requests``, ``_optional_thread_lock``, a connection's
``_connection._network_stream``): every function here finds them by name on the
objects it is handed, so each works on both, and the two that build a pool take the
front-end's :class:`~pytest_failover._lib.HTTPLib`.

Two things need to stop a blocked ``recv`` from another thread: the watchdog (an
attempt past its time, :mod:`~pytest_failover._deadline`) and the sync hedging race
(the attempt a hedge beat, :mod:`~pytest_failover._race`). ``socket.shutdown`` is
safe from any thread and makes the read return at once; what these functions do is
find the socket. httpcore offers no public handle on it before the response headers
arrive, so :func:`cut_request` reads its connection pool's private list (and urllib3
none at all: the requests adapter's connections announce themselves, :func:`cut_announced`). Each
function finds nothing, and says so, when the inner transport or httpcore is not the
one it knows: the attempt then runs to its end, bounded by its time.

A cut attempt's phase (:func:`cut_phase`) is read from the frames its cancellation passed
through in httpcore: an async attempt cut by its guard rather than by httpx's own timeout
then still names the phase as httpx would have (a connect sent nothing).

The kernel's clock (:func:`told`): how long ago the connection under a response last sent
and received data, its round trip and whether it sent a segment again, from Linux's
``TCP_INFO``. What a call's duration holds before
its request left (but its connection's set-up round trips) and after its answer came is
the client's own delay (a thread waiting for the GIL, a loop running late), which the
slow-call rule leaves out (``RequestPlan._judged``).

A fourth reach installs a network backend (:mod:`~pytest_failover._dial`, which uses
httpcore's public backend classes only) under the default inner transport, for pools
with a resolver: :func:`resolving_transport` and :func:`async_resolving_transport`.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from ._fork import call_in_child

if TYPE_CHECKING:
    from ._lib import HTTPLib, Request, Response
    from ._values import Attempt

__all__ = [
    "ANNOUNCED", "SETUP_ROUNDS", "Told", "async_resolving_transport", "carried", "connection", "cut_announced",
    "cut_attempt", "cut_phase", "cut_request", "cuttable", "extra_socket", "resolving_transport", "socket_of",
    "told", "watch",
]  # fmt: skip

# httpx's defaults for ``HTTPTransport()`` (``httpx._config.DEFAULT_LIMITS``), which
# the pool built below must keep: public values, written out.
_MAX_CONNECTIONS = 100
_MAX_KEEPALIVE = 20
_KEEPALIVE_EXPIRY = 5.0


def _pool_options(lib: HTTPLib) -> dict[str, Any]:
    """What ``HTTPTransport()`` and ``AsyncHTTPTransport()`` give their pool by default."""
    return {
        "ssl_context": lib.module.create_ssl_context(),  # reads SSL_CERT_FILE, as httpx does
        "max_connections": _MAX_CONNECTIONS,
        "max_keepalive_connections": _MAX_KEEPALIVE,
        "keepalive_expiry": _KEEPALIVE_EXPIRY,
    }


def resolving_transport(lib: HTTPLib, backend: Any) -> Any:
    """``httpx.HTTPTransport()`` (``lib``'s) whose connections ``backend`` opens.

    httpx takes no network backend; ``httpcore.ConnectionPool(network_backend=...)``
    does (public since httpcore 1.0). So the transport httpx builds by default is kept
    (its ``handle_request``, its error mapping, its response wrapping), and the one
    thing replaced is its ``_pool`` attribute (httpx's private name, read by
    :func:`cut_request` already): by a pool built with the arguments
    ``HTTPTransport()`` gives its own (httpx's SSL context from ``create_ssl_context``,
    which reads ``SSL_CERT_FILE``; its default limits; HTTP/1.1) plus ``network_backend``.
    Setting httpcore's private ``_network_backend`` on httpx's pool instead would
    reach one level deeper, into the library that does not promise it.
    """
    transport = lib.HTTPTransport()
    transport._pool = lib.core_module().ConnectionPool(network_backend=backend, **_pool_options(lib))
    return transport


def async_resolving_transport(lib: HTTPLib, backend: Any) -> Any:
    """The async twin of :func:`resolving_transport` (``AsyncHTTPTransport._pool``,
    an ``httpcore.AsyncConnectionPool``)."""
    transport = lib.AsyncHTTPTransport()
    transport._pool = lib.core_module().AsyncConnectionPool(network_backend=backend, **_pool_options(lib))
    return transport


def socket_of(response: Response) -> socket.socket | None:
    """The socket under ``response`` (httpcore's ``network_stream`` extension), if any."""
    sock = extra_socket(response)
    return sock if isinstance(sock, socket.socket) else None


def extra_socket(response: Response) -> Any:
    """What ``response``'s ``network_stream`` gives as its socket: a ``socket.socket``
    (sync), asyncio's ``TransportSocket`` (async: its socket's safe methods), or None."""
    get_extra_info = getattr(response.extensions.get("network_stream"), "get_extra_info", None)
    return get_extra_info("socket") if get_extra_info is not None else None


# Linux's ``struct tcp_info`` (``linux/tcp.h``, laid out so since 2.6): eight one-byte
# fields, then 32-bit ones, of which these (counted from 0): ``tcpi_last_data_sent`` (9)
# and ``tcpi_last_data_recv`` (11), the milliseconds since the connection last sent and
# received data; ``tcpi_rtt`` (15), its smoothed round trip in microseconds; and
# ``tcpi_total_retrans`` (23), the segments it sent again, its SYN included. The kernel
# counts the milliseconds in clock ticks (4 ms at Debian's HZ=250, 10 ms at the least
# common HZ=100): :data:`_TICK` less is never more than the time that truly passed, and a
# tick more never less.
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)  # (None off Linux: nothing to ask)
_FIELDS = struct.Struct("=24I")  # the 32-bit fields from byte 8, up to and with the twenty-fourth
_HTTP1 = (b"HTTP/1.1", b"HTTP/1.0")
_TICK = 0.010
# The round trips of a new connection's set-up that are the domain's: TCP's handshake and
# TLS 1.2's two (TLS 1.3 takes one: the bound is the generous side of the domain's).
SETUP_ROUNDS = 3


class _Word(NamedTuple):
    """What the kernel says of a connection, in seconds (:func:`_word_of`)."""

    sent: float  # since it last sent data
    received: float  # since it last received data
    rtt: float  # its smoothed round trip
    retransmitted: bool  # it sent a segment again (a SYN too)


def _word_of(sock: Any) -> _Word | None:
    """What the kernel says of the connection of ``sock``, or None when it cannot tell: no
    socket (an in-process answer, a client that gives none), not TCP, not Linux, or the
    connection closed already (Python's closed socket has no descriptor, so no other
    connection's is read)."""
    getsockopt = getattr(sock, "getsockopt", None)  # (asyncio's TransportSocket has it)
    if getsockopt is None or _TCP_INFO is None:
        return None
    try:
        info = getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 8 + _FIELDS.size)
    except OSError:  # closed, or not TCP
        return None
    if len(info) < 8 + _FIELDS.size:
        return None
    fields = _FIELDS.unpack_from(info, 8)
    return _Word(fields[9] / 1000, fields[11] / 1000, fields[15] / 1e6, fields[23] > 0)


class Told(NamedTuple):
    """What the kernel says of a call's connection once its answer is in (:func:`told`), on
    the caller's clock (the kernel's: ``time.monotonic``)."""

    # (the kernel's count of ticks truncates at both of its ends: each is off by up to
    # two :data:`_TICK`, on its own side)
    left_at: float | None  # when its request's last byte left, never after (None: not known)
    came_at: float  # when its answer's last bytes came, never before
    setup: float | None  # of the time before the request left, the most that was the domain's


def told(sock: Any, carried: int, now: float, *, moved_on: bool = False) -> Told | None:
    """What the kernel says at ``now`` of the connection of ``sock``, which had carried
    ``carried`` requests as the answer's head came, that one included (0: not known). None
    when it cannot tell (:func:`_word_of`), or no answer's byte came since the request left.

    Once the connection carried another request since (``moved_on``: its count went up),
    the answer's end is taken as that one's departure (a tick late, as every ``came_at``),
    which comes after it (HTTP/1.x sends a request only once the answer before is in), and
    when the request left is not known.

    ``setup``: none on a connection that carried an earlier request (kept alive: no connect
    or handshake in that time); :data:`SETUP_ROUNDS` round trips on a new one (its connect
    and TLS handshake on the network; the rest of that time, the client's own, before the
    connect and between its steps); all of it (None) when the count is not known, or the
    connection sent a segment again (a lost SYN waits a second for its resend: the
    network's, which the domain answers for). A server slow to shake hands is not told
    apart from a client slow to go on: it is judged on its answers, which a server slow
    to compute is slow to send too."""
    word = _word_of(sock)
    if word is None:
        return None
    last_left = now - word.sent
    if moved_on:
        return Told(None, min(last_left + _TICK, now), None)
    if word.received > word.sent:  # nothing came since it left: not its answer
        return None
    came_at = now - word.received + _TICK
    setup = 0.0 if carried >= 2 else SETUP_ROUNDS * word.rtt if carried == 1 and not word.retransmitted else None
    return Told(last_left - _TICK, came_at if came_at < now else now, setup)


def connection(response: Response) -> Any:
    """What counts the requests of the connection under ``response`` (:func:`carried`),
    read as its head comes: its ``network_stream``'s ``failover_connection`` (the requests
    adapter's urllib3 connection), else httpcore's ``HTTP11Connection`` (reached through
    httpx's and httpcore's private stream attributes) on an HTTP/1.x one; None: nothing."""
    own = getattr(response.extensions.get("network_stream"), "failover_connection", None)
    if own is not None:
        return own
    if response.extensions.get("http_version") not in _HTTP1:
        return None
    return getattr(getattr(getattr(response.stream, "_httpcore_stream", None), "_stream", None), "_connection", None)


def carried(conn: Any) -> int:
    """How many requests ``conn`` (:func:`connection`) carried, the last one included (0: not
    known): the requests adapter's own count (``failover_carried``), else httpcore's
    (``_request_count``)."""
    count = getattr(conn, "failover_carried", None)
    if count is None:
        count = getattr(conn, "_request_count", 0)
    return count if isinstance(count, int) else 0


# The phase an attempt was in, by the first of these calls that a frame of the connection
# package makes on the cancellation's way down: the name of the library's timeout for that
# phase (httpx's and httpx2's exception classes). ``connect_tcp``, ``connect_unix_socket``
# and ``start_tls`` (the TLS handshake) are httpcore's network backend and stream interface
# (public: ``AsyncNetworkBackend``, ``AsyncNetworkStream``), called whoever's backend it is
# (a resolver's, :mod:`._dial`), and so is the backend's ``sleep``, which httpcore calls only
# between connect retries (``retries=``); ``write`` is that stream's too (also a SOCKS or
# HTTP/2 handshake's: may have sent, the safe side); ``wait_for_connection`` is the pool's
# wait for a free connection (the one private name: a method of the pool's request object,
# httpcore2's alike). None met: the attempt was reading (its headers or its body). Only a
# call made by the package counts: a request body's generator that sleeps is called by
# the library's stream, and the request went out before it.
_PHASES = {
    "connect_tcp": "ConnectTimeout",
    "connect_unix_socket": "ConnectTimeout",
    "start_tls": "ConnectTimeout",
    "sleep": "ConnectTimeout",
    "wait_for_connection": "PoolTimeout",
    "write": "WriteTimeout",
}


def cut_phase(core: str, cut: BaseException | None) -> str:
    """The name of the library's timeout for the phase ``cut`` found an attempt in:
    ``ConnectTimeout`` (connecting, TLS handshake included) and ``PoolTimeout`` (waiting for
    a connection), which sent nothing; ``WriteTimeout`` (sending); else ``ReadTimeout``.

    ``cut`` is the cancellation that ended the attempt at its time (the guard's, from the
    connect on: ``_deadline.async_limit``); its traceback holds the frames it passed through,
    from the loop's down to where it landed, and the first call of :data:`_PHASES` that a
    frame of ``core`` (the connection package: ``httpcore``, ``httpcore2``) made names the
    phase. Read only for an attempt cut at its time, never on the way of an answer. Another
    inner transport, or a cut with no cancellation to read, leaves ``ReadTimeout``: it may
    have sent, the safe answer.
    """
    tb = cut.__traceback__ if cut is not None else None
    called_by_core = False
    while tb is not None:
        frame = tb.tb_frame
        if called_by_core:
            phase = _PHASES.get(frame.f_code.co_name)
            if phase is not None:
                return phase
        called_by_core = str(frame.f_globals.get("__name__", "")).partition(".")[0] == core
        tb = tb.tb_next
    return "ReadTimeout"


def cuttable(transport: object) -> bool:
    """Can :func:`cut_request` find the sockets of this inner transport's requests?"""
    pool = getattr(transport, "_pool", None)
    return isinstance(getattr(pool, "_requests", None), list) and hasattr(pool, "_optional_thread_lock")


def cut_request(transport: object, request: Request) -> bool:
    """Shut down the socket an ``httpx.HTTPTransport`` is using for ``request`` right
    now; False when the request is not on the wire any more (or never was).

    httpcore gives no handle on the socket before the response headers arrive (the
    ``network_stream`` extension comes with the response), so this reads its
    connection pool's list of requests (httpcore 1.x: ``ConnectionPool._requests``,
    each with the ``request`` it carries, whose ``extensions`` are the httpx
    request's own dict, and the ``connection`` serving it), under the pool's own
    lock (``_optional_thread_lock``), which every hand-over of a connection takes.
    A request whose response was just closed is still in that list for a moment
    while its connection is already idle (httpcore closes the stream first), and
    another request, of this thread or another, may be given the connection then:
    so an idle connection, or one that now serves another request, is not cut
    (it was: the next request on it failed, its domain turned suspect, and a sticky
    pool left a healthy primary for a cooldown). With another inner transport, or
    another httpcore, it finds nothing: the loser then runs to its end in its
    thread, bounded by its attempt's time, and is closed there.
    """
    pool = getattr(transport, "_pool", None)
    pending = getattr(pool, "_requests", None)
    lock = getattr(pool, "_optional_thread_lock", None)
    if not isinstance(pending, list) or lock is None:
        return False
    with lock:
        mine = [q for q in pending if _carries(q, request)]
        connection = getattr(mine[0], "connection", None) if mine else None
        if connection is None or connection.is_idle():
            return False  # waiting for a connection, or done with it
        if any(getattr(q, "connection", None) is connection and not _carries(q, request) for q in pending):
            return False  # handed on to another request
        stream = getattr(getattr(connection, "_connection", None), "_network_stream", None)
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if get_extra_info is not None else None
        if not isinstance(sock, socket.socket):
            return False
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)  # under the lock: nobody takes the connection meanwhile
        return True


# Announced connections (an inner transport's that tells no socket before the answer's
# headers: the requests adapter's, over urllib3): each request in flight has a slot, a
# one-item list, which its connection fills as it sends (``[None]`` before that). Cutting
# one, and emptying it once the request is done with its connection, take this lock, so
# that a cut lands on the connection while it still serves that request, never once it
# went back to its pool and on to another.
ANNOUNCED = threading.Lock()


def _free_announced() -> None:
    """In a fork's child (``_fork``): a free lock (a cut in progress at the fork held it).
    Read where it is taken as ``_sockets.ANNOUNCED``, so the new one is the one taken."""
    global ANNOUNCED  # this module's lock, replaced only here
    ANNOUNCED = threading.Lock()


call_in_child(_free_announced)


def cut_announced(slot: list[Any]) -> bool:
    """Shut down the socket of the connection in ``slot``, if any; False when there is
    none (not connected yet, or the request is done with it)."""
    with ANNOUNCED:
        sock = getattr(slot[0], "sock", None)
        if not isinstance(sock, socket.socket):
            return False
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
        return True


# The sync front-ends' inner transports whose requests' sockets :func:`cut_attempt` can
# find, for the watchdog to cut an attempt before its answer's headers came: httpx's own
# (:func:`cut_request`), or one with a ``failover_cut(request)`` method of its own.
_WATCHED: weakref.WeakSet[object] = weakref.WeakSet()


def watch(transport: object) -> None:
    """Let :func:`cut_attempt` look in ``transport``'s pool, if it can (:func:`cuttable`),
    or ask it (its ``failover_cut``)."""
    if cuttable(transport) or callable(getattr(transport, "failover_cut", None)):
        _WATCHED.add(transport)


def cut_attempt(attempt: Attempt) -> bool:
    """Shut down the socket a sync ``attempt`` is using right now (the watchdog, at its
    deadline); False when there is none to cut. Once the answer's headers came, its
    response's (:func:`socket_of`, any inner transport that gives one); before, the one
    :func:`cut_request` finds for its request in a watched transport's pool, or the one a
    watched transport's ``failover_cut`` finds (the requests adapter's: the connection
    that announced itself, :func:`cut_announced`). Connecting, or waiting for a
    connection, there is none: the library's own timeouts, capped at the attempt's time,
    bound those.

    A cut ends a blocked read as the server's close would: a client that takes that for
    the answer's end (http.client a header line cut short, any client a body that ends at
    the close) returns an answer all the same, which the loop treats as the timeout it
    is (``SyncLoop._send``)."""
    response = attempt.response
    if response is not None:
        sock = socket_of(response)
        if sock is None:
            return False  # an in-process answer: nothing to cut, it runs its course
        with contextlib.suppress(OSError):  # already closed: nothing to interrupt
            sock.shutdown(socket.SHUT_RDWR)
        return True
    request = attempt.request
    return any(_cut(transport, request) for transport in list(_WATCHED))


def _cut(transport: object, request: Request) -> bool:
    """:func:`cut_request`, or the transport's own ``failover_cut``."""
    own = getattr(transport, "failover_cut", None)
    return bool(own(request)) if own is not None else cut_request(transport, request)


def _carries(queued: object, request: Request) -> bool:
    """Is this entry of httpcore's pool list the one sending ``request``?"""
    return getattr(getattr(queued, "request", None), "extensions", None) is request.extensions
