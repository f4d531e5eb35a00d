"""The fast lane (``_exchange.Lane``): which requests go without a plan, and how the others
are handed over, with every front-end over real loopback sockets.

A request's plan is counted by its construction (``RequestPlan.__init__``, which every
exchange runs, from the start or when a lane hands it over): a request the lane answers
builds none.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.metrics import _internal as otel_metrics_globals
from opentelemetry.sdk.trace import TracerProvider

from pytest_failover import (
    AsyncFailoverTransport,
    ExponentialBackoff,
    FailoverResult,
    Hedging,
    Policy,
    Pool,
)
from pytest_failover._exchange import Exchange, Lane
from pytest_failover._plan import RequestPlan
from pytest_failover._pool import Domain
from pytest_failover._transport import _state_of
from pytest_failover.control import ControlDocument

from .frontends import Harness
from .servers import closed_port
from .test_transport import Servers, fast, info


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The method of each request plan built from now on, in a process with no
    OpenTelemetry SDK installed, as in most applications (a test before this one in the
    same worker may have installed one for good, the ``failover_telemetry`` fixture does:
    its globals are unset for the test, and set back after it)."""
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(otel_metrics_globals, "_METER_PROVIDER", None)
    built: list[str] = []
    lock = threading.Lock()
    real = RequestPlan.__init__

    def counted(self: RequestPlan, core: Any, method: str, *args: Any, **kwargs: Any) -> None:
        with lock:
            built.append(method)
        real(self, core, method, *args, **kwargs)

    monkeypatch.setattr(RequestPlan, "__init__", counted)
    return built


