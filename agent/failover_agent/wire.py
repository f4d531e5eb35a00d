"""The probes' wire: one HTTP/1.1 exchange on one fresh asyncio connection, spoken by h11.

Every byte the agent's probes send goes through this module, in five steps::

    build    the request as an h11 event (validated once, then remembered)
    dns      resolve the name (an IP literal needs no lookup)
    connect  one TCP connection to the first address
    tls      the handshake with the shared SSLContext (https only)
    http     write the request (``Connection: close``), read the answer to its end

:func:`exchange` runs them for the pinned domain probe (:mod:`failover_agent.checks.domain`)
and for :class:`ProbeTransport`, the httpx transport that the pool probe puts under the real
failover client; :func:`peer_certificates` runs ``dns``, ``connect`` and ``tls`` for the
readiness check. A :class:`Progress` says which step an exchange is in and when each step
ended, so a caller can time the phases and tell where a failure happened.

Errors: :data:`EXCEPTION_MAP` is the one table that turns what asyncio, ssl, socket, h11 and
zlib raise into the httpx exception httpcore raises for the same failure, with the original
as ``__cause__``; the library's classifier then names the ``error.type`` from it
(``dns_error``, ``connection_refused``, ``server_certificate_invalid``, ...). The table is
keyed by the step and read top to bottom, most specific first, like httpx's
``map_httpcore_exceptions``. An exception it does not list propagates unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import ipaddress
import socket
import ssl
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any, NoReturn

import h11
import httpx

__all__ = [
    "CACHE_SIZE",
    "EXCEPTION_MAP",
    "Answer",
    "ProbeTransport",
    "Progress",
    "Step",
    "certificate_chain",
    "decoded",
    "exchange",
    "map_exceptions",
    "peer_certificates",
    "request_event",
    "resolve",
    "ssl_context",
]

CACHE_SIZE = 10_000
"""Entries each memo of the probes keeps at most (request heads, parsed domains, IP
literals). A probe repeats the same few values, so a hit is the rule; at 1,000
domains each memo holds about 1,000, and reloads to other targets cannot grow it without end."""

MAX_HEAD = 64 * 1024
"""Largest response head accepted (h11's limit on an incomplete event): a head that never
ends is refused once it passes this, not buffered until the timeout."""


class Step(enum.Enum):
    """Where an exchange is; the value names the probe's phase."""

    BUILD = "build"
    RESOLVE = "dns"
    CONNECT = "connect"
    TLS = "tls"
    HTTP = "http"
    DECODE = "decode"


ExceptionMap = tuple[tuple[Step, type[Exception], type[httpx.RequestError]], ...]

EXCEPTION_MAP: ExceptionMap = (
    (Step.BUILD, h11.LocalProtocolError, httpx.LocalProtocolError),  # a request h11 will not write
    (Step.RESOLVE, TimeoutError, httpx.ConnectTimeout),
    (Step.RESOLVE, socket.gaierror, httpx.ConnectError),  # NXDOMAIN, no address: dns_error
    (Step.RESOLVE, OSError, httpx.ConnectError),
    (Step.CONNECT, TimeoutError, httpx.ConnectTimeout),
    (Step.CONNECT, OSError, httpx.ConnectError),  # refused, unreachable, reset
    (Step.TLS, TimeoutError, httpx.ConnectTimeout),
    (Step.TLS, ssl.SSLError, httpx.ConnectError),  # certificate, protocol, incomplete handshake
    (Step.TLS, OSError, httpx.ConnectError),  # the peer closed or reset during the handshake
    (Step.HTTP, TimeoutError, httpx.ReadTimeout),
    (Step.HTTP, h11.RemoteProtocolError, httpx.RemoteProtocolError),  # garbage, short body, silence
    (Step.HTTP, OSError, httpx.ReadError),  # reset while the answer was read
    (Step.DECODE, zlib.error, httpx.DecodingError),  # a bad gzip or deflate body
)
"""(step, what is raised, what it becomes); per step the first entry that matches wins.
``TimeoutError`` and ``ssl.SSLError`` are ``OSError`` subclasses, hence listed before it."""


def _reraise(exc: Exception, progress: Progress, request: httpx.Request | None) -> NoReturn:
    """Raise ``exc`` as the httpx exception :data:`EXCEPTION_MAP` names for ``progress.step``
    (``exc`` as its cause), or ``exc`` itself when the map has no entry for it."""
    step = progress.step
    for at, source, target in EXCEPTION_MAP:
        if at is step and isinstance(exc, source):
            message = str(exc) or f"{type(exc).__name__} during {step.value}"
            raise target(message, request=request) from exc
    raise exc


@contextlib.contextmanager
def map_exceptions(progress: Progress, request: httpx.Request | None = None) -> Iterator[None]:
    """Raise what the block raises as the httpx exception :data:`EXCEPTION_MAP` names for
    ``progress.step`` (cause attached); anything it does not list propagates unchanged."""
    try:
        yield
    except Exception as exc:
        _reraise(exc, progress, request)


class Progress:
    """The step an exchange is in and when (``perf_counter``) each step ended; 0.0 for a step
    not reached. ``resolved`` is set when resolution ends, also when it failed."""

    __slots__ = ("connected", "end", "head", "resolved", "secured", "sent", "start", "step")

    def __init__(self) -> None:
        self.step = Step.BUILD
        self.start = self.resolved = self.connected = self.secured = 0.0
        self.sent = self.head = self.end = 0.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A response read to its end (the body as received: see :func:`decoded`)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    encoding: str  # the Content-Encoding, lower-cased; "" when none


def ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The verifying TLS context every probe shares (built once: it costs ~30 ms)."""
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return httpx.create_ssl_context(trust_env=True)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _ip_literal(host: str) -> str | None:
    """``host`` as an IP address string, or None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


async def resolve(host: str, port: int) -> tuple[str, int]:
    """The first address and port ``getaddrinfo`` returns for ``host`` (raises socket.gaierror).

    An IP literal is its own address: no lookup (and no executor thread), as in
    blackbox_exporter."""
    literal = _ip_literal(host)
    if literal is not None:
        return literal, port
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"no address for {host}")
    address = infos[0][4]
    return str(address[0]), int(address[1])


