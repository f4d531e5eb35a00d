"""Hedged requests and slow-call ejection (issue #11), over real loopback sockets."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest

from pytest_failover import (
    AllDomainsFailed,
    AsyncFailoverTransport,
    ExponentialBackoff,
    FailoverResult,
    FailoverTransport,
    Hedging,
    Policy,
    Pool,
    SlowCalls,
)
from pytest_failover._breaker import BreakerState
from pytest_failover._exchange import Exchange
from pytest_failover._values import Attempt, Stop

from .garbage import left_for_the_collector
from .races import first_and_hedge
from .servers import LoopbackServer
from .test_abandoned import busy
from .test_telemetry import Otel, otel

__all__ = ["otel"]


def hedged(delay: float | None = 0.05, **kw: Any) -> Policy:
    hedging = kw.pop("hedging", None) or Hedging(delay=delay, max_ratio=1.0)
    return Policy(
        schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
        hedging=hedging,
        sticky=False,
        **kw,
    )


def result_of(response: httpx.Response) -> FailoverResult:
    info = response.extensions["failover"]
    assert isinstance(info, FailoverResult)
    return info


def warm(client: httpx.Client, url: str, count: int) -> None:
    """Requests that earn the pool's throttle its first tokens (it starts empty)."""
    for _ in range(count):
        client.get(url, extensions={"failover": {"hedge": False}})


def test_a_slow_primary_is_hedged_to_the_backup_and_the_loser_is_cancelled(
    make_client: Any, servers: dict[str, LoopbackServer]
) -> None:
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], hedged(hedging=Hedging(delay=0.05, max_ratio=1.0)))
    client.request("GET", a.url() + "/warm")  # earns the throttle a token
    at_b = b.counts["GET"]  # (a hedge of its own, on a machine slow enough to take 50 ms)
    a.set(delay=1.0)
    started = time.monotonic()
    view = client.request("GET", a.url() + "/rooms")
    elapsed = time.monotonic() - started
    assert view.status_code == 200 and view.headers["X-Served-By"] == "b"
    assert elapsed < 0.6, elapsed  # not the primary's 1 s
    assert view.failover is not None and view.failover.domain == b.url()  # the winner, not the last record
    first, second = sorted(view.failover.attempts, key=lambda r: r.number)
    assert (first.domain, first.hedge, first.race, first.error_type) == (a.url(), False, "cancelled", "cancelled")
    assert (second.domain, second.hedge, second.race, second.error_type) == (b.url(), True, "won", None)
    assert first.sent  # it was on the wire when it was cut
    assert a.counts["GET"] == 2 and b.counts["GET"] == at_b + 1  # the warm-up, the slow one; the hedge


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_cancelled_loser_leaves_no_half_read_connection(kind: str, servers: dict[str, LoopbackServer]) -> None:
    """After the hedge won, the primary's connection is closed, not returned half-read:
    every later request on the primary gets its own answer."""
    a, b = servers["a"], servers["b"]
    pools = [Pool("api", [a.url(), b.url()])]
    policy = hedged(0.05)

    def check(pool: Any) -> None:
        states = [c.info() for c in pool.connections]
        assert all("ACTIVE" not in s for s in states), states

    if kind == "sync":
        inner = httpx.HTTPTransport()
        with httpx.Client(transport=FailoverTransport(pools, policy, inner)) as client:
            warm(client, a.url(), 1)
            a.set(delay=0.4, body=b'{"slow": true}')
            assert client.get(a.url() + "/x").headers["X-Served-By"] == "b"
            time.sleep(0.5)  # the loser's thread ends and closes its response
            check(inner._pool)
            a.set(body=b'{"who": "a"}')
            for i in range(20):
                r = client.get(a.url() + f"/n{i}", extensions={"failover": {"domain": a.url()}})
                assert r.json() == {"who": "a"}
            check(inner._pool)
        return

    async def main() -> None:
        inner = httpx.AsyncHTTPTransport()
        async with httpx.AsyncClient(transport=AsyncFailoverTransport(pools, policy, inner)) as client:
            await client.get(a.url(), extensions={"failover": {"hedge": False}})
            a.set(delay=0.4, body=b'{"slow": true}')
            assert (await client.get(a.url() + "/x")).headers["X-Served-By"] == "b"
            check(inner._pool)  # cancelled at once: nothing left in flight
            a.set(body=b'{"who": "a"}')
            for i in range(20):
                r = await client.get(a.url() + f"/n{i}", extensions={"failover": {"domain": a.url()}})
                assert r.json() == {"who": "a"}
            check(inner._pool)

    asyncio.run(main())


def test_the_throttle_holds_max_ratio_under_concurrency(servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"], servers["b"]
    a.set(delay=0.15)
    requests = 60
    ratio = 0.1
    policy = hedged(hedging=Hedging(delay=0.02, max_ratio=ratio))

    async def main() -> list[httpx.Response]:
        transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], policy)
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            return list(await asyncio.gather(*(client.get(a.url() + f"/{i}") for i in range(requests))))

    responses = asyncio.run(main())
    assert all(r.status_code == 200 for r in responses)
    hedges = sum(1 for r in responses for rec in result_of(r).attempts if rec.hedge)
    assert b.total == hedges  # the server counts what the client says it sent
    assert 1 <= hedges <= ratio * requests


def test_a_post_without_an_idempotency_key_is_never_hedged(servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"], servers["b"]
    with httpx.Client(transport=FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.02))) as client:
        warm(client, a.url(), 2)
        a.set(delay=0.2)
        r = client.post(a.url() + "/orders", content=b"{}")
        assert r.headers["X-Served-By"] == "a" and [x.hedge for x in result_of(r).attempts] == [False]
        assert b.total == 0
        keyed = client.post(a.url() + "/orders", content=b"{}", headers={"Idempotency-Key": "k1"})
        assert keyed.headers["X-Served-By"] == "b" and b.counts["POST"] == 1