def in_threads(work: Callable[[], None], count: int) -> None:
    """Run ``work`` in ``count`` threads at once; back when all have ended (a minute each at most)."""
    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def test_a_request_the_pool_serves_its_domain_for_builds_no_plan(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """The first request sets the pool's serving domain (a plan records that); every later
    one, GET or POST, is answered in the lane, and its result is the exchange's."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    first = client.request("GET", f"{a.url()}/x")
    assert first.status_code == 200 and plans == ["GET"]
    for method in ("GET", "POST", "GET", "DELETE"):
        response = client.request(method, f"{a.url()}/y", content=b"{}" if method == "POST" else None)
        result = info(response)
        assert result == FailoverResult("api", a.url(), result.attempts, "success")
        assert [(r.number, r.domain, r.error_type, r.status, r.sent) for r in result.attempts] == [
            (1, a.url(), None, 200, True)
        ]
        assert result.attempts[0].duration >= 0.0
    assert plans == ["GET"], "a request the lane answered built a plan"
    assert a.total == 5 and b.total == 0


def test_the_lane_sends_nothing_to_a_domain_the_control_document_disables(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """The lane takes a request's first attempt to the first domain only while it is
    enabled: once the control document disables the primary the pool serves, requests go
    to the backup (one plan moves the pool there; the lane takes the rest), and the
    primary gets none."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    client.request("GET", f"{a.url()}/warm")  # the pool serves the primary, in the lane from now on
    client.transport.apply_control(ControlDocument.create(version=1, pools={"api": [a.url()]}, expires_in=60))
    for _ in range(3):
        response = client.request("GET", f"{a.url()}/x")
        assert response.status_code == 200
        assert [(r.number, r.domain) for r in info(response).attempts] == [(1, b.url())]
    assert a.total == 1 and b.total == 3
    assert len(plans) == 2, "the lane did not take the requests the backup serves"


def test_a_failure_in_the_lane_hands_the_attempt_to_the_plan(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """A refused primary: the lane's attempt is handed over with its failure, the plan
    moves to the backup at once; once the primary is open the lane goes to the backup."""
    dead = f"http://127.0.0.1:{closed_port()}"
    b = servers["b"]
    client = make_client([Pool("api", [dead, b.url()])], fast(breaker_threshold=1))
    response = client.request("GET", f"{dead}/x")
    assert [(r.number, r.domain, r.error_type, r.sent) for r in info(response).attempts] == [
        (1, dead, "connection_refused", False),
        (2, b.url(), None, True),
    ]
    assert plans == ["GET"]
    for _ in range(3):
        again = client.request("GET", f"{dead}/x")
        assert [(r.number, r.domain) for r in info(again).attempts] == [(1, b.url())]
    assert plans == ["GET"], "the lane did not take requests to the open primary's backup"


def test_an_answer_that_is_not_a_success_is_handed_over(
    make_client: Any, servers: Servers, plans: list[str]
) -> None:
    """A 503 from the primary (retryable), a 404 (an answer): the plan records each."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast(breaker_threshold=5, sticky=False))
    client.request("GET", f"{a.url()}/warm")
    a.set(status=503)
    moved = client.request("GET", f"{a.url()}/x")
    assert [(r.domain, r.status) for r in info(moved).attempts] == [(a.url(), 503), (b.url(), 200)]
    a.set(status=404)
    answered = client.request("GET", f"{a.url()}/x")
    assert answered.status_code == 404
    assert [(r.domain, r.status) for r in info(answered).attempts] == [(a.url(), 404)]
    assert len(plans) == 3


def test_a_post_the_lane_sent_is_never_resent(make_client: Any, servers: Servers, plans: list[str]) -> None:
    """A POST whose connection is reset after it was sent: handed over, and not re-sent
    (bytes may have left), as from the exchange."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    client.request("GET", f"{a.url()}/warm")
    a.set(reset=True)
    with pytest.raises(client.errors.AllDomainsFailed) as raised:
        client.request("POST", f"{a.url()}/pay", content=b"{}")
    assert raised.value.reason == "not_retryable"
    assert [(r.domain, r.sent) for r in raised.value.attempts] == [(a.url(), True)]
    assert b.total == 0 and len(plans) == 2


# The front-ends whose hedging pools' requests take the lane: the sync httpx-API loops over
# their library's own transport, whose race cuts a loser's socket (``ThreadRace.cuts``),
# and every async loop (``async_race``: a hedge that wins cancels the attempt's task). The
# requests adapter's inner transport is urllib3's, whose sockets the race cannot find, so
# it races from a pool of threads (``ThreadRace._pooled``), in the exchange.
HEDGING_LANES = ("sync", "httpx2", "async", "httpx2-async", "aiohttp")


@pytest.mark.parametrize("pool_kind", ["hedging", "telemetry", "stale"])
def test_what_the_lane_does_not_take_starts_in_a_plan(
    make_client: Any, servers: Servers, plans: list[str], pool_kind: str
) -> None:
    """A GET the stale cache serves, a hedging pool's request where the front-end races in
    the exchange: every request has a plan from the start. A hedging pool whose front-end
    races in the lane, and a transport with an SDK's provider (a ``TracedLane``), take the
    lane: only the first request (which sets the serving domain) has a plan, and a POST to
    the hedging pool (never hedged) takes the lane too."""
    a = servers["a"]
    options: dict[str, Any] = {}
    policy: Policy = fast()
    if pool_kind == "hedging":
        policy = fast(hedging=Hedging(delay=10.0))
    elif pool_kind == "telemetry":
        options["tracer_provider"] = TracerProvider()
    else:
        policy = fast(stale_on_failure=True)
    client = make_client([Pool("api", [a.url(), servers["b"].url()])], policy, **options)
    for _ in range(3):
        assert client.request("GET", f"{a.url()}/x").status_code == 200
    if pool_kind == "telemetry":
        assert plans == ["GET"]
    elif pool_kind == "hedging" and client.kind in HEDGING_LANES:
        assert plans == ["GET"]
        posted = client.request("POST", f"{a.url()}/x", content=b"{}")
        assert [(r.number, r.domain, r.hedge) for r in info(posted).attempts] == [(1, a.url(), False)]
        assert plans == ["GET"], "a POST to a hedging pool built a plan"
    else:
        assert plans == ["GET"] * 3


@pytest.mark.parametrize("kind", HEDGING_LANES)
@pytest.mark.parametrize("delay", [None, 10.0], ids=["adaptive", "fixed"])
def test_a_hedging_lane_earns_the_throttle_and_feeds_the_latency_window(
    servers: Servers, plans: list[str], delay: float | None, kind: str
) -> None:
    """GETs to a hedging pool, answered in the lane: each earns the hedge throttle a token,
    as a plan's first attempt does, and each success enters its domain's latency window
    (the adaptive delay's); a POST earns none, its success enters the window."""
    a, b = servers["a"], servers["b"]
    client = Harness(kind, [Pool("api", [a.url(), b.url()])], fast(hedging=Hedging(delay=delay)))
    try:
        core = _state_of(client.transport, "test")._state.core.pools["api"]
        assert core.throttle is not None
        for _ in range(4):
            assert client.get(f"{a.url()}/x").status_code == 200
        assert client.request("POST", f"{a.url()}/x", content=b"{}").status_code == 200
    finally:
        client.close()
    assert plans == ["GET"]  # the first set the serving domain; the others took the lane
    assert core.throttle.requests == 4  # one token earned by each GET, in a plan or the lane
    if delay is None:
        assert core.latency is not None
        assert len(core.latency[Domain.parse(a.url())]) == 5  # every success, the POST's too
    else:
        assert core.latency is None


def _hedged_in_the_lane(results: list[FailoverResult], plans: list[str], throttle: Any, a: Any, b: Any) -> None:
    """Every request whose hedge fell due in the lane, over a slow primary ``a``, built one
    plan; a hedged one was won by the backup ``b``, the primary's attempt cut; one the
    throttle refused its hedge was answered by the primary; each earned its token once.

    A refused hedge is asked for again each delay, and the tokens come with new requests:
    those of the threads whose first request the primary answered, a second later, just as
    the primary answers the other refused ones. A hedge the throttle let go then may lose
    to its primary, and is cut: the first answer wins either way, and the burst's hedges,
    sent at once, are the backup's."""
    assert len(plans) == len(results), "a request whose hedge fell due built no plan, or two"
    hedged = [r for r in results if len(r.attempts) == 2]
    won = {r.domain: 0 for r in results} | {b.url(): 0}
    for result in results:
        attempts = [(r.number, r.domain, r.hedge, r.race) for r in sorted(result.attempts, key=lambda r: r.number)]
        if result in hedged:
            assert attempts in (
                [(1, a.url(), False, "cancelled"), (2, b.url(), True, "won")],
                [(1, a.url(), False, "won"), (2, b.url(), True, "cancelled")],  # let go late (see above)
            ), result
            assert result.domain == attempts[0 if attempts[0][3] == "won" else 1][1], result
            won[result.domain] += 1
        else:  # its hedge was refused: the primary answered
            assert result.domain == a.url() and attempts == [(1, a.url(), False, None)], result
    assert len(hedged) == throttle.hedges >= 5  # a burst's tokens at least
    assert won[b.url()] >= 5, won  # the burst's hedges went at once, and won
    assert won[b.url()] <= b.total_settled(len(hedged)) <= len(hedged)  # a late one cut may not reach it
    assert a.counts["GET"] == len(results)
    assert throttle.requests == len(results)  # each earned its token once, in the lane


def test_a_hedge_that_falls_due_in_the_lane_wins_with_the_backup(servers: Servers, plans: list[str]) -> None:
    """A dozen threads on one sync transport, a slow primary, ``Hedging(delay=0.01)``: each
    GET starts in the lane, its hedge falls due while the primary is on the wire, the
    race builds the request's exchange then (once: one plan a request), and the backup
    wins, the primary's attempt cut; a request the throttle refused its hedge (a burst of
    12 spends its tokens) is answered by the primary. Every attempt is in a result."""
    import httpx

    from pytest_failover import FailoverTransport

    a, b = servers["a"], servers["b"]
    # The primary is slow enough that a hedge due at 10 ms goes out before it answers even
    # on a loaded CI machine (at 0.3 s, one watchdog ran 290 ms late under a full run).
    a.set(delay=1.0)
    policy = fast(hedging=Hedging(delay=0.01, max_ratio=1.0, threads=12))
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], policy)
    throttle = transport._state.core.pools["api"].throttle
    assert throttle is not None
    client = httpx.Client(transport=transport)
    failures: list[object] = []
    results: list[FailoverResult] = []
    lock = threading.Lock()
    requests_each = 3

    def work() -> None:
        for _ in range(requests_each):
            try:
                result = client.get(f"{a.url()}/x").extensions["failover"]
            except Exception as exc:  # counted, not raised: the test counts every failure
                failures.append(exc)
                continue
            with lock:
                results.append(result)

    in_threads(work, 12)
    client.close()
    assert not failures
    assert len(results) == 12 * requests_each
    _hedged_in_the_lane(results, plans, throttle, a, b)


