"""The sync race's cut: it shuts the socket of an attempt that is still on the wire, and
never one its request has let go (a real ``httpx.HTTPTransport`` over loopback, and
httpx2's over httpcore2: the same private names, read through the one seam).

httpcore closes a response's connection stream (the connection is idle, and may be
handed to the next request) before it drops the request from its pool's list; a hedge
that won cuts its loser in that window now and then. These tests build that window
by hand (`_let_go`): the connection stream read and closed, the pool's entry still there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from pytest_failover._sockets import cut_request

from .servers import LoopbackServer


@pytest.fixture
def inner(http: ModuleType) -> Iterator[Any]:
    """The library's own transport, over its httpcore's pool."""
    transport = http.HTTPTransport()
    yield transport
    transport.close()


def _connection_stream(response: Any) -> Any:
    """httpcore's stream of the response's connection, under its pool's wrapper."""
    stream: Any = response.stream  # httpx's ResponseStream: its internals are the window under test
    return stream._httpcore_stream._stream


def _let_go(http: ModuleType, inner: Any, url: str) -> tuple[Any, Any]:
    """A request whose body was read and whose connection's stream only was closed:
    the connection is idle (kept alive), and the pool still lists the request, as in
    the middle of httpcore's close."""
    request = http.Request("GET", url + "/first")
    response = inner.handle_request(request)
    stream = _connection_stream(response)
    assert b"".join(stream) == b'{"ok": true}'
    stream.close()
    return request, response


def test_a_request_waiting_for_its_answer_is_cut(
    http: ModuleType, inner: Any, servers: dict[str, LoopbackServer]
) -> None:
    servers["a"].set(delay=2.0)  # a held answer, as a hedge's loser waits for one
    request = http.Request("GET", servers["a"].url() + "/held")
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
    assert len(ended) == 1 and isinstance(ended[0], http.TransportError)


def test_a_request_whose_connection_is_idle_is_not_cut(
    http: ModuleType, inner: Any, servers: dict[str, LoopbackServer]
) -> None:
    url = servers["a"].url()
    first, response = _let_go(http, inner, url)
    assert not cut_request(inner, first)
    response.close()  # the pool forgets the request now
    again = inner.handle_request(http.Request("GET", url + "/again"))  # on the same, uncut, connection
    assert again.read() == b'{"ok": true}'
    assert servers["a"].total == 2


def test_a_connection_handed_to_another_request_is_not_cut(
    http: ModuleType, inner: Any, servers: dict[str, LoopbackServer]
) -> None:
    url = servers["a"].url()
    first, response = _let_go(http, inner, url)
    second = inner.handle_request(http.Request("GET", url + "/second"))  # given the idle connection
    same = _connection_stream(second)._connection is _connection_stream(response)._connection
    # httpcore hands the idle connection on at once; httpcore2 keeps an idle connection for
    # the request that still lists it, and opens another: either way no cut may reach it.
    assert same is (http.__name__ == "httpx")
    assert not cut_request(inner, first)
    assert second.read() == b'{"ok": true}'  # the other request's answer arrives whole
    response.close()
