"""The sync watchdog: it cuts an armed socket at its deadline, and only then."""

from __future__ import annotations

import math
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import httpx
import pytest

from pytest_failover import FailoverResult, FailoverTransport, Policy, Pool
from pytest_failover._breaker import Breaker
from pytest_failover._deadline import _Watchdog
from pytest_failover._pool import Domain
from pytest_failover._sockets import socket_of
from pytest_failover._values import Attempt, new_attempt

from .servers import LoopbackServer


class _Stream:
    """What httpcore's ``network_stream`` extension offers: the socket under a response."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def get_extra_info(self, name: str) -> object:
        return self._sock if name == "socket" else None


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _response(sock: socket.socket) -> httpx.Response:
    return httpx.Response(200, extensions={"network_stream": _Stream(sock)})


def _answered(response: Any) -> Attempt:
    """A sync attempt whose answer's headers came: ``response`` (what the watchdog cuts)."""
    attempt = new_attempt(1, Domain.parse("http://127.0.0.1:9"), Breaker(threshold=1, cooldown=1.0), 0.0, 1.0, 0.0)
    attempt.request = httpx.Request("GET", "http://127.0.0.1:9/")
    attempt.response = response
    return attempt


def _wait_cut(sock: socket.socket, limit: float) -> float:
    """Seconds until ``sock`` is shut down (a recv returns b"" at once), at most ``limit``."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        assert sock.recv(1) == b""
    except TimeoutError:
        pytest.fail(f"the socket was not cut within {limit} s")
    return time.monotonic() - started


def test_a_later_attempt_with_an_earlier_deadline_is_cut_on_time(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """The thread sleeps until the earliest deadline it knows; arming an earlier
    one must wake it, or the cut would come up to MAX_SLEEP late."""
    dog = _Watchdog()
    far, near = socket.socketpair()
    try:
        dog.arm(time.monotonic() + 30.0, _answered(_response(far)))  # the thread now sleeps MAX_SLEEP
        time.sleep(0.05)
        ticket = dog.arm(time.monotonic() + 0.05, _answered(_response(pair[0])))
        assert _wait_cut(pair[0], 1.0) < 0.05 + 0.03
        assert dog.disarm(ticket) is True
    finally:
        far.close()
        near.close()


def test_a_disarmed_attempt_is_never_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    dog = _Watchdog()
    ticket = dog.arm(time.monotonic() + 0.05, _answered(_response(pair[0])))
    assert dog.disarm(ticket) is False
    time.sleep(0.15)
    pair[1].sendall(b"x")
    pair[0].settimeout(1.0)
    assert pair[0].recv(1) == b"x"  # still open


def test_many_far_deadlines_let_the_thread_sleep(pair: tuple[socket.socket, socket.socket]) -> None:
    """A busy client arms thousands of attempts with seconds to go: the thread
    looks about once per MAX_SLEEP, not per attempt or per tick (each wake-up
    takes the GIL from the request threads)."""
    dog = _Watchdog()
    started = time.monotonic()
    while time.monotonic() - started < 0.6:
        ticket = dog.arm(time.monotonic() + 30.0, _answered(_response(pair[0])))
        assert dog.disarm(ticket) is False
    assert 1 <= dog.looks <= 0.6 / _Watchdog.MAX_SLEEP + 2


class _CountedEvent(threading.Event):
    """An event that counts the times it is set."""

    sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_a_burst_wakes_a_thread_that_slept_for_good_once(pair: tuple[socket.socket, socket.socket]) -> None:
    """Idle for ``IDLE_AFTER``, the thread sleeps until an arm() wakes it. A burst of requests
    that holds the GIL until it runs must set the event once, not at every arm() (a
    condition's lock and notify each time); and a deadline armed after the burst is still cut
    on time."""
    dog = _Watchdog()
    dog.IDLE_AFTER = 0.05
    wake = dog._wake = _CountedEvent()
    far = _answered(_response(pair[0]))
    dog.disarm(dog.arm(time.monotonic() + 30.0, far))  # the thread starts
    started = time.monotonic()
    while dog._wakes_at != math.inf and time.monotonic() - started < 2.0:  # it slept for good
        time.sleep(0.01)
    assert dog._wakes_at == math.inf
    before = wake.sets
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)  # the thread cannot run before the burst is over
    try:
        for _ in range(100):
            dog.disarm(dog.arm(time.monotonic() + 30.0, far))
    finally:
        sys.setswitchinterval(interval)
    assert wake.sets - before == 1
    ticket = dog.arm(time.monotonic() + 0.05, _answered(_response(pair[0])))
    assert _wait_cut(pair[0], 1.0) < 0.05 + 0.1
    assert dog.disarm(ticket) is True


def test_a_response_without_a_socket_is_never_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    """An in-process transport's response has no socket: its time passes, and the
    watchdog neither reports a cut nor stops cutting the sockets of others."""
    dog = _Watchdog()
    ticket = dog.arm(time.monotonic() + 0.02, _answered(httpx.Response(200)))
    started = time.monotonic()
    while dog.looks < 2 and time.monotonic() - started < 2.0:  # it looked after the deadline
        time.sleep(0.02)
    time.sleep(0.05)
    assert dog.disarm(ticket) is False
    cut = dog.arm(time.monotonic() + 0.02, _answered(_response(pair[0])))
    assert _wait_cut(pair[0], 1.0) < 0.5 and dog.disarm(cut) is True


def test_the_socket_under_a_real_response_is_found(http: ModuleType, servers: dict[str, LoopbackServer]) -> None:
    """The seam finds the socket under a response of httpx's transport (httpcore's
    ``network_stream``) and of httpx2's (httpcore2's), and the watchdog cuts it."""
    a = servers["a"]
    with http.Client() as client, client.stream("GET", a.url() + "/held") as response:
        sock = socket_of(response)
        assert isinstance(sock, socket.socket) and sock.getpeername()[1] == a.port
        dog = _Watchdog()
        ticket = dog.arm(time.monotonic(), _answered(response))
        deadline = time.monotonic() + 2.0
        while ticket in dog._armed and time.monotonic() < deadline:  # until the thread looked
            time.sleep(0.005)
        assert dog.disarm(ticket) is True  # found, and shut down


class _Broken:
    """A response whose extensions cannot be read: looking up its socket raises."""

    @property
    def extensions(self) -> dict[str, object]:
        raise RuntimeError("broken on purpose")


def test_a_cut_that_fails_stops_no_other_deadline(pair: tuple[socket.socket, socket.socket]) -> None:
    """A bug in finding one attempt's socket is logged, that attempt runs its course, and
    the thread goes on cutting the others."""
    dog = _Watchdog()
    broken = dog.arm(time.monotonic() + 0.02, _answered(_Broken()))
    cut = dog.arm(time.monotonic() + 0.05, _answered(_response(pair[0])))
    assert _wait_cut(pair[0], 1.0) < 0.5
    assert dog.disarm(cut) is True and dog.disarm(broken) is False


class _SlowToFind:
    """A ``network_stream`` whose socket takes ``seconds`` to find: the watchdog's thread is
    inside its cut meanwhile. It says when the thread started (``finding``) and notes what
    ``seen()`` tells at the cut's end."""

    def __init__(self, sock: socket.socket | None, seconds: float, seen: Callable[[], object]) -> None:
        self.sock = sock
        self.seconds = seconds
        self.seen = seen
        self.finding = threading.Event()
        self.noted: list[object] = []

    def get_extra_info(self, name: str) -> object:
        if name != "socket":
            return None
        self.finding.set()
        time.sleep(self.seconds)
        self.noted.append(self.seen())
        return self.sock