def test_threads_share_the_lane_while_the_primary_fails_and_recovers(servers: Servers) -> None:
    """A dozen threads on one sync transport, the primary flapping between 503 and 200:
    every request is answered 200, by whichever domain, and no attempt is lost."""
    import httpx

    from pytest_failover import FailoverTransport

    a, b = servers["a"], servers["b"]
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], fast(breaker_threshold=2, breaker_cooldown=0.05))
    client = httpx.Client(transport=transport)
    failures: list[object] = []
    recorded = [0]
    lock = threading.Lock()

    def work() -> None:
        for _ in range(40):
            try:
                response = client.get(f"{a.url()}/x")
            except Exception as exc:  # counted, not raised: the test counts every failure
                failures.append(exc)
                continue
            if response.status_code != 200:
                failures.append(response.status_code)
            with lock:
                recorded[0] += len(response.extensions["failover"].attempts)

    def flap(stop: threading.Event) -> None:
        status = 503
        while not stop.wait(0.01):
            a.set(status=status)
            status = 200 if status == 503 else 503

    stop = threading.Event()
    flapper = threading.Thread(target=flap, args=(stop,))
    flapper.start()
    in_threads(work, 12)
    stop.set()
    flapper.join()
    client.close()
    assert not failures
    assert recorded[0] == a.total + b.total, "an attempt sent is missing from the results"


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("primary", ["refused", "slow"])
def test_a_hedged_lane_leaves_no_reference_cycle(servers: Servers, primary: str, kind: str) -> None:
    """A hedging lane's request handed over frees its lane, exchange and race by
    refcounting: a refused primary whose error the lane's attempt ended with (its traceback
    holds the frame of ThreadRace.sent or async_race, whose caller kept the error), or a
    slow one whose hedge fell due and won."""
    import httpx

    from pytest_failover import AsyncFailoverTransport, FailoverTransport
    from pytest_failover._exchange import Exchange, Lane
    from pytest_failover._race import Race, _AsyncHedges, _Hedges

    from .garbage import left_for_the_collector

    b = servers["b"]
    if primary == "refused":
        first, hedging = f"http://127.0.0.1:{closed_port()}", Hedging(delay=1.0)
    else:  # slow enough that the hedge, due at 5 ms, wins even on a loaded machine (at 30 ms,
        # the primary answered first under a full run); the hedge's win cuts the wait short
        servers["a"].set(delay=0.5)
        first, hedging = servers["a"].url(), Hedging(delay=0.005, max_ratio=1.0)
    # Not sticky: every request starts at the primary again (its breaker stays closed).
    pools, policy = [Pool("api", [first, b.url()])], fast(hedging=hedging, breaker_threshold=100, sticky=False)
    kinds = (Lane, Exchange, Race, _Hedges, _AsyncHedges)
    ends = {"refused": ["connection_refused", None], "slow": ["cancelled", None]}[primary]

    def check(result: FailoverResult) -> None:
        assert result.domain == b.url()
        assert [r.error_type for r in sorted(result.attempts, key=lambda r: r.number)] == ends

    if kind == "async":
        transport = AsyncFailoverTransport(pools, policy)

        async def main() -> None:
            async with httpx.AsyncClient(transport=transport) as client:
                for _ in range(5):
                    check((await client.get(f"{first}/x")).extensions["failover"])

        assert left_for_the_collector(lambda: asyncio.run(main()), kinds) == []
        return
    with httpx.Client(transport=FailoverTransport(pools, policy)) as client:

        def run() -> None:
            for _ in range(5):
                check(client.get(f"{first}/x").extensions["failover"])
            time.sleep(0.1)  # the losers' threads end

        assert left_for_the_collector(run, kinds) == []


