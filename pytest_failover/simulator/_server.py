"""The loopback servers: one asyncio loop in a daemon thread runs every listener.

Each fake domain has an http and an https listener on ``127.0.0.1:<ephemeral>``.
The https listener picks its certificate per handshake from the SNI callback,
so a TLS fault is one attribute read, not a restart. Two shared sockets serve
the connect faults: a bound port that never listens (the kernel refuses) and a
listener whose accept queue is kept full (the kernel drops the SYN, the
client's connect times out).

HTTP/1.1 is spoken with ``h11``. Connections are tracked per domain. A fault that
acts before ``respond`` (see ``_faults``) must not be hidden by a pooled
connection: setting one drops the domain's connections (``drop``: idle and
waiting ones at once, busy ones after their current answer), and while it is
set every answer closes its connection. Faults acting at ``respond`` reach
pooled connections anyway, so they keep them open and only cut requests held
by the previous fault (``release``). Both are done from the caller's thread by
shutting down a duplicate of the connection's socket: the client sees the end
of stream before ``fail()`` returns, without a round trip to the server loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal, Protocol, TypeVar

import h11

from ..faults import Fault, Healthy
from ._faults import HOLD_LIMIT, Answer, Certificate, on_handshake, on_respond
from ._handlers import Handler, answer
from ._record import RecordedRequest, Stage

__all__ = ["Servers", "Site"]

log = logging.getLogger("pytest_failover.simulator")
T = TypeVar("T")
Scheme = Literal["http", "https"]


class Site(Protocol):
    """What the servers need from a fake domain."""

    @property
    def host(self) -> str: ...

    @property
    def handler(self) -> Handler: ...

    @property
    def generation(self) -> int:
        """Changes whenever the domain's fault is set or reset."""

    def strike(self, stage: Stage) -> tuple[Fault | None, random.Random]:
        """The fault acting at ``stage`` now, and the domain's random source."""

    def serves(self) -> bool:
        """Whether a request may be answered (``False`` once the domain is unregistered)."""

    def keeps_alive(self) -> bool:
        """Whether a connection may serve another request after this answer."""

    def tls_context(self, kind: Certificate) -> ssl.SSLContext: ...

    def record(self, request: RecordedRequest) -> None: ...


