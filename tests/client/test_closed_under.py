"""A failover transport closed while requests are in flight (by another thread, or by one
of several clients sharing it, each closing it as it leaves its ``with``): the requests it
cut end with the caller's ``RuntimeError``, and no domain is blamed: no breaker moves, no
request goes to the backup. Real loopback servers, httpx's (and httpx2's) own inner
transports."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest_failover
from pytest_failover import Hedging, Policy, Pool
from pytest_failover import httpx2 as pf2

from .servers import LoopbackServer

THREADS = 6
CLOSED = "was closed while this request was in flight"
# How long the server holds each answer: the close comes first even if the test's thread
# is held up a while on a loaded machine (a sync request cut by it still waits for its
# answer to come before its read fails: a close does not wake a blocked poll()).
HELD = 1.5
# One failure would open a breaker: a cut blamed on the primary shows at once.
POLICY = Policy(breaker_threshold=1, attempt_timeout=10.0, deadline=20.0)
HEDGING = Policy(
    breaker_threshold=1, attempt_timeout=10.0, deadline=20.0, hedging=Hedging(delay=0.05, max_ratio=1.0)
)


def failover(http: ModuleType) -> Any:
    return pytest_failover if http.__name__ == "httpx" else pf2


def breakers(transport: Any) -> list[str]:
    return [d.breaker for d in transport.state().pools["api"].domains]


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def closed_under_threads(transport: Any, http: ModuleType, url: str, sent: Callable[[], bool]) -> list[object]:
    """Each of ``THREADS`` threads GETs ``url`` through one client over ``transport``; once
    ``sent()`` holds, the transport is closed. What each request ended with: a status, or
    the exception it raised."""
    client = http.Client(transport=transport)
    outcomes: list[object] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        try:
            outcome: object = client.get(f"{url}/t/{i}").status_code
        except BaseException as exc:  # kept, asserted on by the caller
            outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    until(sent)
    transport.close()
    for thread in threads:
        thread.join(10.0)
    assert len(outcomes) == THREADS
    return outcomes


def closed_under_tasks(transport: Any, http: ModuleType, url: str, sent: Callable[[], bool]) -> list[object]:
    """The async twin of :func:`closed_under_threads`: ``THREADS`` tasks, one event loop."""

    async def main() -> list[object]:
        client = http.AsyncClient(transport=transport)

        async def send(i: int) -> int:
            return int((await client.get(f"{url}/t/{i}")).status_code)

        tasks = [asyncio.ensure_future(send(i)) for i in range(THREADS)]
        await asyncio.to_thread(until, sent)
        await transport.aclose()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10.0)

    return asyncio.run(main())


def cut(outcome: object) -> bool:
    """Did the request end as the caller's, cut by the close?"""
    return isinstance(outcome, RuntimeError) and CLOSED in str(outcome)