class Leaving(BaseException):
    """The caller leaves while the lane's attempt is on the wire (as a KeyboardInterrupt would)."""


@pytest.mark.parametrize("due", [False, True], ids=["before-the-hedge", "hedge-due"])
def test_a_caller_leaving_a_hedged_lane_gives_its_request_up_once(
    servers: Servers, plans: list[str], due: bool
) -> None:
    """The caller leaves a hedgeable request in the lane (its inner transport raises what
    is not a transport error): before its hedge fell due, the request's plan is built to
    give it up; after, the race built it, and it is given up, not built again. Either way
    one plan, nothing left in flight or joined, the pool's breakers as they were."""
    import httpx

    from pytest_failover import FailoverTransport

    a, b = servers["a"], servers["b"]

    class Leave(httpx.HTTPTransport):  # httpx's own: the race can cut its sockets
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.port == a.port:
                if due:
                    time.sleep(0.3)  # the hedge (delay 0.01) falls due, goes to b and wins meanwhile
                raise Leaving
            return super().handle_request(request)

    transport = FailoverTransport(
        [Pool("api", [a.url(), b.url()])], fast(hedging=Hedging(delay=0.01, max_ratio=1.0)), Leave()
    )
    assert transport._lane_hedges
    with httpx.Client(transport=transport) as client, pytest.raises(Leaving):
        client.get(f"{a.url()}/x")
    assert plans == ["GET"]
    hedgers = transport._hedgers
    assert hedgers is not None
    deadline = time.monotonic() + 2.0
    while (hedgers._joining or hedgers._busy) and time.monotonic() < deadline:  # a hedge's thread ends
        time.sleep(0.01)
    assert hedgers._joining == {} and hedgers._busy == 0
    assert b.counts["GET"] == (1 if due else 0)  # only a hedge goes there
    snapshot = transport.state().pools["api"]
    assert [(d.breaker, d.consecutive_failures, d.can_request) for d in snapshot.domains] == [("closed", 0, True)] * 2
    transport.close()


