"""A fast loopback HTTP/1.1 server, run in its own process by the benchmarks.

It answers every request with ``200`` and a two-byte JSON body (or ``503`` on the
ports listed in ``--status-503``), keeps connections alive unless the client asks
for ``Connection: close``, and counts the requests it answered and the connections
that carried one. ``GET /__count`` returns both (not counted itself); ``GET /v1/chunked`` answers the same body
without a length (``Transfer-Encoding: chunked``); ``POST /v1/chat/completions`` answers a
short OpenAI ``chat.completion`` (what the SDK benchmark's calls parse). It listens only on 127.0.0.1, prints
``{"ports": [...]}`` on one line once it is ready, and exits when its standard
input closes (the parent went away) or after ``--max-seconds``.

Run: ``python -m benchmarks._server --ports 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import resource
import sys
import threading

_COUNT = 0
_CONNECTIONS = 0  # connections that carried a counted request
_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
_COMPLETION_BODY = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1764892800, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello.", "refusal": None},
                 "finish_reason": "stop", "logprobs": None}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}).encode()
_COMPLETION = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_COMPLETION_BODY)).encode() + b"\r\n\r\n" + _COMPLETION_BODY
)
_FAIL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"


class _Http(asyncio.Protocol):
    """Minimal HTTP/1.1: request line + headers, optional Content-Length body. Answers
    ``{}`` (``GET /v1/chunked``: the same, chunked, as servers that stream do)."""

    def __init__(self, status_line: bytes) -> None:
        self.status_line = status_line
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.counted = False  # this connection carried a counted request

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        global _COUNT, _CONNECTIONS
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65536:
                    self._close()
                return
            head = self.buffer[:end].lower()
            length = 0
            idx = head.find(b"\r\ncontent-length:")
            if idx >= 0:
                line_end = head.find(b"\r\n", idx + 2)
                raw = head[idx + 17 : line_end if line_end >= 0 else len(head)]
                length = int(raw.strip() or b"0")
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            self.buffer = self.buffer[total:]
            close = b"\r\nconnection: close" in head
            assert self.transport is not None
            counted = not head.startswith(b"get /__count ")
            if counted and not self.counted:
                self.counted = True
                _CONNECTIONS += 1
            if not counted:
                body = json.dumps({"count": _COUNT, "connections": _CONNECTIONS}).encode()
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\n\r\n" + body
                )
            elif head.startswith(b"get /v1/chunked "):  # the same answer, without a length
                _COUNT += 1
                self.transport.write(_CHUNKED)
            elif head.startswith(b"post /v1/chat/completions ") and self.status_line is _OK:
                _COUNT += 1
                self.transport.write(_COMPLETION)
            else:
                _COUNT += 1
                self.transport.write(
                    self.status_line
                    + (b"Connection: close\r\n\r\n{}" if close else b"\r\n{}")
                )
            if close:
                self._close()
                return

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _serve(ports: int, failing: int, max_seconds: float) -> None:
    loop = asyncio.get_running_loop()
    servers = []
    for i in range(ports):
        status = _FAIL if i < failing else _OK
        server = await loop.create_server(
            functools.partial(_Http, status), "127.0.0.1", 0, backlog=1024
        )
        servers.append(server)
    bound = [s.sockets[0].getsockname()[1] for s in servers]
    print(json.dumps({"ports": bound}), flush=True)
    stop = asyncio.Event()

    def watch_stdin() -> None:  # returns when the parent closes our stdin
        sys.stdin.read()
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, daemon=True).start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max_seconds)
    for s in servers:
        s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=1, help="how many listening ports")
    parser.add_argument("--status-503", type=int, default=0, help="the first N ports answer 503")
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_serve(args.ports, args.status_503, args.max_seconds))


if __name__ == "__main__":
    main()
