"""A small HTTP/1.1 server for the agent's endpoints: asyncio streams, spoken by h11.

Why hand-written: the agent serves a handful of ``GET`` routes (``/metrics``, ``/healthz``,
``/status.json``, the control document, the status page's files) and nothing else. With
aiohttp's web server doing it, importing ``aiohttp.web`` added **10 MiB** of RSS on top of
everything else the agent imports (part D of ``python -m benchmarks agent``), and the agent
on 2 domains went from 62 to 52 MiB when this module replaced it (2026-12-01), against an
issue-14 target of 60 MiB at 1,000 domains. h11, which the probes already speak
(:mod:`failover_agent.wire`), does the parsing and the framing; this module only reads,
routes and writes. aiohttp stays the library's optional extra for its client middleware.

What it does, and what a client sees:

- persistent connections (HTTP/1.1 keep-alive, HTTP/1.0 closes), pipelined requests in
  order; an idle connection is closed after :data:`KEEPALIVE_TIMEOUT`, one that stalls in
  the middle of a request, or stops reading its answer, after :data:`READ_TIMEOUT`;
- routes are exact paths plus path prefixes (``/assets/``); the path is matched
  percent-decoded, without its query, like aiohttp's router;
- ``HEAD`` is answered wherever ``GET`` is (the head only, with the body's length);
  another method on a known path is ``405`` with ``Allow: GET, HEAD``; an unknown path is
  ``404``; a malformed request ``400``; a request body is read and dropped up to
  :data:`MAX_BODY` bytes (``413`` beyond); after ``400``, ``413`` or ``431`` the connection
  closes, once what the client still sends is drained (briefly: a lingering close); a handler
  that raises is logged and answered ``500``;
- a :class:`Response` body may be a list of chunks: they are written one by one and dropped
  once written (``/metrics`` at 1,000 domains is 3 MB), with ``Content-Length`` their sum;
  its ``after`` runs once the answer is written (the agent hands the heap back to the OS);
- a :class:`Response` marked ``compress`` is sent gzip-encoded (``Content-Encoding: gzip``)
  when the request's ``Accept-Encoding`` admits gzip (:func:`accepts_gzip`, RFC 9110
  section 12.5.3) and its body is at least :data:`GZIP_MIN` bytes, always with
  ``Vary: Accept-Encoding``; the chunks are compressed one by one, each dropped once
  compressed, in a thread when the body is large (:data:`GZIP_IN_THREAD`);
- :meth:`Listener.aclose` stops accepting, lets the requests in progress finish for up to
  :data:`SHUTDOWN_GRACE` seconds, then closes every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import h11

__all__ = [
    "GZIP_IN_THREAD",
    "GZIP_MIN",
    "KEEPALIVE_TIMEOUT",
    "LINGER_BYTES",
    "LINGER_TIMEOUT",
    "MAX_BODY",
    "MAX_HEAD",
    "READ_TIMEOUT",
    "SHUTDOWN_GRACE",
    "Handler",
    "Listener",
    "Request",
    "Response",
    "accepts_gzip",
    "gzip_chunks",
    "json_response",
    "listen_error",
    "split_listen",
]

log = logging.getLogger("failover_agent.listener")

KEEPALIVE_TIMEOUT = 75.0
"""Seconds an idle persistent connection is kept open (aiohttp's default too)."""
READ_TIMEOUT = 30.0
"""Seconds a connection may stall in the middle of a request (its head or its body), or
while its answer is being written (a client that stops reading)."""
MAX_HEAD = 16 * 1024
"""Bytes of a request head (line and headers) still incomplete after which it is refused with
``431`` (h11 enforces it; a head that arrives whole in one read of 64 KiB is parsed)."""
MAX_BODY = 64 * 1024
"""Largest request body read and dropped (the routes take none); ``413`` beyond."""
SHUTDOWN_GRACE = 5.0
"""Seconds :meth:`Listener.aclose` lets requests in progress finish."""
LINGER_TIMEOUT = 2.0
LINGER_BYTES = 1024 * 1024
"""After an error answer, what is still read (and dropped) before closing: at most this many
bytes for at most :data:`LINGER_TIMEOUT` seconds."""
_READ_SIZE = 64 * 1024
GZIP_MIN = 1024
"""Bodies shorter than this are sent as they are, even to a client that accepts gzip."""
GZIP_IN_THREAD = 64 * 1024
"""Bodies at least this long are compressed in a thread, off the event loop."""
_GZIP_LEVEL = 6  # zlib's default: /metrics at 1,000 domains, 2.3 MB, goes out as 77 KB


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the handlers see it."""

    method: str
    path: str  # percent-decoded, without the query
    target: bytes  # as sent
    headers: tuple[tuple[bytes, bytes], ...]  # names lower-cased (h11)


@dataclass(slots=True)
class Response:
    """What a handler returns: a status, a body (bytes or chunks), and headers."""

    status: int = 200
    body: bytes | list[bytes] = b""
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    after: Callable[[], None] | None = None  # called once the answer is written (or failed to be)
    compress: bool = False  # may be sent gzip-encoded, to a client whose Accept-Encoding admits it


Handler = Callable[[Request], Awaitable[Response]]


def json_response(document: Any, status: int = 200) -> Response:
    """``document`` as a JSON answer (``application/json; charset=utf-8``)."""
    return Response(status, json.dumps(document).encode(), "application/json; charset=utf-8")


# One element of Accept-Encoding: a coding, then parameters of which only q counts (RFC 9110
# section 12.5.3; a weight is 0 to 1 with at most three decimals, section 12.4.2).
_CODING = re.compile(r"\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*((?:;[^;,]*)*)")
_QVALUE = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)")


def _weight(params: str) -> float | None:
    """The ``q`` of an element's parameters (1 without one); None if it is malformed."""
    weight = 1.0
    for param in params.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            if not _QVALUE.fullmatch(value):
                return None
            weight = float(value)
    return weight


def accepts_gzip(headers: tuple[tuple[bytes, bytes], ...]) -> bool:
    """Whether a request's ``Accept-Encoding`` (every such field, names lower-cased) asks for
    gzip: ``gzip`` (or ``x-gzip``), or ``*`` when gzip is not named, with a weight above 0 and
    at least identity's (a client that prefers the body as it is gets it so). Case does not
    matter; an element that cannot be parsed is ignored; without the field, no (what a
    client that sends none can decode is unknown in practice, whatever RFC 9110 allows)."""
    weights: dict[str, float] = {}
    present = False
    for name, value in headers:
        if name != b"accept-encoding":
            continue
        present = True
        for element in value.decode("latin-1").split(","):
            match = _CODING.fullmatch(element)
            weight = None if match is None else _weight(match.group(2))
            if match is None or weight is None:
                continue
            coding = match.group(1).lower()
            coding = "gzip" if coding == "x-gzip" else coding
            weights[coding] = max(weight, weights.get(coding, 0.0))
    if not present:
        return False
    gzip = weights.get("gzip", weights.get("*", 0.0))
    identity = weights.get("identity", weights.get("*", 1.0))
    return gzip > 0 and gzip >= identity


def gzip_chunks(chunks: list[bytes]) -> list[bytes]:
    """``chunks`` as one gzip stream, in pieces; ``chunks`` is emptied as it goes (each piece
    dropped once compressed), so a large body is never held twice over."""
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    out: list[bytes] = []
    chunks.reverse()
    while chunks:
        if piece := compressor.compress(chunks.pop()):
            out.append(piece)
    out.append(compressor.flush())
    return out


async def _encode(response: Response, request: Request) -> None:
    """Make ``response`` gzip-encoded if it may be, the client asks, and it is worth it."""
    headers = {**response.headers, "Vary": "Accept-Encoding"}
    response.headers = headers
    if not accepts_gzip(request.headers):
        return
    chunks = response.body if isinstance(response.body, list) else [response.body]
    size = sum(len(c) for c in chunks)
    if size < GZIP_MIN:
        return
    if size >= GZIP_IN_THREAD:
        response.body = await asyncio.to_thread(gzip_chunks, chunks)
    else:
        response.body = gzip_chunks(chunks)
    headers["Content-Encoding"] = "gzip"


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) -> ``(host, port)``; an empty host is every address."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def _plain(status: int, extra: Mapping[str, str] | None = None) -> Response:
    """An error answer with a short text body, e.g. ``404: Not Found``."""
    text = f"{status}: {HTTPStatus(status).phrase}"
    return Response(status, text.encode(), "text/plain; charset=utf-8", extra or {})


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After an error answer: stop writing, then read and drop what the client still sends
    (briefly, boundedly), so that closing with unread data does not reset the connection
    before the client has read the answer."""
    if writer.can_write_eof():
        writer.write_eof()
    left = LINGER_BYTES
    async with asyncio.timeout(LINGER_TIMEOUT):
        while left > 0 and (data := await reader.read(_READ_SIZE)):
            left -= len(data)


class _Refused(Exception):
    """The request cannot be served; answer ``status`` and close the connection."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def listen_error(host: str, port: int, exc: OSError) -> OSError:
    """``exc``, raised resolving or binding ``host:port``, as an error that names the address:
    ``listen address nowhere.invalid:9464: Name or service not known``."""
    shown = f"[{host}]" if ":" in host else host
    if isinstance(exc, socket.gaierror):
        reason = exc.strerror or str(exc)
    else:  # asyncio's own message repeats the address as a tuple
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return OSError(f"listen address {shown}:{port}: {reason}")


