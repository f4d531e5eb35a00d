"""Slow-call verdicts leave out the client's own delays where they can be told, and calls
in flight count only on a slow answer's evidence.

- How long a call's request waited in the client before it left (on a new connection,
  all but its set-up's round trips), and how long its answer then sat unread: the
  kernel's word (``_sockets.told``, ``Attempt.waited``), for threads kept from the GIL,
  through httpx's transport and the requests adapter, and for each attempt of a hedged
  request; a hedge cut after the attempt it hedged answered is no evidence at all.
- Calls in flight count as slow only when a slow call ends (``SlowCallWindow.add``), for
  event loops in many threads.

The domains answer from another process (``benchmarks._simulated``), so the CPU-bound
threads here hold up the client and never the servers."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import httpx
import pytest
import requests
from urllib3.connection import HTTPConnection

from benchmarks._simulated import Simulated, simulated
from pytest_failover import (
    AsyncFailoverTransport,
    FailoverTransport,
    Hedging,
    Policy,
    Pool,
    SlowCalls,
)
from pytest_failover._breaker import Breaker
from pytest_failover._exchange import _heading
from pytest_failover._slowness import SlowCallWindow
from pytest_failover._sockets import _TICK, Told, carried, connection, extra_socket, told
from pytest_failover._values import new_attempt
from pytest_failover.integrations import _urllib3
from pytest_failover.integrations._urllib3 import pool_classes
from pytest_failover.integrations.requests import FailoverAdapter

from .load import in_threads, loops_in_threads
from .races import first_and_hedge

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="the kernel's clock is Linux's TCP_INFO")

POLICY = Policy(
    slow_calls=SlowCalls(threshold=0.1, rate=0.5, minimum_calls=5, window=30.0), breaker_cooldown=30.0, sticky=False
)


@contextmanager
def _domains(primary_held: float = 0.0) -> Iterator[tuple[Simulated, str, str]]:
    """Two domains answering in 2 ms from another process; the primary's answers held
    ``primary_held`` seconds more."""
    with simulated(["a.test", "b.test"], base_latency=0.002, max_seconds=120) as sim:
        if primary_held:
            sim.slow("a.test", share=1.0, seconds=primary_held, seed=1)
        yield sim, sim.url("a.test"), sim.url("b.test")


@contextmanager
def _cpu_bound_threads(count: int) -> Iterator[None]:
    """``count`` threads running Python without pause: every other thread of the process
    waits for the GIL each time it wants it back (a 2 ms call took 0.44 s at the median
    with four, here, before the kernel's clock was read)."""
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            sum(range(1000))

    threads = [threading.Thread(target=burn) for _ in range(count)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(10)


FrontEnd = Literal["httpx", "requests"]
# (ids of their own: a test id ending in "[httpx]" is one of the httpx/httpx2 halves, which CI counts)
FRONT_ENDS: list[FrontEnd] = ["httpx", "requests"]
Get = Callable[[str], str]  # a GET of a URL, and the domain that answered it


@contextmanager
def _front_end(
    front_end: FrontEnd, a: str, b: str, *, transport: httpx.BaseTransport | None = None
) -> Iterator[tuple[Get, Callable[[], list[str]]]]:
    """A sync front-end over the pool ``[a, b]`` (httpx's over ``transport``, if given):
    its GET, and where its breakers stand."""
    if front_end == "httpx":
        failover = FailoverTransport([Pool("api", [a, b])], POLICY, transport=transport)
        with httpx.Client(transport=failover) as client:
            yield (lambda url: client.get(url).extensions["failover"].domain), lambda: _breakers(failover)
    else:
        adapter = FailoverAdapter([Pool("api", [a, b])], POLICY)
        with requests.Session() as session:
            session.mount("http://", adapter)
            yield (lambda url: session.get(url).failover.domain), lambda: _breakers(adapter)  # type: ignore[attr-defined]  # the adapter's


def _breakers(front_end: FailoverTransport | AsyncFailoverTransport | FailoverAdapter) -> list[str]:
    return [d.breaker for d in front_end.state().pools["api"].domains]


def _served(get: Get, url: str, count: int) -> Counter[str]:
    """What served ``count`` GETs of ``url`` (20 s at most), one after the other."""
    served: Counter[str] = Counter()
    stop = time.monotonic() + 20
    for _ in range(count):
        if time.monotonic() > stop:
            break
        served[get(url + "/v1/ping")] += 1
    return served


@pytest.mark.parametrize("front_end", FRONT_ENDS, ids=["httpx-transport", "requests-adapter"])
def test_threads_kept_from_the_gil_never_eject_a_healthy_domain(front_end: FrontEnd) -> None:
    """Eight CPU-bound threads beside a sync client: its 2 ms calls take a tenth of a second
    and more, waiting for the GIL before their requests left and after their answers
    came. Before the kernel's clock was read, the primary was ejected after its first 5
    calls and 35 of 40 requests went to the backup (the requests adapter: in 3 runs of 4
    until its own connections counted their requests, its answers' connections gone back
    to urllib3's pool before the call ends)."""
    with _domains() as (_, a, b), _cpu_bound_threads(8), _front_end(front_end, a, b) as (get, breakers):
        served = _served(get, a, 40)
        assert served == Counter({a: 40}), served
        assert breakers() == ["closed", "closed"]


class _LateSender(httpx.HTTPTransport):
    """An inner transport whose every request waits 0.3 s in the client before it goes out
    (as behind other threads holding the GIL, or a hook of the application's)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        time.sleep(0.3)
        return super().handle_request(request)


def test_the_time_before_a_request_left_is_the_clients() -> None:
    """Each call takes 0.3 s and more, all of it before its request left: the kernel says
    when it left, and the domain answered within a few milliseconds of that (the first
    call's connect took the domain its round trip, and the client the rest). The primary
    keeps its traffic; judged on the time after the answer came alone, it was ejected
    after its fifth call."""
    with _domains() as (_, a, b), _front_end("httpx", a, b, transport=_LateSender()) as (get, breakers):
        served = _served(get, a, 8)
        assert served == Counter({a: 8}), served
        assert breakers() == ["closed", "closed"]


@pytest.mark.parametrize("late", ["sending", "reading"])
def test_the_adapters_own_delays_are_the_clients(late: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through the requests adapter, each request held 0.3 s in its connection:
    before its bytes go out (the adapter's connections count their requests,
    ``failover_carried``, so the kernel's word on when it left is read), or after its
    answer came, before its head is read (read as the head comes: by the call's end
    urllib3 has its connection back, with no socket left to ask). Without either word,
    the primary was ejected after its fifth call."""
    if late == "sending":
        send = _urllib3._request

        def sending(*args: Any, **kwargs: Any) -> None:
            time.sleep(0.3)
            send(*args, **kwargs)

        monkeypatch.setattr(_urllib3, "_request", sending)  # what the adapter's connections send with
    else:
        read = HTTPConnection.getresponse

        def reading(self: HTTPConnection) -> Any:
            time.sleep(0.3)
            return read(self)

        monkeypatch.setattr(_urllib3._AnnouncingConnection, "getresponse", reading)
    with _domains() as (_, a, b), _front_end("requests", a, b) as (get, breakers):
        served = _served(get, a, 8)
        assert served == Counter({a: 8}), served
        assert breakers() == ["closed", "closed"]


@pytest.mark.parametrize("front_end", FRONT_ENDS, ids=["httpx-transport", "requests-adapter"])
def test_a_slow_domain_is_still_ejected_from_threads_kept_from_the_gil(front_end: FrontEnd) -> None:
    """The kernel's clock does not excuse the domain: its answers come 0.3 s late, and
    traffic moves to the backup once ``minimum_calls`` calls were slow, CPU-bound threads
    or not."""
    with _domains(primary_held=0.3) as (_, a, b), _cpu_bound_threads(8), _front_end(front_end, a, b) as (get, breakers):
        served = _served(get, a, 20)
        assert served[a] == 5 and served[b] == 15, served
        assert breakers()[0] == "open"


def test_the_adapters_connections_count_their_requests_since_they_connected() -> None:
    """``failover_carried``, which tells ``told`` that a request had no connect in its
    time: 1, 2, 3 on one connection, and 1 again once urllib3 connected it anew (its socket
    dropped), as it does with the same object."""
    with _domains() as (_, a, _b):
        port = int(a.rsplit(":", 1)[1])
        pool = pool_classes(None)["http"]("127.0.0.1", port, maxsize=1)
        counts, connections = [], set()
        for closed in (False, False, True, False):
            response = pool.urlopen("GET", "/v1/ping", preload_content=False, release_conn=False)
            connection = response.connection
            connections.add(id(connection))
            counts.append(getattr(connection, "failover_carried", None))
            response.read()
            response.release_conn()
            if closed:
                assert connection is not None
                connection.close()
        pool.close()
    assert counts == [1, 2, 3, 1] and len(connections) == 1, (counts, connections)


def _threads_sharing(get: Get, url: str, threads: int, each: int) -> Counter[str]:
    """What served ``each`` GETs of ``url`` from each of ``threads`` threads sharing one
    front-end, started together (30 s at most)."""
    served: Counter[str] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(threads)
    stop = time.monotonic() + 30

    def user() -> None:
        start.wait(10)
        for _ in range(each):
            if time.monotonic() > stop:
                return
            domain = get(url + "/v1/ping")
            with lock:
                served[domain] += 1

    in_threads(threads, user, 40)
    return served


@pytest.mark.alone  # four CPU-bound threads and twelve sending ones: the machine's whole time
@pytest.mark.parametrize("front_end", FRONT_ENDS, ids=["httpx-transport", "requests-adapter"])
def test_a_dozen_threads_opening_connections_beside_cpu_bound_ones_keep_a_healthy_domain(front_end: FrontEnd) -> None:
    """Twelve threads share one front-end and start together beside four CPU-bound ones,
    on 2 cores: each opens its connection, and its calls take a tenth of a second and
    more, waiting for the GIL before the connect, between the connect and the request,
    and while the answer sat read but unclosed. Before the kernel was asked about a new
    connection (all but its set-up's round trips is the client's) and as the body closed
    (when its last bytes came), httpx's transport had the primary ejected in 4 runs of 4,
    on its first calls: 16 to 27 of 240 requests stayed on it."""
    with _domains() as (_, a, b), _cpu_bound_threads(4), _front_end(front_end, a, b) as (get, breakers):
        served = _threads_sharing(get, a, 12, 20)
        assert served == Counter({a: 240}), served
        assert breakers() == ["closed", "closed"]


@pytest.mark.alone  # as above
def test_a_dozen_threads_hedging_beside_cpu_bound_ones_keep_both_domains() -> None:
    """The same load, hedged after 20 ms: many calls go over that, their hedges go to the
    backup, and lose and win there in times that are mostly the client's. The backup was
    ejected in 3 runs of 3 by hedges cut past the threshold after the attempt they hedged
    had answered (``RequestPlan._outrun``). The attempts of a hedged request are judged on
    the kernel's word, each on its own socket (``_exchange._heading``): without it, a run's
    four winning hedges were judged slow at 0.8 to 2 s each, and the primary's calls with a
    hedge in flight had it ejected in 1 run of 3."""
    policy = Policy(
        slow_calls=SlowCalls(threshold=0.1, rate=0.5, minimum_calls=5, window=30.0),
        hedging=Hedging(delay=0.02),
        breaker_cooldown=30.0,
        sticky=False,
    )
    with _domains() as (_, a, b), _cpu_bound_threads(4):
        failover = FailoverTransport([Pool("api", [a, b])], policy)
        with httpx.Client(transport=failover) as client:
            served = _threads_sharing(lambda url: client.get(url).extensions["failover"].domain, a, 12, 20)
        assert sum(served.values()) == 240, served  # whichever answered first
        assert _breakers(failover) == ["closed", "closed"]
        assert _backup_window(failover).counts[1] == 0  # none of its calls, won or cut, was slow


@pytest.mark.alone  # as above
def test_a_slow_domain_is_still_ejected_by_a_dozen_threads_beside_cpu_bound_ones() -> None:
    """The same load, the primary's answers 0.3 s late: the twelve first calls, all in
    flight at once, find it slow, and the rest go to the backup."""
    with _domains(primary_held=0.3) as (_, a, b), _cpu_bound_threads(4), _front_end("httpx", a, b) as (get, breakers):
        served = _threads_sharing(get, a, 12, 5)
        assert served[a] <= 12 and served[b] >= 48, served
        assert breakers()[0] == "open"


@pytest.mark.alone  # its first calls open connections: on a machine loaded by other tests, slow on its own time
def test_twelve_event_loops_in_threads_share_a_healthy_domain() -> None:
    """One failover state, twelve threads each running its own event loop (``sharing``)
    with 10 tasks, on 2 cores, starting together: every loop waits for the GIL in turn,
    more than any loop's own lateness shows. The first calls' answers came in time, and
    the calls still in flight then counted as slow ejected the shared primary in about
    one run in four. (Beside the rest of the suite on the same 2 cores, the first calls,
    each opening a connection, can be slow on the client's own time, which the kernel
    cannot tell: it runs alone.)"""
    with _domains() as (_, a, b):
        transport = AsyncFailoverTransport([Pool("api", [a, b])], POLICY)
        results = _twelve_loops(transport, a)
    served = sum(results, Counter[str]())
    assert set(served) == {a}, (served, [d.breaker for d in transport.state().pools["api"].domains])


@pytest.mark.alone  # as above
def test_twelve_event_loops_in_threads_hedging_keep_both_domains() -> None:
    """The same load, hedged after 20 ms: the hedges that won were judged on times that were
    the GIL's, with no kernel's word while two attempts were in flight, and ejected the
    backup in 3 runs of 3 (5 and 6 hedges won, all slow). Each attempt now holds its own
    head (``AsyncLoop._send``), and none of the backup's calls is slow."""
    policy = Policy(
        slow_calls=SlowCalls(threshold=0.1, rate=0.5, minimum_calls=5, window=30.0),
        hedging=Hedging(delay=0.02),
        breaker_cooldown=30.0,
        sticky=False,
    )
    with _domains() as (_, a, b):
        transport = AsyncFailoverTransport([Pool("api", [a, b])], policy)
        _twelve_loops(transport, a)
    assert _breakers(transport) == ["closed", "closed"]
    assert _backup_window(transport).counts[1] == 0


def _twelve_loops(transport: AsyncFailoverTransport, url: str) -> list[Counter[str]]:
    """Twelve threads, each running its own event loop with 10 tasks over a transport sharing
    ``transport``'s state, GETs of ``url`` for 2 s: what served them, per loop."""

    async def run() -> Counter[str]:
        served: Counter[str] = Counter()
        stop = time.monotonic() + 2.0
        async with httpx.AsyncClient(transport=AsyncFailoverTransport.sharing(transport)) as client:

            async def user() -> None:
                for _ in range(200):  # bounded; the clock ends it first
                    if time.monotonic() >= stop:
                        return
                    served[(await client.get(url + "/v1/ping")).extensions["failover"].domain] += 1

            await asyncio.gather(*[user() for _ in range(10)])
        return served

    results = loops_in_threads(12, run)
    counted = [r for r in results if isinstance(r, Counter)]
    assert len(counted) == 12, results
    return counted


def _backup_window(front_end: FailoverTransport | AsyncFailoverTransport) -> SlowCallWindow:
    """The slow-call window of the second domain of ``front_end``'s pool ``api``."""
    pool = front_end._state.core.pools["api"]
    assert pool.slow_calls is not None
    return pool.slow_calls[pool.order[1]]


def _get(transport: httpx.HTTPTransport, url: str) -> httpx.Response:
    """A GET through ``transport`` as a failover front-end sends it: the answer's head in,
    its body unread (the inner transport's response, whose connection ``told`` asks about)."""
    return transport.handle_request(httpx.Request("GET", url + "/v1/ping"))


class _Head:
    """What the exchange keeps as an answer's head comes: its socket and its connection's
    count of requests."""

    def __init__(self, response: httpx.Response) -> None:
        self.sock = extra_socket(response)
        self.connection = connection(response)
        self.carried = carried(self.connection)

    def told(self) -> Told | None:
        moved_on = carried(self.connection) != self.carried
        return told(self.sock, self.carried, time.monotonic(), moved_on=moved_on)


def test_the_kernel_says_when_an_answer_came_and_when_its_request_left() -> None:
    """``told``, the answer read: it came no earlier than 0.2 s after its request left (the
    domain held it), and no later than the client read its head (but for the kernel's
    count of ticks, which truncates at both of its ends: two ticks at most), however long
    the client then sat on it. On a new connection the
    domain may have taken its set-up's round trips of the time before it left (on
    loopback, well under a millisecond); on a kept-alive one, none of it."""
    with _domains(primary_held=0.2) as (_, a, _b), httpx.HTTPTransport() as transport:
        first = _get(transport, a)
        new = _Head(first).told()
        assert new is not None and new.setup is not None and 0.0 < new.setup < 0.003, new
        first.read()
        first.close()
        began = time.monotonic()
        response = _get(transport, a)
        head_at = time.monotonic()
        head = _Head(response)
        time.sleep(0.3)  # the client sits on it
        word = head.told()
        response.read()
        assert word is not None and word.left_at is not None, word
        ticks = 2 * _TICK + 0.001  # (under load, came_at was seen 11.6 ms past the head)
        assert began - ticks <= word.left_at and word.left_at + 0.2 <= word.came_at <= head_at + ticks, (word, began, head_at)
        assert word.setup == 0.0


def test_an_answer_ends_no_later_than_the_next_request_on_its_connection() -> None:
    """Once the connection carried the next request (held 0.2 s by the domain, answered
    just now), the kernel's last receipt is that request's answer: the first answer's end
    is bounded by that request's departure instead, 0.2 s and more ago, and when the first
    request left is not known."""
    with _domains(primary_held=0.2) as (_, a, _b), httpx.HTTPTransport() as transport:
        _get(transport, a).read()  # a connection kept alive
        response = _get(transport, a)
        head = _Head(response)
        response.read()
        response.close()
        came = time.monotonic()
        _get(transport, a).read()  # the next request on the same connection
        word = head.told()
        assert word is not None and word.left_at is None and word.setup is None, word
        ticks = 2 * _TICK + 0.001  # (the kernel's count truncates at both ends; told() adds a tick)
        assert came <= word.came_at <= time.monotonic() - 0.2 + ticks, (word, came)


def test_no_socket_no_word() -> None:
    """An answer made in process, or one whose connection closed, tells nothing."""
    assert extra_socket(httpx.Response(200, content=b"{}")) is None
    assert told(None, 2, 1.0) is None
    with _domains() as (_, a, _b), httpx.Client() as client:
        response = client.get(a + "/v1/ping", headers={"Connection": "close"})
        assert told(extra_socket(response), 1, time.monotonic()) is None


def test_a_head_is_told_to_the_attempt_it_came_for() -> None:
    """Of the attempts in flight, the one the loop gave the head to; none if none holds it
    (an attempt a race cut meanwhile is gone from the list)."""
    breaker = Breaker(threshold=1, cooldown=1.0)
    domain = Pool("api", ["https://a.example"]).domains[0]
    first, hedge = (new_attempt(n, domain, breaker, 0.0, 1.0, 0.0) for n in (1, 2))
    head = httpx.Response(200)
    assert _heading([first, hedge], head) is None
    hedge.response = head
    assert _heading([first, hedge], head) is hedge
    assert _heading([first], head) is None


def test_a_hedged_requests_attempts_are_each_told_their_own_socket() -> None:
    """A hedge and the attempt it hedged each hold their own head as it comes (the loops'
    ``_send``): the exchange asks the kernel about that one's socket, which it did for no
    attempt while two were in flight."""
    policy = Policy(hedging=Hedging(delay=0.01, max_ratio=1.0), slow_calls=POLICY.slow_calls, sticky=False)
    transport = FailoverTransport([Pool("api", ["http://a.test", "http://b.test"])], policy, httpx.MockTransport(_ok))
    exchange, first, hedge = first_and_hedge(transport, "http://a.test/x")
    sock = _Socket(sent_ms=120, received_ms=100, rtt_us=2000, retransmits=0)
    head = httpx.Response(200, content=b"{}", extensions={"network_stream": _Stream(sock)})
    hedge.response = head
    exchange.reads(head)
    assert hedge.sock is sock and first.sock is None


def _ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"{}")


class _Stream:
    """A ``network_stream`` over ``sock``."""

    def __init__(self, sock: object) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None


class _Socket:
    """A socket whose ``TCP_INFO`` says what a test has it say."""

    def __init__(self, sent_ms: int, received_ms: int, rtt_us: int, retransmits: int) -> None:
        fields = [0] * 24
        fields[9], fields[11], fields[15], fields[23] = sent_ms, received_ms, rtt_us, retransmits
        self.info = bytes(8) + struct.pack("=24I", *fields)

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        assert (level, option) == (socket.IPPROTO_TCP, socket.TCP_INFO)
        return self.info[:size]


@pytest.mark.parametrize(
    ("count", "retransmits", "setup"),
    [
        (2, 0, 0.0),  # kept alive: the time before it left was the client's
        (1, 0, 3 * 0.002),  # new: the domain's for its set-up's round trips (TCP, TLS 1.2's two)
        (1, 1, None),  # new, and a segment (its SYN, say) sent again: all of it may be the network's
        (0, 0, None),  # not known whether new: all of it may be the domain's
    ],
)
def test_what_the_kernels_fields_say(count: int, retransmits: int, setup: float | None) -> None:
    """What ``told`` makes of the kernel's fields, at 10.0 s on the clock: the request left
    120 ms ago (a tick earlier), its answer came 100 ms ago (a tick later), round trips of
    2 ms. Once the connection carried another request, its departure (30 ms ago, a tick
    later) bounds the answer's end; with nothing received since the request left, nothing
    is told."""
    word = told(_Socket(sent_ms=120, received_ms=100, rtt_us=2000, retransmits=retransmits), count, 10.0)
    assert word is not None and word.left_at == pytest.approx(9.87) and word.came_at == pytest.approx(9.91), word
    assert word.setup == (None if setup is None else pytest.approx(setup)), word
    moved = told(_Socket(sent_ms=30, received_ms=10, rtt_us=2000, retransmits=0), 2, 10.0, moved_on=True)
    assert moved is not None and moved.left_at is None and moved.came_at == pytest.approx(9.98), moved
    assert told(_Socket(sent_ms=100, received_ms=120, rtt_us=2000, retransmits=0), 2, 10.0) is None