def test_no_hedge_when_the_request_says_so_or_to_an_open_domain(servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"], servers["b"]
    policy = hedged(0.02, breaker_threshold=1, breaker_cooldown=30.0)
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy)
    with httpx.Client(transport=transport) as client:
        warm(client, a.url(), 2)
        a.set(delay=0.2)
        off = client.get(a.url() + "/x", extensions={"failover": {"hedge": False}})
        assert off.headers["X-Served-By"] == "a" and b.total == 0
        b.set(status=503)
        client.get(b.url() + "/x", extensions={"failover": {"domain": b.url()}})  # opens b's breaker
        assert transport.state().pools["api"].domains[1].breaker == "open"
        b.set()
        seen = b.total
        r = client.get(a.url() + "/y")
        assert r.headers["X-Served-By"] == "a" and b.total == seen
        assert [x.hedge for x in result_of(r).attempts] == [False]


def test_the_adaptive_delay_follows_the_primarys_latency(servers: dict[str, LoopbackServer]) -> None:
    """``Hedging()`` waits the primary's latency at the percentile: fast answers keep
    hedges early; when the primary slows down for everyone, the delay grows with it,
    so an answer that would have been hedged before is waited for now (a hedge is for
    the tail, not for a domain that is slow throughout)."""
    a, b = servers["a"], servers["b"]
    policy = hedged(hedging=Hedging(percentile=0.9, max_ratio=1.0))
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy)
    core = transport._state.core.pools["api"]
    primary = core.order[0]
    with httpx.Client(transport=transport) as client:
        for _ in range(20):
            client.get(a.url())
        fast = core.hedge_delay(primary)
        assert fast < 0.05, fast  # loopback answers: milliseconds
        a.set(delay=0.15)
        for _ in range(30):  # the top 30 of 50 answers: the p90 is a slow one
            client.get(a.url(), extensions={"failover": {"hedge": False}})
        slow = core.hedge_delay(primary)
        assert 0.15 <= slow < 0.6, slow
        # slower than the fast delay, and 90 ms faster than the slow one (a loaded
        # machine's lag stays well inside that)
        a.set(delay=0.06)
        seen = b.total
        r = client.get(a.url())
        assert r.headers["X-Served-By"] == "a" and b.total == seen


def test_the_deadline_bounds_a_hedged_request(make_client: Any, servers: dict[str, LoopbackServer]) -> None:
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], hedged(0.05, deadline=0.4))
    client.request("GET", a.url())  # earns the throttle a token
    a.set(delay=2.0)
    b.set(delay=2.0)
    started = time.monotonic()
    with pytest.raises((AllDomainsFailed, *client.transport_errors)):
        client.request("GET", a.url() + "/slow")
    assert time.monotonic() - started < 1.0
    # the hedge went, and was cut at the deadline too (on a loaded machine the first
    # request may have hedged to b as well: its answer can take longer than 0.05 s)
    assert b.total_settled(1, path="/slow") == 1


def test_slow_calls_eject_the_domain_and_it_recovers_through_one_probe(
    servers: dict[str, LoopbackServer], otel: Otel
) -> None:
    a, b = servers["a"], servers["b"]
    policy = Policy(
        slow_calls=SlowCalls(threshold=0.1, rate=0.5, minimum_calls=3, window=30.0),
        breaker_cooldown=0.5,
        sticky=False,
    )
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy, **otel.kwargs)
    with httpx.Client(transport=transport) as client:
        a.set(delay=0.15)
        served = [client.get(a.url()).headers["X-Served-By"] for _ in range(5)]
        assert served == ["a", "a", "a", "b", "b"]  # moved after minimum_calls slow calls
        assert transport.state().pools["api"].domains[0].breaker == "open"
        time.sleep(0.55)
        before = a.total
        served = [client.get(a.url()).headers["X-Served-By"] for _ in range(3)]
        # still slow: the one probe answered slowly, counts as failed, the domain stays out
        assert a.total == before + 1 and served[1:] == ["b", "b"]
        assert transport.state().pools["api"].domains[0].breaker == "open"
        a.set()
        time.sleep(0.55)
        served = [client.get(a.url()).headers["X-Served-By"] for _ in range(3)]
        assert served == ["a", "a", "a"]  # the probe answered fast: back
    transitions = otel.points("failover.breaker.transitions")
    opened = [attrs for attrs, _ in transitions if attrs.get("failover.breaker.to") == "open"]
    assert any(attrs.get("failover.reason") == "slow_calls" for attrs in opened)
    (slow,) = [p.value for attrs, p in otel.points("failover.slow_calls") if attrs["failover.domain"] == a.url()]
    assert slow >= 4


def test_slow_calls_never_eject_the_last_working_domain(servers: dict[str, LoopbackServer]) -> None:
    """When every domain is slow (or the client itself is: an overloaded event loop
    times every answer late), slow calls take out at most all but one: slow answers
    beat none. Both breakers used to open, and every request then failed with
    ``CircuitOpenError`` although both domains answered."""
    a, b = servers["a"], servers["b"]
    policy = Policy(
        slow_calls=SlowCalls(threshold=0.05, rate=0.5, minimum_calls=3, window=30.0),
        breaker_cooldown=30.0,
        sticky=False,
    )
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy)
    a.set(delay=0.08)
    b.set(delay=0.08)
    with httpx.Client(transport=transport) as client:
        statuses = [client.get(a.url()).status_code for _ in range(10)]
    assert statuses == [200] * 10
    breakers = [d.breaker for d in transport.state().pools["api"].domains]
    assert breakers == ["open", "closed"]  # the primary was ejected, the backup kept


