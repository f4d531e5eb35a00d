"""HTTP/1.1 on the wire for the fake servers: reading requests and framing answers.

Requests are read by h11, one ``h11.Connection`` per connection. Answers are written
by ``frame``, which is faster than h11's writer; h11 is only told that one was sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import h11

__all__ = ["Request", "RequestReader", "asks_to_close", "frame"]

#: h11's limit on an incomplete head (``h11.Connection(max_incomplete_event_size=...)``).
MAX_HEAD = 16 * 1024

_HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")  # RFC 9112's token, as h11 checks it
_BAD_VALUE = re.compile(r"[\r\n\x00]")
#: What h11 is told was sent for each answer ``frame`` wrote, so that it reads the next request
#: (not 2xx, so a ``CONNECT`` is not taken as a switch of protocol).
_ANSWERED = (h11.Response(status_code=304, headers=[]), h11.EndOfMessage())


@dataclass(frozen=True, slots=True)
class Request:
    """One request as h11 read it: header names lower-case, repeated ones joined with ``", "``.

    ``keep_alive`` is h11's decision: false for HTTP/1.0 and ``Connection: close``.
    """

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class RequestReader:
    """Reads one connection's requests in order, pipelined ones included.

    ``recv(n)`` returns the next bytes (``b""`` at the end of stream); ``send`` is
    for h11's ``100 Continue``. ``read`` again only after a request that keeps alive.
    """

    def __init__(self, recv: Callable[[int], bytes], send: Callable[[bytes], None]) -> None:
        self._recv = recv
        self._send = send
        self._http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)

    def read(self) -> Request | None:
        """The next whole request; ``None`` if the client hung up between requests.

        Raises ``h11.RemoteProtocolError`` for what is not HTTP/1.1.
        """
        http = self._http
        if http.our_state is h11.SEND_RESPONSE:  # the last request: ``frame`` answered it
            for sent in _ANSWERED:
                http.send(sent)
            http.start_next_cycle()
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                if http.they_are_waiting_for_100_continue:
                    self._send(http.send(h11.InformationalResponse(status_code=100, headers=[])))
                http.receive_data(self._recv(65536))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                headers: dict[str, str] = {}
                for raw_name, raw_value in head.headers:  # names come lower-case
                    name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
                    headers[name] = f"{headers[name]}, {value}" if name in headers else value
                return Request(
                    method=head.method.decode("ascii"),
                    target=head.target.decode("latin-1"),
                    headers=headers,
                    body=bytes(body),
                    keep_alive=http.their_state is not h11.MUST_CLOSE,
                )
            else:  # ConnectionClosed
                return None

    def receive(self, data: bytes) -> None:
        """Keep bytes read elsewhere (a pipelined request); ``b""`` is the end of stream."""
        self._http.receive_data(data)


def _has_token(value: str, token: str) -> bool:
    return token in {part.strip() for part in value.lower().split(",")}


def asks_to_close(headers: list[tuple[str, str]]) -> bool:
    """Whether an answer's headers say ``Connection: close``."""
    return any(
        name.lower() == "connection" and _has_token(value, "close") for name, value in headers
    )


def frame(
    method: str, status: int, headers: list[tuple[str, str]], body: bytes, *, close: bool
) -> tuple[bytes, bytes]:
    """The head of an answer and the body bytes to send, with the framing headers HTTP/1.1 wants.

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
        if not _HEADER_NAME.fullmatch(name) or _BAD_VALUE.search(value) or value != value.strip():
            raise h11.LocalProtocolError(f"illegal header {name!r}: {value!r}")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    try:
        head = "".join(lines).encode("ascii")
    except UnicodeEncodeError as exc:
        raise h11.LocalProtocolError(f"a header is not ASCII: {exc}") from None
    return head, body


def _guess_type(body: bytes) -> str:
    try:
        json.loads(body)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"
