"""The sync race's cut: it shuts the socket of an attempt that is still on the wire, and
never one its request has let go (a real ``httpx.HTTPTransport`` over loopback).

httpcore closes a response's connection stream (the connection is idle, and may be
handed to the next request) before it drops the request from its pool's list; a hedge
that won cuts its loser in that window now and then. These tests build that window
by hand (`_let_go`): the connection stream read and closed, the pool's entry still there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_failover._sockets import cut_request

from .servers import LoopbackServer


@pytest.fixture
def inner() -> Iterator[httpx.HTTPTransport]:
    transport = httpx.HTTPTransport()
    yield transport
    transport.close()


def _connection_stream(response: httpx.Response) -> Any:
    """httpcore's stream of the response's connection, under its pool's wrapper."""
    stream: Any = response.stream  # httpx's ResponseStream: its internals are the window under test
    return stream._httpcore_stream._stream


def _let_go(inner: httpx.HTTPTransport, url: str) -> tuple[httpx.Request, httpx.Response]:
    """A request whose body was read and whose connection's stream only was closed:
    the connection is idle (kept alive), and the pool still lists the request, as in
    the middle of httpcore's close."""
    request = httpx.Request("GET", url + "/first")
    response = inner.handle_request(request)
    stream = _connection_stream(response)
    assert b"".join(stream) == b'{"ok": true}'
    stream.close()
    return request, response


def test_a_request_waiting_for_its_answer_is_cut(inner: httpx.HTTPTransport, servers: dict[str, LoopbackServer]) -> None:
    servers["a"].set(delay=2.0)  # a held answer, as a hedge's loser waits for one
    request = httpx.Request("GET", servers["a"].url() + "/held")
    ended: list[BaseException | None] = []

    def send() -> None:
        try:
            inner.handle_request(request)
        except BaseException as exc:  # the thread's outcome, for the test to read
            ended.append(exc)
        else:
            ended.append(None)

    thread = threading.Thread(target=send)
    started = time.monotonic()
    thread.start()
    while not cut_request(inner, request):  # until the request holds a connection
        assert time.monotonic() - started < 1.0, "the request never reached the wire"
        time.sleep(0.005)
    thread.join(5.0)
    assert time.monotonic() - started < 1.0  # not the answer's 2 s
    assert len(ended) == 1 and isinstance(ended[0], httpx.TransportError)


def test_a_request_whose_connection_is_idle_is_not_cut(
    inner: httpx.HTTPTransport, servers: dict[str, LoopbackServer]
) -> None:
    url = servers["a"].url()
    first, response = _let_go(inner, url)
    assert not cut_request(inner, first)
    response.close()  # the pool forgets the request now
    again = inner.handle_request(httpx.Request("GET", url + "/again"))  # on the same, uncut, connection
    assert again.read() == b'{"ok": true}'
    assert servers["a"].total == 2


def test_a_connection_handed_to_another_request_is_not_cut(
    inner: httpx.HTTPTransport, servers: dict[str, LoopbackServer]
) -> None:
    url = servers["a"].url()
    first, response = _let_go(inner, url)
    second = inner.handle_request(httpx.Request("GET", url + "/second"))  # given the idle connection
    assert _connection_stream(second)._connection is _connection_stream(response)._connection
    assert not cut_request(inner, first)
    assert second.read() == b'{"ok": true}'  # the other request's answer arrives whole
    response.close()