class Listener:
    """Serves ``routes`` (exact paths) and ``prefixes`` (path prefixes) on one TCP address;
    :meth:`start`, then :meth:`aclose`."""

    def __init__(self, routes: Mapping[str, Handler], prefixes: Mapping[str, Handler] | None = None) -> None:
        self._routes = dict(routes)
        self._prefixes = dict(prefixes or {})
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # those in the middle of a request
        self._closing = False
        self.addresses: list[tuple[str, int]] = []

    @property
    def open_connections(self) -> int:
        """Connections being served (idle ones included)."""
        return len(self._connections)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0: a free one); return the first bound address.

        An address that does not resolve, or cannot be bound, is an ``OSError`` naming it."""
        try:
            self._server = await asyncio.start_server(
                self._connection, host or None, port, reuse_address=True, limit=_READ_SIZE,
            )
        except OSError as exc:
            raise listen_error(host, port, exc) from exc
        self.addresses = [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self._server.sockets]
        return self.addresses[0]

    async def aclose(self) -> None:
        """Stop listening; let requests in progress finish (up to :data:`SHUTDOWN_GRACE` s);
        close every connection."""
        self._closing = True
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in self._connections - self._busy:
            task.cancel()  # idle: waiting for a next request that will not be served
        if self._busy:
            await asyncio.wait(set(self._busy), timeout=SHUTDOWN_GRACE)
        for task in self._busy:
            task.cancel()  # still going after the grace period
        if self._connections:
            await asyncio.wait(set(self._connections))

    # --- one connection -----------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing:  # accepted just before the listener closed
            writer.close()
            return
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                event = await self._next_event(conn, reader, KEEPALIVE_TIMEOUT)
                if not isinstance(event, h11.Request):
                    return  # the client closed, or timed out between requests
                self._busy.add(task)
                try:
                    await self._exchange(conn, event, reader, writer)
                finally:
                    self._busy.discard(task)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE or self._closing:
                    return  # MUST_CLOSE (HTTP/1.0, Connection: close), an error, or shutting down
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, _Refused) as exc:
            status = exc.status if isinstance(exc, _Refused) else (exc.error_status_hint or 400)
            with contextlib.suppress(h11.LocalProtocolError, OSError, TimeoutError):
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(conn, writer, _plain(status, {"Connection": "close"}), head_only=False)
                    await _linger(reader, writer)
        except (OSError, TimeoutError):
            # the peer went away, or stalled mid-request or mid-answer: nothing more is owed,
            # and closing would wait for unsent bytes a stalled reader never takes
            writer.transport.abort()
        except asyncio.CancelledError:
            writer.transport.abort()  # aclose() ends it; nothing awaits this task's outcome
        finally:
            self._connections.discard(task)
            writer.close()
            try:  # a client that reads nothing more would hold a graceful close for ever
                async with asyncio.timeout(LINGER_TIMEOUT):
                    await writer.wait_closed()
            except (OSError, TimeoutError, asyncio.CancelledError):
                writer.transport.abort()

    async def _next_event(self, conn: h11.Connection, reader: asyncio.StreamReader,
                          idle_timeout: float) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        """The next event, reading as needed; ``ConnectionClosed`` at EOF or an idle timeout."""
        timeout = idle_timeout if conn.their_state is h11.IDLE else READ_TIMEOUT
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                async with asyncio.timeout(timeout):
                    data = await reader.read(_READ_SIZE)
            except TimeoutError:
                if conn.their_state is h11.IDLE:
                    return h11.ConnectionClosed()
                raise
            conn.receive_data(data)  # b"" at EOF: h11 then says ConnectionClosed (or raises mid-request)
            timeout = READ_TIMEOUT

    async def _exchange(self, conn: h11.Connection, event: h11.Request,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read the rest of the request (its body, dropped), answer it."""
        received = 0
        while True:
            more = await self._next_event(conn, reader, READ_TIMEOUT)
            if isinstance(more, h11.EndOfMessage):
                break
            if isinstance(more, h11.Data):
                received += len(more.data)
                if received > MAX_BODY:
                    raise _Refused(413)
            elif isinstance(more, h11.ConnectionClosed):
                return
        method = event.method.decode("ascii", "replace")
        target = event.target
        path = unquote(target.partition(b"?")[0].decode("latin-1"))
        request = Request(method, path, target, tuple((k, v) for k, v in event.headers))
        response = await self._respond(request)
        try:
            if response.compress:
                await _encode(response, request)
            await self._send(conn, writer, response, head_only=method == "HEAD")
        finally:
            if response.after is not None:
                response.after()

    async def _respond(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            handler = next((h for prefix, h in self._prefixes.items() if request.path.startswith(prefix)), None)
        if handler is None:
            return _plain(404)
        if request.method not in ("GET", "HEAD"):
            return _plain(405, {"Allow": "GET, HEAD"})
        try:
            return await handler(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return _plain(500)

    @staticmethod
    async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, response: Response, *,
                    head_only: bool) -> None:
        chunks = response.body if isinstance(response.body, list) else [response.body]
        headers = [(b"Content-Length", str(sum(len(c) for c in chunks)).encode())]
        if response.content_type is not None:
            headers.append((b"Content-Type", response.content_type.encode()))
        headers += [(name.encode(), value.encode()) for name, value in response.headers.items()]
        writer.write(conn.send(h11.Response(status_code=response.status, headers=headers,
                                            reason=HTTPStatus(response.status).phrase.encode())) or b"")
        if not head_only:
            chunks.reverse()  # popped from the end: each piece is dropped once written
            while chunks:
                writer.write(conn.send(h11.Data(data=chunks.pop())) or b"")
                await _drain(writer)
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await _drain(writer)


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait until the client takes what was written (TimeoutError if it stalls)."""
    async with asyncio.timeout(READ_TIMEOUT):
        await writer.drain()
