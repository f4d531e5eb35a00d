"""Fixtures of the control-document tests: keys, a fake clock, a loopback server, a target."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pytest_failover._control import ControlDocument
from pytest_failover._pool import Pool

NOW = 1_800_000_000.0
HMAC_KEY = b"0123456789abcdef0123456789abcdef"
PRIVATE_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC_KEY = PRIVATE_KEY.public_key()

POOLS = (
    Pool(
        "api", ["https://api.example.com", "https://api2.example.com", "https://api-cn.example.com"]
    ),
    Pool("pay", ["https://pay.example.com", "https://pay2.example.com"]),
)


@dataclass(frozen=True)
class Signer:
    """One way to sign and the matching way to verify."""

    name: str
    sign_with: Mapping[str, Any]
    verify_with: Mapping[str, Any]

    def sign(
        self,
        *,
        version: int,
        pools: Mapping[str, list[str]],
        expires_in: float = 60.0,
        now: float = NOW,
        kid: str = "",
    ) -> bytes:
        return ControlDocument.sign(
            version=version, pools=pools, expires_in=expires_in, now=now, kid=kid, **self.sign_with
        )

    def parse(self, raw: bytes, *, now: float = NOW, **kwargs: Any) -> ControlDocument:
        return ControlDocument.parse(raw, now=now, **self.verify_with, **kwargs)


HMAC_SIGNER = Signer("hmac", {"hmac_key": HMAC_KEY}, {"hmac_key": HMAC_KEY})
ED25519_SIGNER = Signer("ed25519", {"private_key": PRIVATE_KEY}, {"public_key": PUBLIC_KEY})


@pytest.fixture(params=[HMAC_SIGNER, ED25519_SIGNER], ids=lambda s: s.name)
def signer(request: pytest.FixtureRequest) -> Signer:
    """Each test runs once with a shared HMAC key and once with an Ed25519 key pair."""
    return request.param  # type: ignore[no-any-return]  # pytest's param is Any


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
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


@pytest.fixture
def target() -> Target:
    return Target()


@dataclass
class Served:
    """What the loopback control server answers, changed by the test."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    requests: int = 0
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
                status, body, headers, delay = (
                    state.status,
                    state.body,
                    dict(state.headers),
                    state.delay,
                )
            if delay:
                stop.wait(delay)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
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
