"""Fixtures of the control tests: keys, a hand-moved clock, loopback servers, a target."""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jws
from joserfc.jwk import OctKey, OKPKey

from pytest_failover._pool import Pool
from pytest_failover.control import ControlDocument, ControlKey

NOW = 1_800_000_000
HMAC_SECRET = b"0123456789abcdef0123456789abcdef"
HMAC_KEY = ControlKey.from_secret(HMAC_SECRET, kid="shared-1")
ED_PRIVATE = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
ED_KEY = ControlKey.from_ed25519(ED_PRIVATE, kid="ed-1")
ED_PUBLIC = ED_KEY.public()

POOLS = (
    Pool(
        "api", ["https://api.example.com", "https://api2.example.com", "https://api-cn.example.com"]
    ),
    Pool("pay", ["https://pay.example.com", "https://pay2.example.com"]),
)


@dataclass(frozen=True)
class Signer:
    """One key to sign with and the key a reader is given."""

    name: str
    signing: ControlKey
    reading: ControlKey

    def sign(
        self,
        *,
        version: int,
        pools: Mapping[str, Sequence[str]],
        expires_in: float = 60.0,
        now: float = NOW,
    ) -> bytes:
        return ControlDocument.sign(
            version=version, pools=pools, expires_in=expires_in, now=now, key=self.signing
        )

    def parse(self, raw: bytes, *, now: float = NOW, **kwargs: Any) -> ControlDocument:
        return ControlDocument.parse(raw, key=self.reading, now=now, **kwargs)


HMAC_SIGNER = Signer("hs256", HMAC_KEY, HMAC_KEY)
ED25519_SIGNER = Signer("eddsa", ED_KEY, ED_PUBLIC)
SIGNERS = (HMAC_SIGNER, ED25519_SIGNER)


@pytest.fixture(params=SIGNERS, ids=lambda s: s.name)
def signer(request: pytest.FixtureRequest) -> Signer:
    """Each test runs once with an HS256 secret and once with an Ed25519 key pair."""
    return request.param  # type: ignore[no-any-return]  # pytest's param is Any


def jose_sign(
    payload: bytes,
    *,
    key: ControlKey = HMAC_KEY,
    header: Mapping[str, Any] | None = None,
) -> bytes:
    """``payload`` signed by joserfc itself with any header: no project rule is applied."""
    protected = dict(header) if header is not None else {"alg": key.alg, "typ": "failover-control+jwt"}
    jwk: OctKey | OKPKey = key.jose_key(private=True)
    registry = jws.JWSRegistry(algorithms=[protected["alg"]], strict_check_header=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # joserfc's note that RFC 9864 renamed EdDSA
        token = jws.serialize_compact(protected, payload, jwk, registry=registry)
    return token.encode("ascii")


def claims(**changes: Any) -> dict[str, Any]:
    """A valid payload at ``NOW``, with ``changes`` applied."""
    payload: dict[str, Any] = {
        "version": 2,
        "iat": NOW,
        "exp": NOW + 60,
        "pools": {"api": {"disabled": ["https://api.example.com"]}},
    }
    payload.update(changes)
    return payload


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = NOW) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    """A clock standing at ``NOW`` until the test moves it."""
    return Clock()


class Target:
    """What the transport does with a document: check it against its pools, then apply."""

    def __init__(self, pools: tuple[Pool, ...] = POOLS) -> None:
        self.pools = pools
        self.version: int | None = None
        self.disabled: dict[str, frozenset[str]] = {}
        self.applied: list[ControlDocument] = []
        self.event = threading.Event()

    def apply_control(self, doc: ControlDocument) -> None:
        doc.check(self.pools, self.version)
        self.version = doc.version
        self.disabled = dict(doc.disabled)
        self.applied.append(doc)
        self.event.set()

    def snapshot(self) -> tuple[int | None, dict[str, frozenset[str]], list[ControlDocument]]:
        return self.version, dict(self.disabled), list(self.applied)


@pytest.fixture
def target() -> Target:
    """A fresh target with the two test pools."""
    return Target()


@dataclass
class Served:
    """What the loopback control server answers, changed by the test."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    content_type: str = "application/jwt"
    requests: int = 0
    accept: str | None = None  # the Accept header of the last request
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self, body: bytes, status: int = 200) -> None:
        with self.lock:
            self.body, self.status = body, status


@contextmanager
def run_server(tls: ssl.SSLContext | None = None) -> Iterator[Served]:
    """A real HTTP(S) server on 127.0.0.1 answering every GET with the returned ``Served``."""
    state = Served()
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.requests += 1
                state.accept = self.headers.get("Accept")
                status, body, headers, delay, content_type = (
                    state.status,
                    state.body,
                    dict(state.headers),
                    state.delay,
                    state.content_type,
                )
            if delay:
                stop.wait(delay)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            # A client that hangs up (BrokenPipeError, ConnectionResetError), times out or refuses
            # our certificate is a test's point, not noise: socketserver would print its traceback.
            # Anything else is a bug of this server and is printed as usual.
            if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
                return
            super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    scheme = "https" if tls is not None else "http"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/control.json"
    try:
        yield state
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def served() -> Iterator[Served]:
    """A real HTTP server on 127.0.0.1 answering every GET with ``served``."""
    with run_server() as state:
        yield state


@contextmanager
def trickle_server(
    *,
    head_gap: float = 0.0,
    body_gap: float = 0.3,
    body: bytes = b"x" * 200,
    tls: ssl.SSLContext | None = None,
) -> Iterator[str]:
    """A raw loopback server that sends its answer one byte at a time.

    ``head_gap`` seconds pass between the bytes of the status line and headers,
    ``body_gap`` between the bytes of the body (each byte its own TLS record with
    ``tls``); the server stops after 30 s at most, or as soon as the client hangs up.
    """
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Type: application/jwt\r\n\r\n".encode()
    threads: list[threading.Thread] = []

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                if tls is not None:
                    conn = tls.wrap_socket(conn, server_side=True)
                conn.recv(65536)  # the request: one GET, small
                for chunk, gap in [(head, head_gap), (body, body_gap)]:
                    if not gap:
                        conn.sendall(chunk)
                        continue
                    for i in range(len(chunk)):
                        conn.sendall(chunk[i : i + 1])
                        if stop.wait(gap):
                            return
            except OSError:
                return  # the client gave up: that is the point

    def accept() -> None:
        for _ in range(600):  # 30 s at most
            if stop.is_set():
                return
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            worker = threading.Thread(target=answer, args=(conn,), daemon=True)
            threads.append(worker)
            worker.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        scheme = "http" if tls is None else "https"
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}/control.json"
    finally:
        stop.set()
        acceptor.join(5)
        listener.close()
        for worker in threads:
            worker.join(5)