# -- the async loops' hedging lane (``AsyncLoop._raced``, ``async_race``) -------------------


def _armed(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    """The hedge timers still armed on ``loop`` (those of ``_race``; the deadline's own
    watch, ``_deadline._LoopWatch``, stays armed for the loop's next request)."""
    scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]  # asyncio's own heap of timers
    return [
        handle
        for handle in scheduled
        if not handle.cancelled() and getattr(handle._callback, "__module__", None) == "pytest_failover._race"  # type: ignore[attr-defined]  # the handle's callback
    ]


def _async_hedging(pools: list[Pool], policy: Policy) -> tuple[Any, Any, Any]:
    """An async transport over httpx's own, whose pool has no connection limit (a hundred
    tasks' attempts and their hedges each hold one); the transport, its inner one, and the
    pool's throttle."""
    import httpx

    from pytest_failover import AsyncFailoverTransport

    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
    transport = AsyncFailoverTransport(pools, policy, inner)
    throttle = transport._state.core.pools["api"].throttle
    assert throttle is not None
    return transport, inner, throttle


def test_a_hedge_that_falls_due_in_an_async_lane_wins_with_the_backup(servers: Servers, plans: list[str]) -> None:
    """A hundred tasks on one async transport, a slow primary, ``Hedging(delay=0.01)``: each
    GET starts in the lane, its hedge falls due while the primary is on the wire, its timer
    builds the request's exchange then (once: one plan a request), and the backup wins, the
    primary's attempt cut (its task interrupted); a request the throttle refused its hedge
    (tasks that start together share its burst) is answered by the primary. Every attempt
    is in a result, and no hedge timer is left armed."""
    import httpx

    a, b = servers["a"], servers["b"]
    # Long enough that each hedge goes out first on a loaded machine, one refused at first
    # too: the tasks start within 0.5 s, each earning a token a refused hedge may take.
    a.set(delay=1.5)
    transport, _, throttle = _async_hedging(
        [Pool("api", [a.url(), b.url()])], fast(hedging=Hedging(delay=0.01, max_ratio=1.0))
    )
    tasks = 100

    async def main() -> tuple[list[Any], list[asyncio.TimerHandle]]:
        async with httpx.AsyncClient(transport=transport) as client:

            async def work(start: float) -> FailoverResult:
                # Each starts a little after the one before: each earns the throttle the
                # token its hedge spends (a hundred at once would share a burst of five).
                await asyncio.sleep(start)
                result: FailoverResult = (await client.get(f"{a.url()}/x")).extensions["failover"]
                return result

            work_each = (work(i * 0.005) for i in range(tasks))
            done = await asyncio.wait_for(asyncio.gather(*work_each, return_exceptions=True), 30)
            return done, _armed(asyncio.get_running_loop())

    done, armed = asyncio.run(main())
    failures = [d for d in done if isinstance(d, BaseException)]
    assert not failures
    results: list[FailoverResult] = done
    assert len(results) == tasks
    assert armed == []
    _hedged_in_the_lane(results, plans, throttle, a, b)


