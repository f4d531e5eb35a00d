"""A real Prometheus scrapes the agent gzip-compressed: what crosses the wire between them,
seen by a loopback relay that counts it, is the agent's text in gzip, and Prometheus stores
the series as it did uncompressed."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from . import _stack

RELAY_DEADLINE = 40.0  # seconds for Prometheus to scrape the agent through the relay (bounded)
# the agent's own series, as Prometheus stored them from a scrape through the relay
QUERY = 'count({job="failover-agent", __name__=~"failover_.+"}) > 10'


class _Relay:
    """Accepts on a free loopback port and pipes each connection to ``target``, keeping what
    went each way (a connection before ``target`` is set is closed unanswered)."""

    def __init__(self) -> None:
        self.target: tuple[str, int] | None = None
        self.sent = bytearray()  # client -> target
        self.received = bytearray()  # target -> client
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"

    def _pipe(self, source: socket.socket, sink: socket.socket, into: bytearray) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                with self._lock:
                    into += data
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            if self.target is None:
                client.close()
                continue
            upstream = socket.create_connection(self.target, timeout=10)
            client.settimeout(None)
            upstream.settimeout(None)
            for args in ((client, upstream, self.sent), (upstream, client, self.received)):
                thread = threading.Thread(target=self._pipe, args=args, daemon=True)
                thread.start()
                self._threads.append(thread)

    @contextlib.contextmanager
    def running(self) -> Iterator[_Relay]:
        acceptor = threading.Thread(target=self._accept, daemon=True)
        acceptor.start()
        try:
            yield self
        finally:
            self._stop.set()
            acceptor.join(timeout=5)
            self._listener.close()

    def snapshot(self) -> tuple[bytes, bytes]:
        with self._lock:
            return bytes(self.sent), bytes(self.received)


def _first_answer(received: bytes) -> tuple[dict[str, str], bytes]:
    """The first answer in what the agent sent: its headers (lower-cased names) and its body."""
    head, _, rest = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return headers, rest[: int(headers["content-length"])]


def test_prometheus_scrapes_the_agent_gzip_compressed(prometheus_bin: str, tmp_path: Path) -> None:
    """Prometheus asks for gzip, the agent answers gzip (a tenth of the text's size or less),
    and the scraped series reach Prometheus's storage."""
    with _Relay().running() as relay, _stack.prometheus(
        prometheus_bin, tmp_path, {"failover-agent": relay.address}, []
    ) as prom, _stack.agent_demo(tmp_path, 90.0) as agent:
        # the agent starts while Prometheus takes its some 5 s to apply its targets
        host, _, port = agent.rpartition(":")
        relay.target = (host, int(port))
        deadline = time.monotonic() + RELAY_DEADLINE
        found: list[object] = []
        while time.monotonic() < deadline:
            answer = httpx.get(f"{prom}/api/v1/query", params={"query": QUERY}, timeout=5).json()
            found = answer["data"]["result"] if answer["status"] == "success" else []
            if found:
                break
            time.sleep(0.25)
        assert found, f"Prometheus stored no series of the agent scraped through the relay ({QUERY})"
        sent, received = relay.snapshot()
        plain = httpx.get(f"http://{agent}/metrics", headers={"Accept-Encoding": "identity"}, timeout=10).content
    request_head = sent.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    assert "\r\naccept-encoding: gzip" in request_head, request_head
    headers, body = _first_answer(received)
    assert headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding", headers
    text = gzip.decompress(body)
    assert text.startswith(b"# HELP ") and b"\nfailover_" in text
    assert len(body) * 5 < len(plain), (len(body), len(plain))