def test_threads_whose_shared_transport_is_closed_under_them_blame_no_domain(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """Six threads' requests in flight on one client when its transport closes."""
    a, b = servers["a"], servers["b"]
    a.set(delay=HELD)  # the requests are in flight when the transport closes
    transport = failover(http).FailoverTransport(Pool("api", [a.url(), b.url()]), POLICY)
    outcomes = closed_under_threads(transport, http, a.url(), lambda: a.total >= THREADS)
    assert all(cut(outcome) for outcome in outcomes), outcomes
    assert all(isinstance(o, RuntimeError) and isinstance(o.__cause__, http.TransportError) for o in outcomes)
    assert breakers(transport) == ["closed", "closed"]
    assert b.total == 0  # no request moved to the backup


def test_tasks_whose_shared_transport_is_closed_under_them_blame_no_domain(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """Six tasks' requests in flight on one client when its transport closes."""
    a, b = servers["a"], servers["b"]
    a.set(delay=HELD)
    transport = failover(http).AsyncFailoverTransport(Pool("api", [a.url(), b.url()]), POLICY)
    outcomes = closed_under_tasks(transport, http, a.url(), lambda: a.total >= THREADS)
    assert all(cut(outcome) for outcome in outcomes), outcomes
    assert breakers(transport) == ["closed", "closed"]
    assert b.total == 0


def test_without_the_close_the_same_cut_is_the_domains_failure(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """The control: the same requests, cut by the server instead (a reset), are the
    domain's failure and move to the backup."""
    a, b = servers["a"], servers["b"]
    a.set(reset=True)
    with http.Client(
        transport=failover(http).FailoverTransport(Pool("api", [a.url(), b.url()]), POLICY)
    ) as client:
        assert client.get(f"{a.url()}/t").status_code == 200
        assert breakers(client._transport) == ["open", "closed"]
    assert b.total == 1


def test_a_transport_used_again_after_its_close_fails_over_as_before(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """As bare httpx's, a closed transport opens connections again for the next request
    (each ``with`` of a client closes it); an attempt that fails after the close was sent
    after it, on a connection of its own: the domain's failure, which moves the request."""
    a, b = servers["a"], servers["b"]
    transport = failover(http).FailoverTransport(Pool("api", [a.url(), b.url()]), POLICY)
    with http.Client(transport=transport) as client:
        assert client.get(f"{a.url()}/t").status_code == 200
    a.set(reset=True)
    with http.Client(transport=transport) as client:
        assert client.get(f"{a.url()}/t").status_code == 200
    assert breakers(transport) == ["open", "closed"]
    assert b.total == 1


def test_hedged_requests_whose_transport_is_closed_under_them_blame_no_domain(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """The same with hedging: the requests' first attempts and their hedges (both domains
    slow) are in flight, on the callers' threads and the hedge threads, when the transport
    closes. Its close waits for the hedge threads (``ThreadRace.close``), so the attempts
    in flight mostly end answered first; any it cuts are the caller's, as above."""
    a, b = servers["a"], servers["b"]
    a.set(delay=0.5)
    b.set(delay=0.5)
    transport = failover(http).FailoverTransport(Pool("api", [a.url(), b.url()]), HEDGING)
    # every first attempt on the wire, and hedges (as many as the throttle lets go: 5 of 6 here)
    outcomes = closed_under_threads(transport, http, a.url(), lambda: a.total >= THREADS and b.total >= THREADS - 1)
    assert all(outcome == 200 or cut(outcome) for outcome in outcomes), outcomes  # never a domain's failure
    assert breakers(transport) == ["closed", "closed"]


def test_hedged_tasks_whose_transport_is_closed_under_them_blame_no_domain(
    servers: dict[str, LoopbackServer], http: ModuleType
) -> None:
    """The async twin: each task races its first attempt and its hedge in its own task group
    when the transport closes; both are cut, and nothing is blamed."""
    a, b = servers["a"], servers["b"]
    a.set(delay=HELD)
    b.set(delay=HELD)
    transport = failover(http).AsyncFailoverTransport(Pool("api", [a.url(), b.url()]), HEDGING)
    outcomes = closed_under_tasks(transport, http, a.url(), lambda: a.total >= THREADS and b.total >= THREADS - 1)
    assert all(cut(outcome) for outcome in outcomes), outcomes
    assert breakers(transport) == ["closed", "closed"]


def test_closing_a_hedging_requests_adapter_cuts_the_losers_still_reading() -> None:
    """The requests adapter's hedges run from its pool, and a loser reading its body cannot
    be cut when its race ends (urllib3 hands its connection back inside that read). Its
    answer is nobody's: the adapter's close cuts it then, as the watchdog does at its time,
    instead of waiting for it. Before, the close took as long as the body did (4 s here,
    up to the attempt's time). Nothing is blamed: the loser was counted cancelled."""
    import requests

    from pytest_failover.integrations.requests import FailoverAdapter

    from .test_deadline import Trickler

    primary = Trickler(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n")  # then a byte every 0.1 s
    backup = LoopbackServer("backup")
    try:
        with requests.Session() as session:
            adapter = FailoverAdapter([Pool("api", [primary.url, backup.url()])], HEDGING)
            session.mount("http://", adapter)
            served = [session.get(primary.url + "/x").headers["X-Served-By"] for _ in range(3)]
            started = time.monotonic()
            adapter.close()
            took = time.monotonic() - started
        assert served == ["backup"] * 3  # each hedge won, each loser still reading the trickle
        assert took < 1.0, f"the close waited {took:.2f} s for the losers"
        assert breakers(adapter) == ["closed", "closed"]
    finally:
        primary.close()
        backup.close()