def test_an_async_request_answered_before_its_hedge_is_due_builds_no_plan(servers: Servers, plans: list[str]) -> None:
    """Twenty tasks on one async transport, a primary that answers at once and a hedge due
    only after 10 s (a loaded machine has kept an answer a second and more): every request
    after the first (which sets the serving domain) is answered in the lane, builds no plan
    and leaves no timer armed; each earned the throttle its token."""
    import httpx

    a, b = servers["a"], servers["b"]
    policy = fast(hedging=Hedging(delay=10.0), attempt_timeout=20.0, deadline=30.0)
    transport, _, throttle = _async_hedging([Pool("api", [a.url(), b.url()])], policy)
    tasks, each = 20, 5

    async def main() -> list[asyncio.TimerHandle]:
        async with httpx.AsyncClient(transport=transport) as client:
            assert (await client.get(f"{a.url()}/warm")).status_code == 200

            async def work() -> None:
                for _ in range(each):
                    result = (await client.get(f"{a.url()}/x")).extensions["failover"]
                    assert [(r.number, r.domain, r.hedge) for r in result.attempts] == [(1, a.url(), False)]

            await asyncio.wait_for(asyncio.gather(*(work() for _ in range(tasks))), 60)
            return _armed(asyncio.get_running_loop())

    assert asyncio.run(main()) == []
    assert plans == ["GET"]
    assert throttle.requests == 1 + tasks * each and throttle.hedges == 0
    assert a.counts["GET"] == 1 + tasks * each and b.total == 0


