"""The loopback servers: blocking sockets, a thread per listener and per connection.

Each fake domain has an http and an https listener on ``127.0.0.1:<ephemeral>``,
each with a thread that accepts. Every accepted connection gets a thread of its
own that does plain blocking I/O: the TLS handshake, reading a request
(``_wire``), writing the answer. A blocking call releases the GIL while it
waits, and between two system calls a request costs only a few Python calls.
(asyncio served them before; with its TLS layer, written in Python, a request
took about 0.25 ms more of the server's CPU time.)

The https listener picks its certificate per handshake from the SNI callback, so
a TLS fault is one attribute read, not a restart. Two shared sockets serve the
connect faults: a bound port that never listens (the kernel refuses) and a
listener whose accept queue is kept full (the kernel drops the SYN, the client's
connect times out).

Connections are tracked per domain. A fault that acts before ``respond`` (see
``_faults``) must not be hidden by a pooled connection: setting one drops the
domain's connections (``drop``), and while it is set every answer closes its
connection. Faults acting at ``respond`` reach pooled connections anyway, so they
keep them open and only cut requests held by the previous fault (``release``).
Both are done from the caller's thread by shutting the connection's socket down:
the client sees the end of stream before ``fail()`` returns. An answer being made
holds its connection's lock, so a drop lets it out first (see ``_Connection``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal, Protocol

import h11

from ..faults import Fault, Healthy
from ._faults import HOLD_LIMIT, Answer, Certificate, on_handshake, on_respond
from ._handlers import CoroutineRunner, Handler, answer
from ._record import RecordedRequest, Stage
from ._wire import Request, RequestReader, asks_to_close, frame

__all__ = ["Servers", "Site"]

log = logging.getLogger("pytest_failover.simulator")
Scheme = Literal["http", "https"]
_ANSWERED = Answer()  # a request answered as if no fault held

#: How long ``drop`` lets an answer being made go out before it leaves the connection to
#: close itself afterwards (bounded: a handler may be slow, a client may stop reading).
ANSWER_PATIENCE = 1.0
HANDSHAKE_TIMEOUT = 10.0


# The accept queue of every listener: a burst of a thousand connections waits in it, as on a
# production server (nginx listens with 511; Linux caps it at ``net.core.somaxconn``, 4096 on
# current kernels). At 128, one cold-burst scenario (1,000 async requests at once) overflowed
# it 3,145 times and sent 276 SYN cookies: connects retried a second later, and requests sent
# on a connection the listener had not accepted yet timed out, none of it the fault a test
# asked for.
_BACKLOG = 1024


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
    """One accepted connection and the thread serving it.

    The serving thread holds ``lock`` from a request's arrival until its answer is
    written, except while a fault holds or delays the answer (``waiting``).
    ``hang_up`` may be called from any thread: it takes the same lock, so an answer
    being made goes out first, and shuts the socket down, which sends FIN at once;
    the serving thread then reads the end of stream and closes the socket itself
    (under the lock, so a closed and reused descriptor is never touched). The lock is
    re-entrant because the serving thread closes the socket while answering (``reset``).
    """

    __slots__ = ("_closed", "closing", "lock", "sock", "thread", "waiting")

    def __init__(
        self, sock: socket.socket, serve: Callable[[_Connection], None], name: str
    ) -> None:
        self.sock = sock
        self.thread = threading.Thread(
            target=serve, args=(self,), name=f"pytest-failover {name}", daemon=True
        )
        self.closing = False
        self.waiting = False
        self._closed = False
        self.lock = threading.RLock()

    @contextlib.contextmanager
    def waiting_for_fault(self) -> Iterator[None]:
        """While a fault holds the answer: ``release`` and ``drop`` may cut it at once."""
        self.lock.release()
        self.waiting = True
        try:
            yield
        finally:
            self.waiting = False
            self.lock.acquire()

    def start_tls(self, tls: ssl.SSLContext) -> None:
        """The server's side of the TLS handshake (``hang_up`` cuts it short too)."""
        wrapped = tls.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
        self.sock = wrapped
        wrapped.settimeout(HANDSHAKE_TIMEOUT)
        wrapped.do_handshake()
        wrapped.settimeout(None)

    def hang_up(self, patience: float = 0.0) -> None:
        """Shut the socket down, after the answer being made (waiting at most ``patience`` s).

        If the answer takes longer, the serving thread closes the connection after it
        (``closing``). A handler that changes its own domain's fault gets the same.
        """
        self.closing = True
        if threading.current_thread() is self.thread or not self.lock.acquire(timeout=patience):
            return
        try:
            if not self._closed:
                # The plain socket's shutdown: ``SSLSocket.shutdown`` would also drop the
                # SSL object under the serving thread's feet.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        finally:
            self.lock.release()

    def close(self, *, reset: bool = False) -> None:
        """Close the socket; with ``reset``, abort it (SO_LINGER 0: the kernel sends RST)."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(OSError):
                if reset:
                    self.sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                self.sock.close()


class Servers:
    """Every listener of one ``FakeDomains``; safe to call from any thread."""

    def __init__(self) -> None:
        self._closing = False
        self._listeners: list[socket.socket] = []
        self._acceptors: list[threading.Thread] = []
        self._connections: dict[str, set[_Connection]] = {}
        self._coroutines = CoroutineRunner()
        # connect faults
        self._closed = socket.socket()
        self._closed.bind(("127.0.0.1", 0))
        self.closed_port: int = self._closed.getsockname()[1]
        self._blackhole, self._fillers = _full_listener()
        self.blackhole_port: int = self._blackhole.getsockname()[1]
        self._hang_up = socket.create_server(("127.0.0.1", 0), backlog=_BACKLOG)
        self.hang_up_port: int = self._hang_up.getsockname()[1]
        hang_up = threading.Thread(
            target=self._reset_forever, name="pytest-failover hang-up listener", daemon=True
        )
        hang_up.start()
        self._acceptors.append(hang_up)

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
        self._connections.setdefault(site.host, set())
        ports = []
        for scheme, tls in (("http", None), ("https", dispatcher)):
            listener = socket.create_server(("127.0.0.1", 0), backlog=_BACKLOG)
            acceptor = threading.Thread(
                target=self._accept_forever,
                args=(listener, site, scheme, tls),
                name=f"pytest-failover {scheme}://{site.host} listener",
                daemon=True,
            )
            acceptor.start()
            self._listeners.append(listener)
            self._acceptors.append(acceptor)
            ports.append(listener.getsockname()[1])
        return ports[0], ports[1]

    def drop(self, host: str) -> None:
        """Close ``host``'s connections so pooled ones cannot hide a new fault.

        Every connection is shut down before this returns (its client sees the end of
        stream), an answer being made first (see ``ANSWER_PATIENCE``).
        """
        for conn in list(self._connections.get(host, ())):  # list(): one atomic copy
            conn.hang_up(ANSWER_PATIENCE)

    def release(self, host: str) -> None:
        """Cut ``host``'s requests that a fault holds or delays; pooled connections stay."""
        for conn in list(self._connections.get(host, ())):
            if conn.waiting:
                conn.hang_up()

    def close(self) -> None:
        self._closing = True
        for listener in (*self._listeners, self._hang_up):  # wake each accept() with a connection of our own
            with (
                contextlib.suppress(OSError),
                socket.create_connection(listener.getsockname(), timeout=1.0),
            ):
                pass
        conns = [conn for conns in self._connections.values() for conn in list(conns)]
        for conn in conns:
            conn.hang_up()
        deadline = time.monotonic() + 2.0
        for thread in [*self._acceptors, *(conn.thread for conn in conns)]:
            if thread is not threading.current_thread():  # a handler closing its servers
                thread.join(max(0.0, deadline - time.monotonic()))
        self._coroutines.close()
        for sock in (self._closed, self._blackhole, self._hang_up, *self._fillers, *self._listeners):
            sock.close()

    def _reset_forever(self) -> None:
        """Accept every connection of the hang-up port, wait for the client's first bytes
        (its TLS ClientHello: so the client's connect has surely completed, whatever its
        event loop does after it) and reset it (SO_LINGER 0: the kernel sends RST)
        (``address_down(stage="handshake")``)."""
        while True:
            try:
                sock, _ = self._hang_up.accept()
            except OSError:
                if self._closing:
                    return
                time.sleep(0.01)  # out of file descriptors, say: do not spin
                continue
            with contextlib.suppress(OSError):  # a client that sends nothing: reset after 1 s
                sock.settimeout(1.0)
                sock.recv(1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            if self._closing:
                return

    def _accept_forever(
        self, listener: socket.socket, site: Site, scheme: Scheme, tls: ssl.SSLContext | None
    ) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError as exc:
                if self._closing:
                    return
                log.warning("fake server %s: accept failed: %r", site.host, exc)
                time.sleep(0.01)  # out of file descriptors, say: do not spin
                continue
            if self._closing:
                sock.close()
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio does
            serve = functools.partial(self._serve, site, scheme, tls)
            conn = _Connection(sock, serve, f"{scheme}://{site.host}")
            self._connections[site.host].add(conn)  # before it starts: drop() sees it at once
            conn.thread.start()

    # -- one connection

    def _serve(
        self, site: Site, scheme: Scheme, tls: ssl.SSLContext | None, conn: _Connection
    ) -> None:
        try:
            if tls is not None:
                conn.start_tls(tls)
            requests = RequestReader(conn.sock.recv, conn.sock.sendall)
            reused = False  # the connection answered before: a keep-alive one
            while not conn.closing:
                request = requests.read()
                if request is None:
                    return
                if not site.serves():  # a pooled connection outlived its domain: hang up
                    return
                with conn.lock:
                    if not self._respond(site, scheme, request, requests, conn, reused):
                        return
                reused = True
        except h11.RemoteProtocolError as exc:  # not HTTP/1.1: say so, like a real server
            with contextlib.suppress(OSError):
                conn.sock.sendall(
                    b"".join(frame("GET", exc.error_status_hint, [], b"", close=True))
                )
        except (OSError, h11.LocalProtocolError) as exc:  # resets, failed handshakes (SSLError)
            log.debug("fake server %s: %r", site.host, exc)
        finally:
            self._connections[site.host].discard(conn)
            conn.close()

    def _respond(
        self,
        site: Site,
        scheme: Scheme,
        request: Request,
        requests: RequestReader,
        conn: _Connection,
        reused: bool,
    ) -> bool:
        """Answer one request as its fault says; returns whether the connection may be
        reused (``reused``: it answered a request before)."""
        generation = site.generation
        fault, rng = site.strike("respond")
        plan: Answer = on_respond(fault, rng)
        if plan.unanswered is not None and not reused:  # keep_alive_close: a new connection is answered
            fault, plan = None, _ANSWERED
        recorded = RecordedRequest(
            host=site.host,
            scheme=scheme,
            method=request.method,
            path=request.target,
            headers=request.headers,
            body=request.body,
            fault=fault or Healthy(),
            time=time.time(),
        )
        site.record(recorded)

        if plan.unanswered is not None:  # closed as the request came, unanswered
            conn.close(reset=plan.unanswered == "reset")
            return False
        if plan.hold or plan.delay:
            with conn.waiting_for_fault():
                # A fault change made before ``release`` could see us waiting counts too.
                hung_up = site.generation != generation or _wait_for_hang_up(
                    conn.sock, requests, HOLD_LIMIT if plan.hold else plan.delay
                )
            if plan.hold or hung_up:
                return False
        if plan.status is not None:
            status, headers, body = plan.status.code, list(plan.status.headers), plan.status.body
        else:
            status, headers, body = self._run_handler(site, recorded, conn.sock)
        close = (
            conn.closing
            or not site.keeps_alive()
            or not request.keep_alive
            or asks_to_close(headers)  # a handler's own ``Connection: close`` is honoured
        )
        head, body = frame(request.method, status, headers, body, close=close)
        if plan.reset:
            # Half the body, or half the head of an answer without one (a 204): either way
            # the client sees the connection reset, never a complete answer.
            conn.sock.sendall(head + body[: len(body) // 2] if body else head[: len(head) // 2])
            time.sleep(0.005)  # let the bytes leave before the reset
            conn.close(reset=True)
            return False
        if plan.trickle is not None:
            return _trickle(site, generation, conn, requests, head, body, plan.trickle) and not close
        conn.sock.sendall(head + body)
        return not close

    def _run_handler(
        self, site: Site, request: RecordedRequest, sock: socket.socket
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        try:
            return answer(site.handler, request, sock.getsockname()[:2], self._coroutines.run)
        except Exception as exc:
            log.exception("handler of fake domain %s raised", site.host)
            return 500, [], f"handler raised {exc!r}".encode()


def _trickle(
    site: Site,
    generation: int,
    conn: _Connection,
    requests: RequestReader,
    head: bytes,
    body: bytes,
    interval: float,
) -> bool:
    """Send ``head``, then ``body`` a byte every ``interval`` s; returns whether all of it went.

    Each wait may be cut like a held answer's: by the client hanging up, by a fault change
    (``release``, ``drop``) and, in all, by ``HOLD_LIMIT``.
    """
    conn.sock.sendall(head)
    limit = time.monotonic() + HOLD_LIMIT
    for i in range(len(body)):
        with conn.waiting_for_fault():
            hung_up = site.generation != generation or _wait_for_hang_up(
                conn.sock, requests, min(interval, max(0.0, limit - time.monotonic()))
            )
        if hung_up or conn.closing or time.monotonic() >= limit:
            return False
        conn.sock.sendall(body[i : i + 1])
    return True


def _wait_for_hang_up(sock: socket.socket, requests: RequestReader, limit: float) -> bool:
    """Wait ``limit`` seconds; return early (``True``) if the client or the simulator hangs up.

    Hanging up shows as the end of stream: the client closing, or ``hang_up`` shutting
    the socket down.
    """
    deadline = time.monotonic() + limit
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                return True
            requests.receive(data)  # a pipelined request: keep it for later
    except TimeoutError:
        pass
    finally:
        sock.settimeout(None)
    return False


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