def request_event(method: str, target: bytes, headers: tuple[tuple[bytes, bytes], ...]) -> h11.Request:
    """The request as an h11 event (raises h11.LocalProtocolError). Built per probe: 6 us of
    h11's validation, where a memo of one event per domain held 0.85 MiB at 1,000 domains."""
    return h11.Request(method=method, target=target, headers=list(headers))


def _completed(future: asyncio.Future[None]) -> bool:
    """The answer was read in full (not failed, not given up on)."""
    return future.done() and not future.cancelled() and future.exception() is None


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


_CLOSED_EARLY = "Server disconnected without sending a response."


class _Exchange(asyncio.Protocol):
    """One request and its response on one connection. h11 writes the request and parses the
    response; this protocol feeds it the bytes received and notes when head and end arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request: h11.Request, body: bytes,
                 progress: Progress) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        # A connection can die after the probe gave up on it (timeout, failed handshake):
        # the error is then nobody's, and must not be logged as "never retrieved".
        self.done.add_done_callback(_retrieve)
        self.progress = progress
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        http = self.http
        out = http.send(request) or b""  # h11 checks the framing: h11.LocalProtocolError
        if body:
            out += http.send(h11.Data(data=body)) or b""
        self.request_bytes = out + (http.send(h11.EndOfMessage()) or b"")
        self.status = 0
        self.reason = b""
        self.encoding = ""
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.body = b""

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        self.http.receive_data(data)
        self._read_events()

    def eof_received(self) -> bool | None:
        self._at_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done.done():
            return
        if exc is not None:
            self.done.set_exception(exc)
        else:
            self._at_eof()

    def _at_eof(self) -> None:
        if self.done.done():
            return
        if not self.status and not self.http.trailing_data[0]:
            self.done.set_exception(h11.RemoteProtocolError(_CLOSED_EARLY))
            return
        self.http.receive_data(b"")
        self._read_events()

    def _read_events(self) -> None:
        http = self.http
        try:
            while True:
                event = http.next_event()
                if isinstance(event, h11.Data):
                    self.chunks.append(event.data)
                elif isinstance(event, h11.Response):
                    self._head(event)
                elif isinstance(event, h11.EndOfMessage):
                    self.body = b"".join(self.chunks)
                    self.progress.end = perf_counter()
                    self.done.set_result(None)
                    return
                elif event is h11.NEED_DATA:
                    return
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    raise h11.RemoteProtocolError(_CLOSED_EARLY)
                # h11.InformationalResponse (1xx): the final answer follows
        except h11.RemoteProtocolError as exc:
            self.done.set_exception(exc)

    def _head(self, event: h11.Response) -> None:
        self.progress.head = perf_counter()
        self.status = event.status_code
        self.reason = event.reason
        self.headers = event.headers.raw_items()
        for name, value in event.headers:  # names lower-cased by h11
            if name == b"content-encoding":
                self.encoding = value.strip().lower().decode("latin-1")


async def _open(loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, progress: Progress,
                scheme: str, host: str, port: int, server_hostname: str,
                context: ssl.SSLContext) -> asyncio.Transport:
    """Steps dns, connect and tls: the connection, ready for the request. On failure nothing
    is left open."""
    progress.step = Step.RESOLVE
    try:
        address, port = await resolve(host, port)
    finally:
        progress.resolved = perf_counter()
    progress.step = Step.CONNECT
    transport, _ = await loop.create_connection(lambda: protocol, address, port)
    progress.connected = perf_counter()
    if scheme != "https":
        return transport
    progress.step = Step.TLS
    try:
        tls = await loop.start_tls(transport, protocol, context, server_hostname=server_hostname)
        if tls is None:  # asyncio's signature allows it; its code never does
            raise ssl.SSLError("TLS handshake did not complete")
    except BaseException:
        transport.abort()
        raise
    progress.secured = perf_counter()
    return tls


def _until(loop: asyncio.AbstractEventLoop, timeout: float | None, deadline: float | None) -> float | None:
    """The loop time a step must end by: ``timeout`` from now, or ``deadline``, whichever first."""
    if timeout is None:
        return deadline
    at = loop.time() + timeout
    return at if deadline is None else min(at, deadline)


async def exchange(
    method: str,
    target: bytes,
    headers: tuple[tuple[bytes, bytes], ...],
    body: bytes = b"",
    *,
    scheme: str,
    host: str,
    port: int,
    server_hostname: str,
    context: ssl.SSLContext,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
    request: httpx.Request | None = None,
) -> Answer:
    """One request on a fresh connection to ``host:port``; the answer read to its end.

    ``headers`` are sent as given (the caller sets ``Host``, ``Connection: close`` and the
    framing). ``connect_timeout`` bounds dns + connect + tls, ``read_timeout`` the rest and
    ``deadline`` (loop time) all of it. Errors are mapped by :func:`map_exceptions`
    (``request`` is attached to them); ``progress`` keeps where the exchange got to.
    """
    progress = Progress() if progress is None else progress
    progress.start = perf_counter()
    loop = asyncio.get_running_loop()
    transport: asyncio.Transport | None = None
    try:  # map_exceptions() inlined: this runs for every probe
        protocol = _Exchange(loop, request_event(method, target, headers), body, progress)
        try:
            async with asyncio.timeout_at(_until(loop, connect_timeout, deadline)) as timeout:
                transport = await _open(loop, protocol, progress, scheme, host, port,
                                        server_hostname, context)
                progress.step = Step.HTTP
                progress.sent = perf_counter()
                transport.write(protocol.request_bytes)
                if connect_timeout is not None or read_timeout is not None:  # else: one deadline
                    timeout.reschedule(_until(loop, read_timeout, deadline))
                await protocol.done
        finally:
            if transport is not None:
                if _completed(protocol.done):
                    transport.close()
                else:
                    transport.abort()
            if not protocol.done.done():
                protocol.done.cancel()
    except Exception as exc:
        _reraise(exc, progress, request)
    return Answer(protocol.status, protocol.reason, protocol.headers, protocol.body, protocol.encoding)


def decoded(answer: Answer, progress: Progress) -> bytes:
    """The body with its gzip or deflate encoding undone (raises httpx.DecodingError)."""
    progress.step = Step.DECODE
    body, encoding = answer.body, answer.encoding
    with map_exceptions(progress):
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:  # a raw deflate stream, without the zlib header
                return zlib.decompress(body, -zlib.MAX_WBITS)
    return body


def certificate_chain(ssl_object: Any, verified: bool) -> list[bytes]:
    """The DER certificates of the connection, leaf first: the verified chain, or the
    unverified one the server sent when ``verified`` is false."""
    name = "get_verified_chain" if verified else "get_unverified_chain"
    method = getattr(ssl_object, name, None)  # public from Python 3.13, as DER bytes
    if method is not None:
        ders = [bytes(der) for der in method() or ()]
    else:
        # Before Python 3.13 the chain is only on the C object behind the SSLObject: the
        # private `_sslobj`. Without it only the leaf is known (getpeercert below), and an
        # intermediate that expires before the leaf would go unseen. Its certificates'
        # public_bytes() gives PEM, which the public PEM_cert_to_DER_cert turns into DER.
        method = getattr(getattr(ssl_object, "_sslobj", None), name, None)
        try:
            ders = [ssl.PEM_cert_to_DER_cert(cert.public_bytes()) for cert in method() or ()] if method else []
        except (AttributeError, TypeError, ValueError):  # an interpreter whose private object differs
            ders = []
    if not ders:
        leaf = ssl_object.getpeercert(binary_form=True)
        ders = [leaf] if leaf else []
    return ders


async def peer_certificates(
    host: str,
    port: int,
    *,
    server_hostname: str,
    context: ssl.SSLContext,
    deadline: float | None = None,
) -> list[bytes]:
    """The DER certificates ``host:port`` presents in a TLS handshake, leaf first: the
    verified chain, or with a non-verifying ``context`` the chain as sent. Errors are
    mapped as for :func:`exchange` (an invalid certificate: ``httpx.ConnectError`` caused
    by ``ssl.SSLCertVerificationError``)."""
    progress = Progress()
    progress.start = perf_counter()
    loop = asyncio.get_running_loop()
    with map_exceptions(progress):
        async with asyncio.timeout_at(deadline):
            transport = await _open(loop, asyncio.Protocol(), progress, "https", host, port,
                                    server_hostname, context)
        try:
            ders = certificate_chain(transport.get_extra_info("ssl_object"), context.verify_mode != ssl.CERT_NONE)
            if not ders:
                raise ssl.SSLError("the server sent no certificate")
            return ders
        finally:
            transport.abort()  # nothing was sent: no close_notify to wait for


# request headers h11 writes from the message itself, or that the transport sets
_FRAMING = frozenset({b"connection", b"transfer-encoding", b"content-length"})
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class ProbeTransport(httpx.AsyncBaseTransport):
    """An httpx transport made of the pinned probe's exchange: one fresh connection per
    request, HTTP/1.1, ``Connection: close``.

    The pool probe puts it under the real ``AsyncFailoverTransport``, so the failover logic,
    policy, breakers and telemetry are the library's own, while each attempt costs what a
    pinned probe costs instead of a pass through httpcore's connection pool. Timeouts come
    from the request's ``timeout`` extension: ``connect`` bounds resolution, connect and TLS
    handshake; ``read`` the whole answer. Errors are the httpx exceptions httpcore would
    raise, with the cause attached (:data:`EXCEPTION_MAP`).
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        host = url.host
        timeouts = request.extensions.get("timeout") or {}
        try:
            body = request.content  # httpx has read a plain body already: no pass over the stream
        except httpx.RequestNotRead:
            stream = request.stream
            if isinstance(stream, httpx.AsyncByteStream):
                body = b"".join([chunk async for chunk in stream])
            else:
                body = b"".join(stream)
        headers = [(name, value) for name, value in request.headers.raw if name.lower() not in _FRAMING]
        if body or request.method in _WITH_BODY:
            headers.append((b"Content-Length", str(len(body)).encode()))
        headers.append((b"Connection", b"close"))
        answer = await exchange(
            request.method, url.raw_path, tuple(headers), body,
            scheme=scheme, host=host, port=url.port or (443 if scheme == "https" else 80),
            server_hostname=request.extensions.get("sni_hostname") or host, context=self._context,
            connect_timeout=timeouts.get("connect"), read_timeout=timeouts.get("read"),
            request=request,
        )
        return httpx.Response(
            answer.status,
            headers=answer.headers,
            stream=httpx.ByteStream(answer.body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason},
            request=request,
        )