@pytest.mark.parametrize("due", [False, True], ids=["before-the-hedge", "hedge-due"])
def test_a_caller_cancelled_in_an_async_hedged_lane_gives_its_request_up_once(
    servers: Servers, plans: list[str], due: bool
) -> None:
    """A task cancelled while its hedgeable request's first attempt is in flight: before its
    hedge fell due, the request's plan is built to give it up; after (the hedge on the
    wire too), the timer built it, and it is given up, not built again, its hedge's task
    cancelled. Either way one plan, no timer armed, no connection left busy, the pool's
    breakers as they were."""
    import httpx

    a, b = servers["a"], servers["b"]
    a.set(delay=5.0)
    b.set(delay=5.0)  # a hedge that went out is still on the wire when the caller leaves
    hedging = Hedging(delay=0.01 if due else 10.0, max_ratio=1.0)
    transport, inner, _ = _async_hedging(
        [Pool("api", [a.url(), b.url()])], fast(hedging=hedging, attempt_timeout=20.0, deadline=30.0)
    )

    def busy() -> list[Any]:
        return [c for c in inner._pool.connections if not (c.is_idle() or c.is_closed())]

    async def until(condition: Callable[[], bool]) -> None:
        """Back once ``condition()`` holds (a server's count, from its own thread), 5 s at most."""
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)

    async def main() -> tuple[list[asyncio.TimerHandle], list[Any]]:
        async with httpx.AsyncClient(transport=transport) as client:
            request = asyncio.create_task(client.get(f"{a.url()}/x"))
            await until(lambda: a.total >= 1 and (not due or b.total >= 1))  # on the wire: counted
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            await until(lambda: not busy())  # the hedge's task ends, cancelled
            return _armed(asyncio.get_running_loop()), busy()

    armed, left = asyncio.run(main())
    assert armed == [] and left == []
    assert plans == ["GET"]
    assert b.total_settled(1 if due else 0) == (1 if due else 0)  # only a hedge goes there
    snapshot = transport.state().pools["api"]
    assert [(d.breaker, d.consecutive_failures, d.can_request) for d in snapshot.domains] == [("closed", 0, True)] * 2


@pytest.mark.parametrize(
    "policy",
    [
        Policy(),
        Policy(read_body=False),
        Policy(schedule=ExponentialBackoff(max_attempts=1)),
        Policy(is_app_error=lambda response: False, read_body=False),
        Policy(idempotent_methods=frozenset({"GET", "PURGE"})),
        Policy(hedging=Hedging(delay=10.0)),
    ],
    ids=["default", "no-body-read", "one-attempt", "app-check", "own-methods", "hedging"],
)
def test_the_lane_reads_each_request_as_the_pools_idempotency_rule_says(policy: Policy) -> None:
    """A lane looks a request's reading up by its method (``PoolCore.idempotent_reading``)
    where the plan asks ``PoolCore.idempotent``: for every method, with an Idempotency-Key
    and without, the lane reads as much of a body as the pool's rule says a request that
    may (or may not) be sent again reads, and races a hedge only for one that may."""
    transport = AsyncFailoverTransport([Pool("api", ["http://127.0.0.1:9", "http://127.0.0.2:9"])], policy)
    core = transport._state.core.pools["api"]
    checked = 0
    for method in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE", "POST", "PATCH", "PURGE"):
        for headers in ({}, {"Idempotency-Key": "k-1"}):
            request = httpx.Request(method, "http://127.0.0.1:9/x", headers=headers)
            lane = transport._begin(request)
            assert isinstance(lane, Lane) and not isinstance(lane, Exchange)
            resendable = core.idempotent(method, request.headers)
            assert resendable == (method in policy.idempotent_methods or bool(headers))
            limit, loads, _ = core.reading[resendable][method == "GET"]
            assert (type(lane.body_limit), lane.body_limit, lane._loads) == (type(limit), limit, loads), (method, headers)
            hedges = policy.hedging is not None and resendable
            assert (lane.racing is not None, lane.attempt is None) == (hedges, hedges), (method, headers)
            checked += 1
    asyncio.run(transport.aclose())
    assert checked == 18
