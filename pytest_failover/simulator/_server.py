"""The loopback servers: one asyncio loop in a daemon thread runs every listener.

Each fake domain has an http and an https listener on ``127.0.0.1:<ephemeral>``.
The https listener picks its certificate per handshake from the SNI callback,
so a TLS fault is one attribute read, not a restart. Two shared sockets serve
the connect faults: a bound port that never listens (the kernel refuses) and a
listener whose accept queue is kept full (the kernel drops the SYN, the
client's connect times out).

HTTP/1.1 is spoken with ``h11``. Connections are tracked per domain so that a
fault change can drop them (``drop``): idle and held ones at once, busy ones
after their current answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
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

    def strike(self, stage: Stage) -> tuple[Fault | None, random.Random]:
        """The fault acting at ``stage`` now, and the domain's random source."""

    def tls_context(self, kind: Certificate) -> ssl.SSLContext: ...

    def record(self, request: RecordedRequest) -> None: ...


class _Connection:
    """One accepted connection. ``busy`` while a handler writes its answer: a fault change
    then lets the answer finish and closes afterwards (``closing``); otherwise it closes now."""

    __slots__ = ("busy", "closing", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.busy = False
        self.closing = False


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
        """Close ``host``'s connections so pooled ones cannot hide a new fault; waits until done."""

        async def drop() -> None:
            for conn in list(self._connections.get(host, ())):
                conn.closing = True
                if not conn.busy:
                    conn.writer.close()

        if _in_thread(self._thread):
            self._loop.create_task(drop())
        else:
            self._run(drop)

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for conns in self._connections.values():
                for conn in conns:
                    conn.writer.close()
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
                conn.busy = True
                keep_open = await self._respond(site, http, request, reader, writer, conn)
                conn.busy = False
                if not keep_open or conn.closing or http.our_state is not h11.DONE:
                    return
                if http.their_state is not h11.DONE:
                    return
                http.start_next_cycle()
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
        fault, rng = site.strike("respond")
        plan: Answer = on_respond(fault, rng)
        request = dataclasses.replace(request, fault=fault or Healthy())
        site.record(request)

        if plan.hold or plan.delay:
            limit = HOLD_LIMIT if plan.hold else plan.delay
            conn.busy = False  # nothing is being written: a fault change may cut the wait
            hung_up = await _wait_for_hang_up(reader, http, limit)
            conn.busy = True
            if plan.hold or hung_up:
                return False
        if plan.status is not None:
            status, headers, body = plan.status.code, list(plan.status.headers), plan.status.body
        else:
            status, headers, body = await _run_handler(site, request, writer)
        head, body = _frame(request.method, status, headers, body, close=conn.closing)
        if plan.reset:
            writer.write(http.send(head) + body[: len(body) // 2])
            await writer.drain()
            await asyncio.sleep(0.005)  # let the head leave before the reset
            _reset(writer)
            return False
        writer.write(
            http.send(head) + http.send(h11.Data(data=body)) + http.send(h11.EndOfMessage())
        )
        await writer.drain()
        return True


async def _run_handler(
    site: Site, request: RecordedRequest, writer: asyncio.StreamWriter
) -> tuple[int, list[tuple[str, str]], bytes]:
    try:
        return await answer(site.handler, request, writer.get_extra_info("sockname")[:2])
    except Exception as exc:
        log.exception("handler of fake domain %s raised", site.host)
        return 500, [], f"handler raised {exc!r}".encode()


def _frame(
    method: str, status: int, headers: list[tuple[str, str]], body: bytes, *, close: bool
) -> tuple[h11.Response, bytes]:
    """The response head and the body bytes to send, with the framing headers HTTP/1.1 wants."""
    headers = list(headers)
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
    return h11.Response(status_code=status, headers=headers), body


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