def test_a_hedge_never_goes_to_a_suspect_domain(servers: dict[str, LoopbackServer]) -> None:
    """A sticky pool that moved to the backup after one failure of the primary keeps
    its hedges off the primary for the cooldown: the primary failed, and traffic goes
    back there through one probe. Hedges used to go there, past the single-probe rule
    (with 200 tasks, 7 a cooldown reached a dead primary)."""
    a, b = servers["a"], servers["b"]
    policy = Policy(
        schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
        hedging=Hedging(delay=0.02, max_ratio=1.0),
        breaker_cooldown=30.0,
    )
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy)
    with httpx.Client(transport=transport) as client:
        warm(client, a.url(), 3)
        a.set(status=503)
        assert result_of(client.get(a.url())).domain == b.url()  # moved: the primary is suspect
        a.set()
        b.set(delay=0.1)  # the backup is slow now: each request would hedge
        before = a.total
        for _ in range(3):
            assert result_of(client.get(a.url())).domain == b.url()
    assert a.total == before  # no hedge reached the suspect primary


def test_a_sync_hedge_cut_before_its_send_began_is_reported_as_the_network_saw_it(
    servers: dict[str, LoopbackServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync hedge launched just as the attempt it races answered is cut before its
    thread reached the network; its thread still sends it, and its record says so
    (``sent=True``): it said ``sent=False`` for a request the backup then received."""
    a, b = servers["a"], servers["b"]
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.02))
    send = FailoverTransport._send

    def late_hedge(self: FailoverTransport, exchange: Any, flight: Any) -> httpx.Response:
        if flight.hedge:
            time.sleep(0.15)  # its thread is held up: the primary answers meanwhile
        response: httpx.Response = send(self, exchange, flight)
        return response

    monkeypatch.setattr(FailoverTransport, "_send", late_hedge)
    with httpx.Client(transport=transport) as client:
        warm(client, a.url(), 1)
        a.set(delay=0.06)
        before = b.total
        result = result_of(client.get(a.url()))
        time.sleep(0.3)  # the hedge's thread goes on to the network
    (hedge,) = [r for r in result.attempts if r.hedge]
    assert (hedge.race, b.total - before) == ("cancelled", 1)
    assert hedge.sent


def test_a_hedge_has_its_own_span_and_the_hedges_metric_says_how_it_ended(
    servers: dict[str, LoopbackServer], otel: Otel
) -> None:
    a, b = servers["a"], servers["b"]
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), **otel.kwargs)
    with httpx.Client(transport=transport) as client:
        warm(client, a.url(), 1)
        a.set(delay=0.3)
        client.get(a.url() + "/x")
        time.sleep(0.35)
    spans = [s for s in otel.finished() if s.name == "GET"]
    hedges = [s for s in spans if (s.attributes or {}).get("failover.hedge") is True]
    assert len(hedges) == 1 and (hedges[0].attributes or {})["failover.domain"] == b.url()
    cancelled = [s for s in spans if (s.attributes or {}).get("error.type") == "cancelled"]
    assert len(cancelled) == 1 and (cancelled[0].attributes or {})["failover.domain"] == a.url()
    outcomes = {attrs["failover.hedge.outcome"]: p.value for attrs, p in otel.points("failover.hedges")}
    assert outcomes == {"won": 1}


def _three_gets(kind: str, pools: list[Pool], policy: Policy, otel: Otel, urls: list[str],
                between: Any) -> tuple[list[str], FailoverTransport | AsyncFailoverTransport]:
    """GET each URL in turn (sync or async) through one transport; ``between(response)``
    runs after each; the servers that answered, and the transport."""
    served: list[str] = []
    if kind == "sync":
        sync = FailoverTransport(pools, policy, **otel.kwargs)
        with httpx.Client(transport=sync) as client:
            for url in urls:
                response = client.get(url)
                served.append(response.headers["X-Served-By"])
                between(response)
        return served, sync
    transport = AsyncFailoverTransport(pools, policy, **otel.kwargs)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            for url in urls:
                response = await client.get(url)
                served.append(response.headers["X-Served-By"])
                between(response)

    asyncio.run(main())
    return served, transport


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_hedge_that_wins_does_not_move_the_pool(kind: str, servers: dict[str, LoopbackServer], otel: Otel) -> None:
    """One slow answer raced and won by the backup says nothing about where the pool's
    traffic goes: no switch is reported (twice, there and back) and the pool keeps its
    serving domain."""
    a, b = servers["a"], servers["b"]

    def between(response: httpx.Response) -> None:
        a.set(delay=0.3 if response.url.path == "/warm" else 0.0)

    served, transport = _three_gets(
        kind, [Pool("api", [a.url(), b.url()])], Policy(hedging=Hedging(delay=0.05, max_ratio=1.0)), otel,
        [a.url() + "/warm", a.url() + "/slow", a.url() + "/after"], between,
    )  # fmt: skip
    assert served == ["a", "b", "a"]  # the hedge won the slow one
    assert otel.points("failover.switches") == []
    assert transport.state().pools["api"].sticky == a.url()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_hedge_that_wins_after_the_first_attempt_failed_moves_the_pool(
    kind: str, servers: dict[str, LoopbackServer], otel: Otel
) -> None:
    """The primary answered 503 while the hedge was on its way: that is a failover, and
    the sticky pool stays on the backup."""
    a, b = servers["a"], servers["b"]

    def between(response: httpx.Response) -> None:
        if response.url.path == "/warm":
            a.set(delay=0.2, status=503)
            b.set(delay=0.4)
        else:
            b.set()

    served, transport = _three_gets(
        kind, [Pool("api", [a.url(), b.url()])], Policy(hedging=Hedging(delay=0.05, max_ratio=1.0)), otel,
        [a.url() + "/warm", a.url() + "/failing", a.url() + "/after"], between,
    )  # fmt: skip
    assert served == ["a", "b", "b"]
    [(attrs, point)] = otel.points("failover.switches")
    assert (attrs["failover.to"], attrs["failover.reason"], point.value) == (b.url(), "503", 1)
    assert transport.state().pools["api"].sticky == b.url()


@pytest.mark.parametrize("backend", ["asyncio", "trio", "threads"])
@pytest.mark.parametrize("winner", ["hedge", "first"])
def test_the_race_under_asyncio_trio_and_threads(
    backend: str, winner: str, servers: dict[str, LoopbackServer]
) -> None:
    """Every race loop: the hedge wins over a slow primary (a sync primary is cut by
    its socket), or the primary wins over a slower hedge; either way the loser is cut
    at once and each server saw one attempt."""
    a, b = servers["a"], servers["b"]

    def set_up() -> None:
        a.reset_records()
        a.set(delay=0.5 if winner == "hedge" else 0.1)
        b.set(delay=0.0 if winner == "hedge" else 0.5)

    def sync() -> httpx.Response:
        transport = FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05))
        with httpx.Client(transport=transport) as client:
            warm(client, a.url(), 1)
            set_up()
            return client.get(a.url() + "/x")

    async def main() -> httpx.Response:
        transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05))
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(a.url(), extensions={"failover": {"hedge": False}})
            set_up()
            return await client.get(a.url() + "/x")

    started = time.monotonic()
    response = sync() if backend == "threads" else anyio.run(main, backend=backend)
    assert time.monotonic() - started < 0.45
    served = "b" if winner == "hedge" else "a"
    assert response.headers["X-Served-By"] == served
    assert result_of(response).domain == (b.url() if winner == "hedge" else a.url())
    races = {r.domain: r.race for r in result_of(response).attempts}
    loser = a.url() if winner == "hedge" else b.url()
    assert races == {(b.url() if winner == "hedge" else a.url()): "won", loser: "cancelled"}
    assert a.total_settled(1) == 1 and b.total_settled(1) == 1


def test_a_hedge_due_while_every_hedging_thread_is_busy_goes_a_delay_later(
    servers: dict[str, LoopbackServer],
) -> None:
    """``Hedging(threads=1)``, two requests at once on a primary that answers in 1 s: both
    hedges are due at 20 ms; the first takes the one thread (the backup holds it 0.2 s),
    so the second is postponed a delay at a time until the thread is free, and then goes.
    Both are answered by the backup; without the postponement the second would wait for
    the primary."""
    a, b = servers["a"], servers["b"]
    transport = FailoverTransport(
        [Pool("api", [a.url(), b.url()])], hedged(hedging=Hedging(delay=0.02, max_ratio=1.0, threads=1))
    )
    results: dict[int, httpx.Response] = {}

    def send(i: int) -> None:
        results[i] = client.get(a.url() + f"/{i}")

    with httpx.Client(transport=transport, timeout=5) as client:
        a.set(delay=1.0)
        b.set(delay=0.2)
        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert sorted(results) == [0, 1]
    assert [results[i].headers["X-Served-By"] for i in (0, 1)] == ["b", "b"]
    for response in results.values():
        won = [r for r in result_of(response).attempts if r.race == "won"]
        assert [(r.domain, r.hedge) for r in won] == [(b.url(), True)]
    assert b.counts["GET"] == 2  # one hedge each, none lost to the throttle or the pool


def test_a_dozen_threads_share_a_hedging_transport_without_a_failure(servers: dict[str, LoopbackServer]) -> None:
    """12 threads x 15 requests on one sync transport while the primary turns slow and
    back: every request is answered (hedged when the pool has threads for it, else
    sent from its own thread), and every hedging thread is back when it is closed."""
    a, b = servers["a"], servers["b"]
    transport = FailoverTransport(
        [Pool("api", [a.url(), b.url()])], hedged(hedging=Hedging(delay=0.02, max_ratio=0.5, threads=6))
    )
    failures: list[BaseException] = []
    served: Counter[str] = Counter()
    lock = threading.Lock()

    def user(n: int) -> None:
        for i in range(15):
            try:
                r = client.get(a.url() + f"/{n}/{i}")
                with lock:
                    served[r.headers["X-Served-By"]] += 1
            except BaseException as exc:
                with lock:
                    failures.append(exc)

    with httpx.Client(transport=transport, timeout=5) as client:
        threads = [threading.Thread(target=user, args=(n,)) for n in range(12)]
        for t in threads:
            t.start()
        for flip in range(6):
            a.set(delay=0.1 if flip % 2 == 0 else 0.0)
            time.sleep(0.1)
        a.set()
        for t in threads:
            t.join(30)
    assert not failures, failures[:3]
    assert sum(served.values()) == 12 * 15 and served["b"] >= 1
    assert not [t for t in threading.enumerate() if t.name.startswith("failover-hedge")]


def test_calls_in_flight_past_the_threshold_count_as_slow() -> None:
    """Ten concurrent calls stuck on a slow domain eject it when the first ends."""
    from pytest_failover._slowness import SlowCallWindow

    window = SlowCallWindow(SlowCalls(threshold=0.5, rate=0.5, minimum_calls=10))
    for call in range(10):
        window.began(call, 100.0)
    assert window.add(100.6, 0.6, 0)  # one ended, nine in flight for 0.6 s: ten slow calls
    window.began("fast", 200.0)
    window.began("slow", 200.0)
    assert not window.add(200.1, 0.1, "fast")  # the other is 0.1 s in: not slow yet
    assert window.counts == (1, 0)
    window.forget("slow")
    assert not window.add(201.0, 0.05, "new") and window.counts == (2, 0)


def test_an_answer_in_time_counts_no_call_in_flight() -> None:
    """A call that ended in time says nothing against the calls still waiting: their time
    so far may be the client's own (threads waiting for the GIL). Only a slow call's end
    counts them."""
    from pytest_failover._slowness import SlowCallWindow

    window = SlowCallWindow(SlowCalls(threshold=0.5, rate=0.5, minimum_calls=10))
    for call in range(10):
        window.began(call, 100.0)
    window.began("quick", 100.5)
    assert not window.add(100.6, 0.1, "quick")  # nine in flight for 0.6 s, but this one was quick
    assert window.counts == (1, 0)
    assert window.add(100.7, 0.7, 0)  # a slow one ends: the nine still in flight count
    assert window.counts == (0, 0)  # (cleared by the verdict)


@pytest.mark.parametrize("winner", ["first", "hedge"])
def test_a_cut_loser_counts_as_slow_only_if_it_was_sent_before_the_winner(winner: str) -> None:
    """A loser cut past the threshold is a slow call when it had longer than the winner
    took: a slow primary beaten by its hedge. A hedge beaten by the attempt it hedged had
    less time than that attempt took, which is judged on its own: under a client held up
    (threads waiting for the GIL) its time was the client's, and five of them ejected a
    healthy backup."""
    from pytest_failover._classify import Outcome, OutcomeKind
    from pytest_failover._core import FailoverCore
    from pytest_failover._values import RequestOptions, SlowCall

    core = FailoverCore(
        [Pool("api", ["https://a.example", "https://b.example"])],
        Policy(
            hedging=Hedging(delay=0.09, max_ratio=1.0),
            slow_calls=SlowCalls(threshold=0.1, rate=0.5, minimum_calls=5, window=30.0),
            sticky=False,
        ),
    )
    pool = core.pools["api"]
    a, b = pool.order
    windows = pool.slow_calls
    assert windows is not None
    slow: Counter[str] = Counter()  # the slow calls the cuts counted, by domain
    now = 0.0
    for _ in range(5):
        plan = core.begin(pool, "GET", httpx.Headers(), RequestOptions(), True, None, now)
        first = plan.next(now)
        hedge = plan.hedge(now + 0.09)
        assert isinstance(first, Attempt) and isinstance(hedge, Attempt) and hedge.domain is b
        won, cut = (first, hedge) if winner == "first" else (hedge, first)
        end = now + (0.3 if winner == "first" else 0.12)  # the cut one past the threshold either way
        plan.record(Outcome(kind=OutcomeKind.SUCCESS, status=200), end, end - won.sent_at, won)
        slow[cut.domain.url] += sum(isinstance(event, SlowCall) for event in plan.cancel(cut, end, end - cut.sent_at))
        now += 1.0
    if winner == "first":  # each hedge had 0.21 s of its first attempt's 0.3: no evidence against b
        assert slow == Counter() and windows[b].counts == (0, 0)
        assert pool.breakers[b].state is BreakerState.CLOSED
    else:  # the primary, cut after 0.12 s, lost to hedges that answered in 0.03: slow, and ejected
        assert slow == Counter({a.url: 5}) and pool.breakers[a].state is BreakerState.OPEN


def test_the_adaptive_delay_does_not_sink_when_hedges_win() -> None:
    """A primary attempt cut because its hedge won enters the latency window with the
    time it ran: the window keeps seeing the slow answers, not only those that beat
    their hedges (else the delay would fall until every request hedged)."""
    from pytest_failover._classify import Outcome, OutcomeKind
    from pytest_failover._core import FailoverCore
    from pytest_failover._values import Attempt, RequestOptions

    ok = Outcome(kind=OutcomeKind.SUCCESS, status=200)
    core = FailoverCore(
        [Pool("api", ["https://a.example", "https://b.example"])],
        Policy(hedging=Hedging(percentile=0.9, max_ratio=1.0)),
    )
    pool = core.pools["api"]
    primary = pool.order[0]
    now = 0.0
    for _ in range(20):  # fast answers: a delay of a millisecond
        plan = core.begin(pool, "GET", httpx.Headers(), RequestOptions(), True, None, now)
        attempt = plan.next(now)
        assert isinstance(attempt, Attempt)
        plan.record(ok, now + 0.001, 0.001, attempt)
        now += 1.0
    assert pool.hedge_delay(primary) == pytest.approx(0.001)
    for _ in range(10):  # the primary slows down: each hedge wins, the primary is cut at 50 ms
        plan = core.begin(pool, "GET", httpx.Headers(), RequestOptions(), True, None, now)
        first = plan.next(now)
        hedge = plan.hedge(now + 0.001)
        assert isinstance(first, Attempt) and isinstance(hedge, Attempt)
        plan.record(ok, now + 0.05, 0.049, hedge)
        plan.cancel(first, now + 0.05, elapsed=0.05)
        now += 1.0
    assert pool.hedge_delay(primary) == pytest.approx(0.05)


def test_a_hedge_cut_before_it_reached_the_network_is_not_reported_sent() -> None:
    """A hedge cut before its send began (its thread or task had not started) says so:
    ``sent=False``, as the network never saw it; one cut on the wire says ``sent=True``."""
    transport = FailoverTransport(
        [Pool("api", ["http://a.test", "http://b.test"])],
        hedged(delay=0.01),
        httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True})),
    )
    for on_wire in (False, True):
        exchange, winner, loser = first_and_hedge(transport, "http://a.test/x")
        loser.sending = on_wire
        exchange.on_response(winner, httpx.Response(200, json={"ok": True}))
        exchange.cut(loser)
        (record,) = [r.report() for r in exchange.records if r.race == "cancelled"]
        assert (record.domain, record.sent) == ("http://b.test", on_wire)


@pytest.mark.parametrize("late", ["error", "answer"])
def test_an_attempt_that_ends_after_another_won_does_not_undo_the_win(late: str) -> None:
    """Between a win and the cut of the losers, a loser may still end (the sync race's
    threads, the async race's close of a superseded answer): it is cut too, and the
    winner's answer stays the request's. Its error used to replace the answer, and the
    request failed with ``AllDomainsFailed(done)`` while holding a 200."""
    from pytest_failover._race import Race

    transport = FailoverTransport(
        [Pool("api", ["http://a.test", "http://b.test"])],
        hedged(delay=0.01),
        httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True})),
    )
    exchange = transport._begin(httpx.Request("GET", "http://a.test/x"))
    assert isinstance(exchange, Exchange)  # a hedging pool's request: no lane
    first = exchange.next_step()
    assert isinstance(first, Attempt)
    race = Race(exchange)
    primary = race.launch(first)
    exchange.core.throttle.earn()  # type: ignore[union-attr]  # the pool hedges: it has a throttle
    hedge = race.hedge()
    assert hedge is not None
    backup = race.launch(hedge)
    won = httpx.Response(200, json={"won": True})
    assert race.arrived(backup, won, None) is None and exchange.done
    late_answer = httpx.Response(200, json={"late": True}) if late == "answer" else None
    error = httpx.ReadError("cut", request=primary.request) if late == "error" else None
    assert race.arrived(primary, late_answer, error) is late_answer  # for the loop to close
    assert race.answer is won and race.cut_losers() == []
    assert isinstance(exchange.next_step(), Stop)  # answered: the loop ends
    result = exchange.finish()
    assert result is won
    races = {r.domain: (r.race, r.error_type) for r in result.extensions["failover"].attempts}
    assert races == {"http://b.test": ("won", None), "http://a.test": ("cancelled", "cancelled")}


def test_an_attempt_that_ends_after_its_caller_left_is_handed_back_to_be_closed() -> None:
    """The caller left (its request given up, every attempt let go) while a hedge was still
    on the wire: when that hedge ends, its answer is handed back for the race's thread to
    close. The race used to cut it through the exchange, which no longer held it: a
    RuntimeError in the hedge's thread, and the answer's connection never closed."""
    from pytest_failover._race import Race

    transport = FailoverTransport(
        [Pool("api", ["http://a.test", "http://b.test"])],
        hedged(delay=0.01),
        httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True})),
    )
    exchange = transport._begin(httpx.Request("GET", "http://a.test/x"))
    assert isinstance(exchange, Exchange)  # a hedging pool's request over a transport it cannot cut: no lane
    first = exchange.next_step()
    assert isinstance(first, Attempt)
    race = Race(exchange)
    race.launch(first)
    exchange.core.throttle.earn()  # type: ignore[union-attr]  # the pool hedges: it has a throttle
    hedge = race.hedge()
    assert hedge is not None
    backup = race.launch(hedge)
    exchange.give_up()  # the caller left: its exchange let go of both attempts
    late = httpx.Response(200, json={"late": True})
    assert race.arrived(backup, late, None) is late  # for the hedge's thread to close
    assert race.answer is None and exchange.records == []


def test_a_hedgeable_async_request_leaves_no_reference_cycle() -> None:
    """Refcounting frees what a hedgeable request built: two closures of the race that
    armed each other kept each request's race, exchange and plan for the cyclic GC
    (21 objects a request, some of them reaching its oldest generation)."""
    from pytest_failover._exchange import Exchange
    from pytest_failover._race import Race

    transport = AsyncFailoverTransport(
        [Pool("api", ["http://a.test", "http://b.test"])],
        hedged(delay=1.0),
        httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True})),
    )

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(20):
                assert (await client.get("http://a.test/x")).status_code == 200

    assert left_for_the_collector(lambda: asyncio.run(main()), (Exchange, Race)) == []


def test_a_sync_hedge_due_as_its_attempt_ends_is_settled_once(servers: dict[str, LoopbackServer]) -> None:
    """The first hedge's timer and the attempt's end race each other (the primary answers
    about when the hedge is due): whichever comes first, every request gets one answer,
    the two sides that learn the hedge fell due meet and free what they shared, and no
    attempt is left in flight."""
    a, b = servers["a"], servers["b"]
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(hedging=Hedging(delay=0.01, max_ratio=1.0)))
    hedgers = transport._hedgers
    assert hedgers is not None
    a.set(delay=0.01)
    answered: Counter[int] = Counter()
    with httpx.Client(transport=transport, timeout=5) as client:
        for i in range(40):
            response = client.get(a.url() + f"/{i}")
            assert response.status_code == 200
            attempts = result_of(response).attempts
            answered[len(attempts)] += 1
            assert len(attempts) <= 2 and sum(r.error_type is None for r in attempts) == 1
        deadline = time.monotonic() + 2.0
        while hedgers._joining and time.monotonic() < deadline:  # a late due meets its race
            time.sleep(0.01)
    assert hedgers._joining == {}
    assert sum(answered.values()) == 40 and answered[2] >= 1  # some were hedged


def test_a_hedged_sync_request_leaves_no_reference_cycle(servers: dict[str, LoopbackServer]) -> None:
    """A sync race that hedged and cut its loser frees everything by refcounting: the
    loser's error, kept in a local of a frame its own traceback holds, was a cycle with
    the exchange, plan, race and hedges of every hedged request."""
    from pytest_failover._exchange import Exchange
    from pytest_failover._race import Race, _Hedges

    a, b = servers["a"], servers["b"]
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.005, hedging=Hedging(delay=0.005, max_ratio=1.0)))
    a.set(delay=0.5)  # the hedge (due at 5 ms) wins even on a loaded machine (at 30 ms, once it lost)
    with httpx.Client(transport=transport) as client:

        def run() -> None:
            for _ in range(5):
                assert result_of(client.get(a.url() + "/x")).domain == b.url()  # the hedge won
            time.sleep(0.1)  # the losers' threads end

        assert left_for_the_collector(run, (Exchange, Race, _Hedges)) == []


def test_a_hedged_request_through_another_inner_transport_leaves_no_reference_cycle() -> None:
    """The pooled race (an inner transport whose sockets cannot be cut, as the requests
    adapter's) frees a failed attempt's error by refcounting too."""
    from pytest_failover._exchange import Exchange
    from pytest_failover._race import Race

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a.test":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"ok": True})

    transport = FailoverTransport(
        [Pool("api", ["http://a.test", "http://b.test"])], hedged(delay=1.0), httpx.MockTransport(answer)
    )
    with httpx.Client(transport=transport) as client:

        def run() -> None:
            for _ in range(5):
                assert result_of(client.get("http://a.test/x")).domain == "http://b.test"

        assert left_for_the_collector(run, (Exchange, Race)) == []


@pytest.mark.parametrize(("backup_latency", "after"), [(0.01, "open"), (0.9, "closed")])
def test_a_slow_probe_fails_only_when_another_domain_is_faster(backup_latency: float, after: str) -> None:
    """Slowness is relative: a probe that answers slowly keeps its domain out while the
    domain serving traffic answers fast, but not when that one is as slow (a saturated
    event loop times every answer late; the recovered primary never got traffic back)."""
    from pytest_failover._classify import Outcome, OutcomeKind
    from pytest_failover._core import FailoverCore
    from pytest_failover._values import RequestOptions

    ok = Outcome(kind=OutcomeKind.SUCCESS, status=200)
    core = FailoverCore(
        [Pool("api", ["https://a.example", "https://b.example"])],
        Policy(slow_calls=SlowCalls(threshold=0.5, minimum_calls=2), breaker_cooldown=1.0, sticky=False),
    )
    pool = core.pools["api"]
    primary, backup = pool.order

    def call(now: float, duration: float) -> Attempt:
        plan = core.begin(pool, "GET", httpx.Headers(), RequestOptions(), True, None, now)
        attempt = plan.next(now)
        assert isinstance(attempt, Attempt)
        plan.record(ok, now + duration, duration, attempt)
        return attempt

    assert [call(t, 0.6).domain for t in (0.0, 0.1)] == [primary, primary]  # slow: ejected
    assert pool.breakers[primary].state.value == "open"
    assert call(0.2, backup_latency).domain == backup
    probe = call(2.0, 0.6)  # the cooldown is over: the primary's probe answers slowly
    assert probe.domain == primary and probe.probe
    assert pool.breakers[primary].state.value == after


def test_an_async_hedge_runs_in_its_own_requests_context() -> None:
    """Concurrent hedged requests on one loop share its deadline watch, and each hedge still
    runs in the context of the request it hedges (its spans, its baggage), never in that of
    the request whose attempt set the watch's timer."""
    import contextvars

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who")
    seen: list[tuple[str, str, str]] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.url.path, who.get("none")))
        if request.url.host == "a.test":
            await asyncio.sleep(0.3)  # the primary is slow: each request's hedge goes at 0.05 s
        return httpx.Response(200)

    async def main() -> None:
        transport = AsyncFailoverTransport(
            [Pool("api", ["http://a.test", "http://b.test"])], hedged(0.05), transport=httpx.MockTransport(handle)
        )
        async with httpx.AsyncClient(transport=transport) as client:

            async def one(name: str) -> None:
                who.set(name)
                await client.get(f"http://a.test/{name}")

            async with asyncio.timeout(5.0):  # bounded
                await asyncio.gather(one("first"), one("second"))

    asyncio.run(main())
    hedges = sorted((path, name) for host, path, name in seen if host == "b.test")
    assert hedges == [("/first", "first"), ("/second", "second")]


class Refused(BaseException):
    """Not an ``Exception``: raised the way a ``KeyboardInterrupt`` is, from the middle of a
    response's body."""


class _Refusing(httpx.HTTPTransport):
    """httpx's own transport (its sockets can be cut: the cutting race), except that its
    requests to ``port`` fail with an error of the caller's own stack, not the network's (a
    middleware's refusal, a bug): a ``ValueError`` before the request goes out, or
    :class:`Refused` after the first chunk of its answer's body."""

    def __init__(self, port: int, how: str = "raises") -> None:
        super().__init__()
        self.port, self.how = port, how

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.port != self.port or not self.how:  # (how="": let everything through)
            return super().handle_request(request)
        if self.how == "raises":
            raise ValueError("the inner transport refuses b")
        response = super().handle_request(request)
        response.stream = _RefusedMidBody(response.stream, self.how)
        return response


class _RefusedMidBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body refused after its first chunk, or at once ("refused at the body": as it is
    asked for, before the connection's own stream is read at all, so that nothing but a
    close hands the connection back)."""

    def __init__(self, stream: Any, how: str) -> None:
        self._stream, self._at_once = stream, how == "refused at the body"

    def __iter__(self) -> Iterator[bytes]:
        if self._at_once:
            raise Refused("b's body is refused")
        return self._chunks()

    def _chunks(self) -> Iterator[bytes]:
        for chunk in self._stream:
            yield chunk
            raise Refused("b's body is refused")

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._at_once:
            raise Refused("b's body is refused")
        return self._achunks()

    async def _achunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk
            raise Refused("b's body is refused")

    def close(self) -> None:
        self._stream.close()

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Wrapping(httpx.BaseTransport):
    """Another transport in front: sockets the race cannot find (the pooled race)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class _AsyncRefusing(httpx.AsyncHTTPTransport):
    """The same, async."""

    def __init__(self, port: int, how: str = "raises") -> None:
        super().__init__()
        self.port, self.how = port, how

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.port != self.port or not self.how:
            return await super().handle_async_request(request)
        if self.how == "raises":
            raise ValueError("the inner transport refuses b")
        response = await super().handle_async_request(request)
        response.stream = _RefusedMidBody(response.stream, self.how)
        return response


REFUSALS = {
    "raises": (ValueError, "refuses b"),
    "refused mid-body": (Refused, "body is refused"),
    "refused at the body": (Refused, "body is refused"),
}


@pytest.mark.parametrize("how", list(REFUSALS))
@pytest.mark.parametrize("backend", ["asyncio", "trio", "threads", "threads, pooled"])
@pytest.mark.parametrize("first", ["answers", "fails", "answers 503"])
def test_a_hedge_ending_with_an_error_of_the_callers_own_never_fails_an_answered_request(
    backend: str, first: str, how: str, servers: dict[str, LoopbackServer]
) -> None:
    """A hedge that ends with an error of the caller's own stack (not a transport error:
    it says nothing about its domain; an ``Exception`` or not, as its thread or task is the
    race's) is out of the race, cut, and the request is the first attempt's when it
    answers; when it fails (an error, or a 503 that would move the request to the hedge's
    domain), the request raises that error, as it does unhedged, at once (no loop spinning
    on the ended hedge, no wait for the attempts' time), and no task is left with an error
    nobody read. The hedge's connection is back in the inner pool as the request ends,
    with no help from the cyclic collector (the error's traceback holds its body's
    iterator)."""
    a, b = servers["a"], servers["b"]
    reported: list[dict[str, Any]] = []
    held: list[Any] = []

    def set_up() -> None:
        a.set(delay=0.3, reset=first == "fails", status=503 if first == "answers 503" else 200)  # b's ends first

    def sync() -> httpx.Response:
        refusing = _Refusing(b.port, how)
        inner: httpx.BaseTransport = _Wrapping(refusing) if backend.endswith("pooled") else refusing
        with httpx.Client(transport=FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), inner)) as client:
            warm(client, a.url(), 1)
            set_up()
            try:
                return client.get(a.url() + "/x")
            finally:
                held.extend(busy(refusing))

    async def main() -> httpx.Response:
        if backend == "asyncio":
            asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
        inner = _AsyncRefusing(b.port, how)
        transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), inner)
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(a.url(), extensions={"failover": {"hedge": False}})
            set_up()
            try:
                with anyio.fail_after(5):  # bounded: the old race spun until the caller's own time
                    return await client.get(a.url() + "/x")
            finally:
                held.extend(busy(inner))
                gc.collect()  # a task's error nobody read is reported as the task goes

    def run() -> httpx.Response:
        return sync() if backend.startswith("threads") else anyio.run(main, backend=backend.split(",")[0])

    started = time.monotonic()
    gc.disable()  # (nothing may wait for the collector)
    try:
        if first == "answers":
            response = run()
            assert response.status_code == 200 and response.headers["X-Served-By"] == "a"
            races = {r.domain: (r.race, r.error_type) for r in result_of(response).attempts}
            assert races == {a.url(): ("won", None), b.url(): ("cancelled", "cancelled")}
        else:
            error, message = REFUSALS[how]
            with pytest.raises(error, match=message):
                run()
    finally:
        gc.enable()
    assert time.monotonic() - started < 8.0  # not the attempt's 10 s (the sync race waited it out; a 2-core CI may be slow)
    assert reported == []
    assert held == [], "held by the inner pool once the request ended"