def test_a_disarm_that_finds_its_ticket_taken_waits_for_the_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    """The thread took the ticket and is finding the socket when the attempt disarms: the
    disarm returns once the socket is shut down, and says so."""
    dog = _Watchdog()
    disarmed: list[bool] = []
    stream = _SlowToFind(pair[0], 0.2, lambda: bool(disarmed))
    ticket = dog.arm(time.monotonic() + 0.02, _answered(httpx.Response(200, extensions={"network_stream": stream})))
    assert stream.finding.wait(2.0)
    cut = dog.disarm(ticket)
    disarmed.append(True)
    assert stream.noted == [False], "the disarm returned while the thread was cutting"
    assert cut is True
    assert _wait_cut(pair[0], 0.01) < 0.01  # shut down before the disarm returned


def test_a_connection_goes_back_to_its_pool_only_once_the_watchdog_is_done() -> None:
    """An attempt's body comes in just as its time runs out and the watchdog takes it: the
    transport hands the connection back (closes the response's stream) only once the cut
    is over. The watchdog finds the socket after it took the ticket; a connection handed
    back meanwhile could serve another request when the cut lands, failing that request
    and blaming its domain. (httpx2's transport sends through the same loop.)"""
    streams: list[_Body] = []
    finders: list[_SlowToFind] = []

    class Inner(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            finder = _SlowToFind(None, 0.2, lambda: body.closed)
            body = _Body(finder.finding)
            finders.append(finder)
            streams.append(body)
            return httpx.Response(
                200, headers={"Content-Length": "2"}, stream=body, extensions={"network_stream": finder}, request=request
            )

    pool = Pool("api", ["http://127.0.0.1:9", "http://127.0.0.1:10"])
    with httpx.Client(transport=FailoverTransport([pool], Policy(attempt_timeout=0.1), transport=Inner())) as client:
        response = client.get("http://127.0.0.1:9/rooms")
    assert response.status_code == 200 and response.content == b"{}"
    assert finders[0].noted == [False], "the connection went back to its pool while the watchdog was cutting it"
    assert streams[0].closed
    # no socket found (an in-process answer): not cut, and answered by its first attempt
    result = response.extensions["failover"]
    assert isinstance(result, FailoverResult)
    assert [a.domain for a in result.attempts] == ["http://127.0.0.1:9"]


class _Body(httpx.SyncByteStream):
    """A body of two bytes that comes in once ``ready`` is set: as the watchdog takes its
    attempt."""

    closed = False

    def __init__(self, ready: threading.Event) -> None:
        self.ready = ready

    def __iter__(self) -> Iterator[bytes]:
        self.ready.wait(2.0)
        yield b"{}"

    def close(self) -> None:
        self.closed = True  # its connection back in its pool


def test_a_hurried_attempt_is_cut_now_and_a_disarmed_one_never(pair: tuple[socket.socket, socket.socket]) -> None:
    """``hurry`` brings an armed attempt's deadline to now (a hedge's loser at its
    transport's close): its socket is cut at the thread's next look, and its disarm says
    so. An attempt disarmed before the look (it ended) is never cut, hurried or not, and
    an attempt armed alongside keeps its own time."""
    dog = _Watchdog()
    other_a, other_b = socket.socketpair()
    ended_a, ended_b = socket.socketpair()
    try:
        hurried = _answered(_response(pair[0]))
        ticket = dog.arm(time.monotonic() + 30.0, hurried)
        bystander = dog.arm(time.monotonic() + 30.0, _answered(_response(other_a)))
        ended = _answered(_response(ended_a))
        dog.disarm(dog.arm(time.monotonic() + 30.0, ended))
        dog.hurry([hurried, ended])
        assert _wait_cut(pair[0], 1.0) < 0.5
        assert dog.disarm(ticket) is True
        time.sleep(0.05)  # the look after the cut
        for sock in (other_a, ended_a):
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # not shut down: nothing to read, and no EOF
                sock.recv(1)
        assert dog.disarm(bystander) is False
    finally:
        for sock in (other_a, other_b, ended_a, ended_b):
            sock.close()


class _Due:
    """A callable whose bound methods are equal to each other (and hash alike)."""

    def __init__(self) -> None:
        self.calls = 0

    def due(self) -> None:
        self.calls += 1


def _until(condition: Callable[[], bool], limit: float) -> None:
    started = time.monotonic()
    while not condition() and time.monotonic() - started < limit:
        time.sleep(0.005)


def test_equal_callables_armed_together_are_tickets_of_their_own() -> None:
    """``call_at`` makes each arm a ticket of its own: two bound methods of one object are
    equal, yet both are called at their time, and disarming one leaves the other armed."""
    dog = _Watchdog()
    both = _Due()
    first = dog.call_at(time.monotonic() + 0.02, both.due)
    second = dog.call_at(time.monotonic() + 0.02, both.due)
    _until(lambda: both.calls == 2, 2.0)
    assert both.calls == 2
    assert dog.disarm(first) is True and dog.disarm(second) is True  # taken: their actions ran
    one = _Due()
    kept = dog.call_at(time.monotonic() + 0.05, one.due)
    assert dog.disarm(dog.call_at(time.monotonic() + 0.05, one.due)) is False  # disarmed in time
    _until(lambda: one.calls == 1, 2.0)
    time.sleep(0.05)  # (a second call would have come by now)
    assert one.calls == 1
    assert dog.disarm(kept) is True


def test_a_client_that_keeps_arming_keeps_the_thread_looking(pair: tuple[socket.socket, socket.socket]) -> None:
    """Each arm() marks the watchdog busy: a client that arms and disarms in turn for longer
    than ``IDLE_AFTER`` keeps the thread looking every ``MAX_SLEEP`` (it never sleeps for
    good), so none of its arms needs to wake it."""
    dog = _Watchdog()
    dog.IDLE_AFTER = 0.05
    dog.MAX_SLEEP = 0.01
    wake = dog._wake = _CountedEvent()
    far = _answered(_response(pair[0]))
    dog.disarm(dog.arm(time.monotonic() + 30.0, far))  # the thread starts
    started = time.monotonic()
    while time.monotonic() - started < 0.3:  # six times IDLE_AFTER
        dog.disarm(dog.arm(time.monotonic() + 30.0, far))
        time.sleep(0.002)
    assert dog._wakes_at != math.inf
    assert wake.sets == 1  # the arm that started it
