"""Loopback HTTP(S) servers whose behaviour a test flips between requests.

One asyncio loop in a background thread serves every connection (keep-alive,
HTTP/1.1, Content-Length bodies), so hundreds of concurrent clients cost no
threads and answers come back in well under a millisecond.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Behaviour:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"ok": true}'
    delay: float = 0.0  # seconds before answering
    reset: bool = False  # close with RST instead of answering
    truncate: bool = False  # send the headers (``headers`` too) and half the body, then RST
    chunked: bool = False  # no Content-Length: the body in 64 KiB chunks


_REASONS = {200: "OK", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class LoopbackServer:
    def __init__(self, name: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.behaviour = Behaviour()
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.counts: Counter[str] = Counter()
        self.accepted = 0  # connections accepted
        self.scheme = "https" if ssl_context else "http"
        self._ssl = ssl_context
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"server-{name}", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl, backlog=1024)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._started.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self.lock:
            self.accepted += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers[k.strip()] = v.strip()
                length = int(headers.get("Content-Length") or headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                if headers.get("Transfer-Encoding", headers.get("transfer-encoding")) == "chunked":
                    body = await self._read_chunked(reader)
                with self.lock:
                    self.seen.append((method, path, headers, body))
                    self.counts[method] += 1
                    b = self.behaviour
                if b.delay:
                    await asyncio.sleep(b.delay)
                extra = "".join(f"{k}: {v}\r\n" for k, v in b.headers.items())
                if b.truncate:
                    writer.write(
                        f"HTTP/1.1 200 OK\r\n{extra}Content-Length: {2 * len(b.body)}\r\n\r\n".encode()
                        + b.body
                    )
                    await writer.drain()
                    await asyncio.sleep(0.01)
                if b.reset or b.truncate:
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if b.chunked:
                    writer.write(
                        f"HTTP/1.1 {b.status} {_REASONS.get(b.status, 'Status')}\r\n{extra}"
                        f"Transfer-Encoding: chunked\r\nX-Served-By: {self.name}\r\n\r\n".encode("latin-1")
                    )
                    for at in range(0, len(b.body), 65536):
                        piece = b.body[at : at + 65536]
                        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        await writer.drain()
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    continue
                payload = b"" if method == "HEAD" else b.body
                writer.write(
                    (
                        f"HTTP/1.1 {b.status} {_REASONS.get(b.status, 'Status')}\r\n{extra}"
                        f"Content-Type: application/json\r\nContent-Length: {len(b.body)}\r\n"
                        f"X-Served-By: {self.name}\r\n\r\n"
                    ).encode("latin-1")
                    + payload
                )
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return body
            body += chunk[:-2]

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}"

    def set(self, **changes: object) -> None:
        with self.lock:
            self.behaviour = Behaviour(**changes)  # type: ignore[arg-type]  # keyword overrides, checked by the dataclass

    def reset_records(self) -> None:
        with self.lock:
            self.seen.clear()
            self.counts.clear()

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def of_path(self, path: str) -> int:
        """The requests this server has read for ``path``."""
        with self.lock:
            return sum(seen == path for _, seen, _, _ in self.seen)

    def total_settled(self, expected: int, timeout: float = 2.0, path: str | None = None) -> int:
        """The requests this server has read (for ``path``, if given), once it has read
        ``expected`` of them or ``timeout`` passed: a cut attempt's bytes may wait in the
        socket for the server's loop a while after the client is done with it (seconds,
        on a loaded machine)."""
        deadline = time.monotonic() + timeout

        def count() -> int:
            return self.total if path is None else self.of_path(path)

        while count() < expected and time.monotonic() < deadline:
            time.sleep(0.005)
        return count()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


# Two servers, a flipping and b healthy, and the function that heals a (the flipping stops,
# a healthy): conftest's ``flapping`` fixture.
Flapping = tuple[LoopbackServer, LoopbackServer, Callable[[], None]]


@contextmanager
def running(name: str, ssl_context: ssl.SSLContext | None = None) -> Iterator[LoopbackServer]:
    server = LoopbackServer(name, ssl_context)
    try:
        yield server
    finally:
        server.close()


def closed_port() -> int:
    """A loopback port with nothing listening: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def json_body(data: object) -> bytes:
    return json.dumps(data).encode()


class SocketServer:
    """A bare loopback listener for answers no HTTP server would give: its accepting
    thread hands each connection to :meth:`serve` (in that thread; start one of your own
    for a connection that lives on). A subclass sets its own attributes before calling
    ``__init__``, which starts accepting."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)  # accept() looks at ``_closing`` this often
        self._closing = threading.Event()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            self.serve(conn)

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closing.set()
        self._accepting.join(5.0)
        self._sock.close()