@pytest.mark.parametrize("backend", ["threads", "asyncio", "asyncio, cancelled"])
def test_a_caller_that_leaves_a_race_closes_the_answer_a_hedge_gave(
    backend: str, servers: dict[str, LoopbackServer]
) -> None:
    """The caller leaves its request (an error that is no ``Exception``, from the body of its
    own attempt, as a ``KeyboardInterrupt`` would; or its task is cancelled) after a hedge
    answered 503, a retryable answer the race holds, its body unread: that answer is closed
    as the caller leaves, its connection back in the inner pool, with no help from the
    cyclic collector. (Dropped unclosed, its connection stayed busy for good: httpcore's
    pool lets go of a request only as its response closes.)"""
    a, b = servers["a"], servers["b"]
    held: list[Any] = []

    def sync() -> None:
        inner = _Refusing(a.port, "")
        with httpx.Client(transport=FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), inner)) as client:
            warm(client, a.url(), 1)
            inner.how = "refused mid-body"
            a.set(delay=0.3)
            b.set(status=503)  # the hedge's answer, long before a's
            try:
                client.get(a.url() + "/x")
            finally:
                held.extend(busy(inner))

    async def main() -> None:
        inner = _AsyncRefusing(a.port, "")
        transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), inner)
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(a.url(), extensions={"failover": {"hedge": False}})
            cancelled = backend.endswith("cancelled")
            inner.how = "" if cancelled else "refused mid-body"
            a.set(delay=0.3)
            b.set(status=503)
            try:
                if cancelled:  # (the hedge's 503 came at about 0.05 s)
                    await asyncio.wait_for(client.get(a.url() + "/x"), 0.2)
                else:
                    await client.get(a.url() + "/x")
            finally:
                held.extend(busy(inner))

    gc.disable()  # (nothing may wait for the collector)
    try:
        with pytest.raises(TimeoutError if backend.endswith("cancelled") else Refused):
            sync() if backend == "threads" else asyncio.run(main())
    finally:
        gc.enable()
    assert b.of_path("/x") == 1, "the hedge went out"
    assert held == [], "held by the inner pool once the caller left"


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_race_that_raises_a_hedges_error_of_the_callers_own_leaves_no_reference_cycle(
    side: str, servers: dict[str, LoopbackServer]
) -> None:
    """The request raises the hedge's error of the caller's own stack (its first attempt
    failed): refcounting frees its race and exchange. The error, kept by the race and in a
    local of the frame that raised it (its traceback holds that frame), was a cycle."""
    from pytest_failover._exchange import Exchange
    from pytest_failover._race import Race

    from .garbage import left_for_the_collector

    a, b = servers["a"], servers["b"]

    def run_sync() -> None:
        with httpx.Client(transport=FailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), _Refusing(b.port))) as client:
            warm(client, a.url(), 1)
            a.set(delay=0.3, reset=True)  # b's hedge ends first
            with pytest.raises(ValueError, match="refuses b"):
                client.get(a.url() + "/x")
            a.set()

    async def main() -> None:
        transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], hedged(0.05), _AsyncRefusing(b.port))
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(a.url(), extensions={"failover": {"hedge": False}})
            a.set(delay=0.3, reset=True)
            with pytest.raises(ValueError, match="refuses b"):
                await client.get(a.url() + "/x")
            a.set()

    run = run_sync if side == "sync" else lambda: asyncio.run(main())
    assert left_for_the_collector(run, (Exchange, Race)) == []
