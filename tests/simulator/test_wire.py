"""The request reader: h11 reading the requests of one connection over a socket pair."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import h11
import pytest

from pytest_failover.simulator._wire import MAX_HEAD, Request, RequestReader

GET = b"GET /v1/rooms?a=1 HTTP/1.1\r\nHost: api.example.com\r\nAccept: */*\r\naccept: x/y\r\n\r\n"
POST = b'POST /v1/rooms HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n{"room": 7}'
CHUNKED = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"


class Pair:
    """A connection: the reader on the server's end, ``client`` the other end."""

    def __init__(self) -> None:
        self.server, self.client = socket.socketpair()
        self.server.settimeout(5.0)  # a reader waiting for bytes that never come fails, not hangs
        self.client.settimeout(5.0)
        self.reader = RequestReader(self.server.recv, self.server.sendall)

    def send(self, data: bytes, *, hang_up: bool = False) -> None:
        self.client.sendall(data)
        if hang_up:
            self.client.shutdown(socket.SHUT_WR)

    def read_all(self) -> list[Request]:
        """Every request until the client hangs up."""
        requests = []
        while (request := self.reader.read()) is not None:
            requests.append(request)
        return requests


@pytest.fixture
def pair() -> Iterator[Pair]:
    pair = Pair()
    yield pair
    pair.server.close()
    pair.client.close()


def test_a_get_is_read(pair: Pair) -> None:
    """Header names come lower-case and a repeated header is joined with a comma."""
    pair.send(GET)
    assert pair.reader.read() == Request(
        method="GET",
        target="/v1/rooms?a=1",
        headers={"host": "api.example.com", "accept": "*/*, x/y"},
        body=b"",
        keep_alive=True,
    )


def test_a_body_with_content_length_is_read(pair: Pair) -> None:
    pair.send(POST)
    request = pair.reader.read()
    assert request is not None
    assert (request.method, request.body) == ("POST", b'{"room": 7}')


def test_a_request_arriving_byte_by_byte_is_read_whole() -> None:
    pieces = iter([POST[i : i + 1] for i in range(len(POST))])
    reader = RequestReader(lambda _size: next(pieces, b""), lambda _data: None)
    request = reader.read()
    assert request is not None and request.body == b'{"room": 7}'
    assert reader.read() is None


def test_a_chunked_body_is_read(pair: Pair) -> None:
    pair.send(CHUNKED)
    request = pair.reader.read()
    assert request is not None and request.body == b"hello"


def test_pipelined_requests_are_read_in_order(pair: Pair) -> None:
    """A ``CONNECT`` among them is answered like any request: the next one is still read."""
    connect = b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n"
    pair.send(GET + POST + connect + CHUNKED + GET, hang_up=True)
    requests = pair.read_all()
    assert [(r.method, r.body) for r in requests] == [
        ("GET", b""),
        ("POST", b'{"room": 7}'),
        ("CONNECT", b""),
        ("POST", b"hello"),
        ("GET", b""),
    ]


def test_bytes_read_elsewhere_are_the_next_request(pair: Pair) -> None:
    """What the server reads while a fault holds an answer is handed back with ``receive``."""
    pair.send(GET)
    assert pair.reader.read() is not None
    pair.reader.receive(POST)
    request = pair.reader.read()
    assert request is not None and request.method == "POST"


def test_expect_100_continue_is_answered_before_the_body(pair: Pair) -> None:
    pair.send(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    read: list[Request | None] = []
    reading = threading.Thread(target=lambda: read.append(pair.reader.read()))
    reading.start()
    assert pair.client.recv(100) == b"HTTP/1.1 100 \r\n\r\n"
    pair.send(b"hi")
    reading.join(5.0)
    [request] = read
    assert request is not None and request.body == b"hi"


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", False),
    ],
    ids=["http/1.1", "connection close", "http/1.0", "http/1.0 keep-alive"],
)
def test_keep_alive_is_h11s_decision(pair: Pair, head: bytes, keep_alive: bool) -> None:
    pair.send(head)
    request = pair.reader.read()
    assert request is not None and request.keep_alive is keep_alive


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"x" * MAX_HEAD, 431),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),
        (GET + POST[:-3], 400),
    ],
    ids=["garbage", "no host", "two lengths", "head too long", "tls hello", "ends in the body"],
)
def test_what_is_not_http_11_is_h11s_error(pair: Pair, data: bytes, status: int) -> None:
    """The error comes without waiting for more (a request cut short: at the hang-up)."""
    pair.send(data, hang_up=data.endswith(POST[:-3]))
    with pytest.raises(h11.RemoteProtocolError) as error:
        pair.read_all()
    assert error.value.error_status_hint == status


def test_a_hang_up_between_requests_ends_the_reading(pair: Pair) -> None:
    pair.send(GET, hang_up=True)
    assert pair.reader.read() is not None
    assert pair.reader.read() is None


def test_a_hang_up_before_any_request_ends_the_reading(pair: Pair) -> None:
    pair.send(b"", hang_up=True)
    assert pair.reader.read() is None