class _Connection:
    """One accepted connection. ``busy`` while a handler writes its answer: a drop then
    lets the answer finish and closes afterwards (``closing``); otherwise it hangs up now.
    ``waiting`` while a fault holds or delays the answer (``release`` cuts those).

    ``hang_up`` may be called from any thread: it shuts down the connection's own
    duplicate of the socket (so a closed and reused descriptor is never touched),
    which sends FIN at once; the server loop then reads the end of stream and
    closes the connection itself.
    """

    __slots__ = ("_lock", "_sock", "busy", "closing", "waiting")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.busy = False
        self.closing = False
        self.waiting = False
        self._lock = threading.Lock()
        transport_socket = writer.get_extra_info("socket")
        self._sock: socket.socket | None = None
        if transport_socket is not None:
            with contextlib.suppress(OSError):
                self._sock = transport_socket.dup()

    def hang_up(self) -> None:
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)

    def forget(self) -> None:
        """Close the duplicate (the server loop closes the connection itself)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class Servers:
    """Every listener of one ``FakeDomains``; safe to call from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pytest-failover-servers", daemon=True
        )
        self._thread.start()
        self._servers: list[asyncio.Server] = []
        self._connections: dict[str, set[_Connection]] = {}
        # connect faults
        self._closed = socket.socket()
        self._closed.bind(("127.0.0.1", 0))
        self.closed_port: int = self._closed.getsockname()[1]
        self._blackhole, self._fillers = _full_listener()
        self.blackhole_port: int = self._blackhole.getsockname()[1]

    # -- thread plumbing

    def _run(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float = 10.0) -> T:
        if _in_thread(self._thread):  # called from a handler: we are the loop
            raise RuntimeError("this call must not be made from inside the server loop")
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout)

    # -- listeners

    def listen(self, site: Site) -> tuple[int, int]:
        """Start ``site``'s http and https listeners; returns ``(http_port, https_port)``."""

        def pick_certificate(
            sslobj: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext
        ) -> None:
            fault, _ = site.strike("handshake")
            sslobj.context = site.tls_context(on_handshake(fault))

        dispatcher = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        site.tls_context(Certificate.GOOD)  # made now, so the first handshake is not slower
        dispatcher.sni_callback = pick_certificate

        def serve(
            scheme: Scheme,
        ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]:
            return lambda reader, writer: self._serve(site, scheme, reader, writer)

        async def start() -> tuple[int, int]:
            ports = []
            schemes: tuple[tuple[Scheme, ssl.SSLContext | None], ...] = (
                ("http", None),
                ("https", dispatcher),
            )
            for scheme, tls in schemes:
                server = await asyncio.start_server(
                    serve(scheme),
                    host="127.0.0.1",
                    port=0,
                    ssl=tls,
                    ssl_handshake_timeout=10.0 if tls else None,
                    backlog=128,
                )
                self._servers.append(server)
                ports.append(server.sockets[0].getsockname()[1])
            self._connections.setdefault(site.host, set())
            return ports[0], ports[1]

        return self._run(start)

    def drop(self, host: str) -> None:
        """Close ``host``'s connections so pooled ones cannot hide a new fault.

        Idle and waiting connections are shut down before this returns (their clients
        see the end of stream); busy ones close after their current answer. A client
        may already hold a whole answer while the server loop has not yet marked its
        connection idle; only then (a busy connection seen) is there a round trip to
        the loop, which settles such a connection before this returns.
        """
        busy = False
        for conn in list(self._connections.get(host, ())):  # list(): one atomic copy
            conn.closing = True
            if conn.busy:
                busy = True
            else:
                conn.hang_up()
        if not busy or _in_thread(self._thread):
            return

        async def settle() -> None:
            for conn in list(self._connections.get(host, ())):
                if not conn.busy:
                    conn.hang_up()

        self._run(settle)

    def release(self, host: str) -> None:
        """Cut ``host``'s requests that a fault holds or delays; pooled connections stay."""
        for conn in list(self._connections.get(host, ())):
            if conn.waiting:
                conn.hang_up()

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for conns in self._connections.values():
                for conn in list(conns):
                    conn.hang_up()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

        with contextlib.suppress(Exception):
            self._run(stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()
            for conns in self._connections.values():
                for conn in list(conns):  # tasks that never reached their ``finally``
                    conn.forget()
        for sock in (self._closed, self._blackhole, *self._fillers):
            sock.close()

    # -- one connection

    async def _serve(
        self, site: Site, scheme: Scheme, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        conn = _Connection(writer)
        conns = self._connections[site.host]
        conns.add(conn)
        http = h11.Connection(h11.SERVER)
        try:
            while not conn.closing:
                request = await _read_request(http, reader, writer, site.host, scheme)
                if request is None:
                    return
                if not site.serves():  # a pooled connection outlived its domain: hang up
                    return
                conn.busy = True
                keep_open = await self._respond(site, http, request, reader, writer, conn)
                conn.busy = False
                if not keep_open or conn.closing:
                    return
                http = _next_cycle(http)
        except h11.RemoteProtocolError as exc:  # not HTTP/1.1: say so, like a real server
            with contextlib.suppress(h11.LocalProtocolError, ConnectionError, OSError):
                writer.write(
                    http.send(
                        h11.Response(
                            status_code=exc.error_status_hint,
                            headers=[("content-length", "0"), ("connection", "close")],
                        )
                    )
                )
                await writer.drain()
        except (ConnectionError, OSError, h11.LocalProtocolError):
            return
        finally:
            conns.discard(conn)
            conn.forget()
            writer.close()

    async def _respond(
        self,
        site: Site,
        http: h11.Connection,
        request: RecordedRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: _Connection,
    ) -> bool:
        """Answer one request as its fault says; returns whether the connection may be reused."""
        generation = site.generation
        fault, rng = site.strike("respond")
        plan: Answer = on_respond(fault, rng)
        request = dataclasses.replace(request, fault=fault or Healthy())
        site.record(request)

        if plan.hold or plan.delay:
            limit = HOLD_LIMIT if plan.hold else plan.delay
            conn.busy = False  # nothing is being written: a fault change may cut the wait
            conn.waiting = True
            if site.generation != generation:  # changed before ``release`` could see us
                hung_up = True
            else:
                hung_up = await _wait_for_hang_up(reader, http, limit)
            conn.waiting = False
            conn.busy = True
            if plan.hold or hung_up:
                return False
        if plan.status is not None:
            status, headers, body = plan.status.code, list(plan.status.headers), plan.status.body
        else:
            status, headers, body = await _run_handler(site, request, writer)
        close = (
            conn.closing
            or not site.keeps_alive()
            or not _client_keeps_alive(http, request)
            or _asks_to_close(headers)  # a handler's own ``Connection: close`` is honoured
        )
        head, body = _frame(request.method, status, headers, body, close=close)
        if plan.reset:
            writer.write(head + body[: len(body) // 2])
            await writer.drain()
            await asyncio.sleep(0.005)  # let the head leave before the reset
            _reset(writer)
            return False
        writer.write(head + body)
        await writer.drain()
        return not close


async def _run_handler(
    site: Site, request: RecordedRequest, writer: asyncio.StreamWriter
) -> tuple[int, list[tuple[str, str]], bytes]:
    try:
        return await answer(site.handler, request, writer.get_extra_info("sockname")[:2])
    except Exception as exc:
        log.exception("handler of fake domain %s raised", site.host)
        return 500, [], f"handler raised {exc!r}".encode()


def _next_cycle(http: h11.Connection) -> h11.Connection:
    """A parser for the connection's next request, holding what already arrived of it.

    Answers are written by ``_frame`` rather than through h11 (h11's writer costs about
    0.1 ms per answer); h11 reads requests, one ``Connection`` per request.
    """
    data, closed = http.trailing_data
    fresh = h11.Connection(h11.SERVER)
    if data:
        fresh.receive_data(data)
    if closed:
        fresh.receive_data(b"")
    return fresh


def _client_keeps_alive(http: h11.Connection, request: RecordedRequest) -> bool:
    """What h11 would decide: HTTP/1.1 without ``Connection: close``."""
    if http.their_http_version != b"1.1":
        return False
    tokens = request.headers.get("connection", "").lower().split(",")
    return "close" not in {token.strip() for token in tokens}


def _asks_to_close(headers: list[tuple[str, str]]) -> bool:
    return any(
        name.lower() == "connection" and "close" in {t.strip() for t in value.lower().split(",")}
        for name, value in headers
    )


_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_BAD_VALUE = re.compile(r"[\r\n\x00]")


def _frame(
    method: str, status: int, headers: list[tuple[str, str]], body: bytes, *, close: bool
) -> tuple[bytes, bytes]:
    """The response head and the body bytes to send, with the framing headers HTTP/1.1 wants.

    Header names and values are checked as h11 would (``LocalProtocolError``, which
    closes the connection without an answer); the framing headers are ours.
    """
    headers = [
        (name, value)
        for name, value in headers
        if name.lower() not in ("content-length", "transfer-encoding", "connection")
    ]
    if status in (204, 304) or status < 200:
        body = b""  # these never carry a body
    else:
        if body and "content-type" not in {k.lower() for k, _ in headers}:
            headers.append(("content-type", _guess_type(body)))
        headers.append(("content-length", str(len(body))))
    if method == "HEAD":
        body = b""  # the length of the GET answer is announced, nothing is sent
    if close:
        headers.append(("connection", "close"))
    if not 200 <= status <= 999:  # as h11's Response: 1xx is not a final answer
        raise h11.LocalProtocolError(f"status code {status} is not a final HTTP status")
    lines = [f"HTTP/1.1 {status} \r\n"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value) or value != value.strip():
            raise h11.LocalProtocolError(f"illegal header {name!r}: {value!r}")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    try:
        head = "".join(lines).encode("ascii")
    except UnicodeEncodeError as exc:
        raise h11.LocalProtocolError(f"a header is not ASCII: {exc}") from None
    return head, body


async def _read_request(
    http: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    scheme: Scheme,
) -> RecordedRequest | None:
    """Read one whole request (head and body); ``None`` when the client hung up between requests.

    The request is recorded as ``Healthy()``; ``_respond`` fills in the fault it really got.
    """
    head: Any = None
    body = bytearray()
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            if http.they_are_waiting_for_100_continue:
                writer.write(http.send(h11.InformationalResponse(status_code=100, headers=[])))
            http.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body.extend(event.data)
        elif isinstance(event, h11.EndOfMessage):
            headers: dict[str, str] = {}
            for name, value in head.headers:
                key, text = name.decode("latin-1").lower(), value.decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            return RecordedRequest(
                host=host,
                scheme=scheme,
                method=head.method.decode("ascii"),
                path=head.target.decode("latin-1"),
                headers=headers,
                body=bytes(body),
                fault=Healthy(),
                time=time.time(),
            )
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def _wait_for_hang_up(
    reader: asyncio.StreamReader, http: h11.Connection, limit: float
) -> bool:
    """Wait ``limit`` seconds; return early (``True``) if the client or the simulator hangs up.

    Hanging up shows as end-of-stream on ``reader``: the client closing, or ``drop``
    closing the transport.
    """

    async def until_end_of_stream() -> None:
        while data := await reader.read(65536):
            http.receive_data(data)  # a pipelined request: keep it for later

    try:
        await asyncio.wait_for(until_end_of_stream(), limit)
    except asyncio.TimeoutError:
        return False
    return True


def _guess_type(body: bytes) -> str:
    try:
        json.loads(body)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort with SO_LINGER 0: the kernel sends RST instead of FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _full_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A listener whose accept queue is full, so new SYNs are dropped (Linux: backlog 0 + 1)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers: list[socket.socket] = []
    for _ in range(8):  # bounded: Linux needs one filler, other kernels may want a few
        filler = socket.socket()
        filler.settimeout(0.02)
        try:
            filler.connect(listener.getsockname())
        except OSError:  # timed out: the queue is full
            filler.close()
            break
        fillers.append(filler)
    return listener, fillers


def _in_thread(thread: threading.Thread) -> bool:
    return threading.current_thread() is thread


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Expected noise (failed handshakes, resets) stays at debug level."""
    exc = context.get("exception")
    if isinstance(exc, ssl.SSLError | ConnectionError | OSError | asyncio.CancelledError):
        log.debug("fake server: %s", context.get("message"), exc_info=exc)
        return
    loop.default_exception_handler(context)
