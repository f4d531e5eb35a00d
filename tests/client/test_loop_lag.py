"""Slow-call verdicts leave out the client's own event loop running late (``_looplag``),
over real loopback sockets and a real asyncio loop."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_failover import (
    AsyncFailoverTransport,
    FailoverTransport,
    Policy,
    Pool,
    SlowCalls,
    _looplag,
)
from pytest_failover._deadline import _LoopWatch, async_limit, watch_here
from pytest_failover.integrations.aiohttp import FailoverMiddleware

from .load import loops_in_threads
from .servers import LoopbackServer

Get = Callable[[str], Awaitable[Any]]  # a client's GET: its answer has ``headers``
SLOW_CALLS = SlowCalls(threshold=0.1, rate=0.5, minimum_calls=5, window=30.0)


def _block(seconds: float) -> None:
    """Keep the loop's thread from the loop, as an application's CPU work between awaits does."""
    time.sleep(seconds)


def _policy() -> Policy:
    return Policy(slow_calls=SLOW_CALLS, breaker_cooldown=5.0, sticky=False)


async def _traffic(get: Get, url: str, seconds: float, *, block: float, tasks: int = 20) -> Counter[str]:
    """``tasks`` tasks sending GETs for ``seconds`` while the application blocks the loop
    for ``block`` seconds out of every ``block + 0.005`` (0: it never does); who served each."""
    served: Counter[str] = Counter()
    stop = time.monotonic() + seconds

    async def application() -> None:
        while block and time.monotonic() < stop:
            await asyncio.sleep(0.005)
            _block(block)

    async def user() -> None:
        for _ in range(1000):  # bounded; the clock ends it first
            if time.monotonic() >= stop:
                return
            response = await get(url)
            served[response.headers["X-Served-By"]] += 1
            await asyncio.sleep(0.01)

    await asyncio.gather(application(), *[user() for _ in range(tasks)])
    return served


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
def test_a_busy_event_loop_never_ejects_a_healthy_domain(kind: str, servers: dict[str, LoopbackServer]) -> None:
    """Both domains answer at once; the application keeps the loop blocked 0.15 s at a
    time, so every answer is noticed late. Before the loop's lateness was left out, the
    primary was ejected as slow within the first burst and about 75 of 95 requests went to
    the backup."""
    a, b = servers["a"], servers["b"]
    pools = [Pool("api", [a.url(), b.url()])]
    front: AsyncFailoverTransport | FailoverMiddleware
    front = AsyncFailoverTransport(pools, _policy()) if kind == "httpx" else FailoverMiddleware(pools, _policy())

    async def run() -> Counter[str]:
        if isinstance(front, AsyncFailoverTransport):
            async with httpx.AsyncClient(transport=front) as client:
                return await _traffic(client.get, a.url(), 2.0, block=0.15)
        async with aiohttp.ClientSession(middlewares=(front,)) as session:

            async def get(url: str) -> aiohttp.ClientResponse:
                async with session.get(url) as response:
                    await response.read()
                    return response

            return await _traffic(get, a.url(), 2.0, block=0.15)

    served = asyncio.run(run())
    assert set(served) == {"a"} and served["a"] >= 20
    assert [d.breaker for d in front.state().pools["api"].domains] == ["closed", "closed"]


def test_threads_loops_each_measured_share_one_state(servers: dict[str, LoopbackServer]) -> None:
    """One failover state, four threads each running its own event loop (its own
    connections: ``sharing``) with 5 tasks, every loop blocked by its application as above:
    each loop's lateness is its own, and none makes the shared primary look slow. (Twelve
    loops of 10 tasks on 2 cores, starting together, can still eject the primary with no
    application blocking them: their first calls, in flight while threads wait for the
    GIL, are counted slow before any answer, and the kernel's word on answers,
    ``test_kernel_clock``, comes too late for them.)"""
    a, b = servers["a"], servers["b"]
    transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], _policy())

    async def run() -> Counter[str]:
        async with httpx.AsyncClient(transport=AsyncFailoverTransport.sharing(transport)) as client:
            return await _traffic(client.get, a.url(), 1.5, block=0.15, tasks=5)

    results = loops_in_threads(4, run)
    assert len(results) == 4 and all(isinstance(r, Counter) for r in results), results
    served = sum((r for r in results if isinstance(r, Counter)), Counter[str]())
    assert set(served) == {"a"}, (served, [d.breaker for d in transport.state().pools["api"].domains])
    assert [d.breaker for d in transport.state().pools["api"].domains] == ["closed", "closed"]


def test_a_slow_domain_is_still_ejected_from_an_event_loop_that_keeps_up(servers: dict[str, LoopbackServer]) -> None:
    """The measure does not excuse the domain: it answers in 0.15 s, the loop is free, and
    traffic moves to the backup once ``minimum_calls`` calls were slow."""
    a, b = servers["a"], servers["b"]
    a.set(delay=0.15)
    transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], _policy())

    async def run() -> Counter[str]:
        async with httpx.AsyncClient(transport=transport) as client:
            return await _traffic(client.get, a.url(), 1.5, block=0.0)

    served = asyncio.run(run())
    assert transport.state().pools["api"].domains[0].breaker == "open"
    assert served["b"] > served["a"]


def test_a_slow_domain_is_ejected_under_200_tasks_whose_answers_come_together(
    servers: dict[str, LoopbackServer],
) -> None:
    """200 tasks' calls to a domain answering in 1 s end together, and handling their
    answers keeps the loop busy (a tenth of a second or more here, more on a loaded
    machine): that time is the loop's, the rest is the domain's. When the loop's lateness
    took the whole verdict away, such a domain was never ejected (0 of 500 requests moved)."""
    a, b = servers["a"], servers["b"]
    a.set(delay=1.0)
    policy = Policy(slow_calls=SlowCalls(threshold=0.3, minimum_calls=10), breaker_cooldown=30.0, sticky=False)
    transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], policy)

    async def run() -> Counter[str]:
        async with httpx.AsyncClient(transport=transport) as client:
            served: Counter[str] = Counter()

            async def user() -> None:
                for _ in range(2):
                    served[(await client.get(a.url())).headers["X-Served-By"]] += 1

            await asyncio.gather(*[user() for _ in range(200)])
            return served

    served = asyncio.run(run())
    assert transport.state().pools["api"].domains[0].breaker == "open"
    assert served["b"] >= 150  # the first wave answered slowly; nearly all the rest moved


def test_a_sync_client_is_judged_on_its_durations_alone(servers: dict[str, LoopbackServer]) -> None:
    """No event loop runs in a sync client's thread: its slow calls count as they were
    (less the time their answers sat unread, which is nothing here)."""
    a, b = servers["a"], servers["b"]
    a.set(delay=0.15)
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], _policy())
    with httpx.Client(transport=transport) as client:
        served = [client.get(a.url()).headers["X-Served-By"] for _ in range(7)]
    assert served == ["a"] * 5 + ["b"] * 2


def test_the_meter_reads_how_late_the_loop_ran_within_a_span() -> None:
    async def run() -> tuple[float, float, float]:
        _looplag.measure()
        await asyncio.sleep(0.1)  # the meter's timers run on time, and are not kept
        on_time = _looplag.lateness(0.1)
        watch = watch_here()
        assert watch is not None and watch.lag is not None
        # only the late are kept (a loaded machine's may run a millisecond late: a count of
        # them would be a guess at the machine's load)
        assert all(by >= _looplag.NOTABLE for _, by in watch.lag.fired)
        _block(0.2)  # blocked: the timer due meanwhile runs late
        overdue = _looplag.lateness(0.5)  # the timer still waits: the loop is late now
        await asyncio.sleep(0.3)
        since = _looplag.lateness(0.1)  # the late stretch ended before this span began
        return on_time, overdue, since

    on_time, overdue, since = asyncio.run(run())
    assert on_time < 0.05  # (a loaded machine's timers run a few ms late)
    assert overdue >= 0.15
    assert since < 0.05


def test_a_late_stretch_counts_for_its_part_within_the_span() -> None:
    async def run() -> tuple[float, float]:
        _looplag.measure()
        await asyncio.sleep(0.03)
        _block(0.3)
        await asyncio.sleep(0)  # the late timer runs
        await asyncio.sleep(0.05)
        return _looplag.lateness(0.15), _looplag.lateness(1.0)

    part, whole = asyncio.run(run())
    assert 0.04 <= part <= 0.15  # about 0.1 s of the 0.15 s span: the stretch's part within it
    assert whole >= 0.25


def test_uvloop_is_measured_too() -> None:
    """uvloop's loop does not say which thread runs it; the meter finds it all the same."""
    import uvloop

    async def run() -> float:
        _looplag.measure()
        await asyncio.sleep(0.03)
        _block(0.2)
        await asyncio.sleep(0)
        return _looplag.lateness(1.0)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(run()) >= 0.15


def test_no_event_loop_no_lateness() -> None:
    _looplag.measure()  # nothing to measure
    assert _looplag.lateness(10.0) == 0.0


def test_the_meter_stops_when_nobody_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_looplag, "IDLE", 0.05)

    async def run() -> tuple[bool, bool]:
        _looplag.measure()
        watch = watch_here()
        assert watch is not None
        running = watch.lag is not None
        await asyncio.sleep(0.2)
        return running, watch.lag is None

    running, stopped = asyncio.run(run())
    assert running and stopped


def test_a_loop_closed_while_its_meter_runs_goes_without_the_collector() -> None:
    """A loop closed while its lateness is measured (the meter's timer set, and the deadline
    watch's) goes with its meter and its watch once nothing else holds them: each timer
    holds its own, the meter holds the watch, and the watch holds the meter only weakly,
    so the three make no cycle for the cyclic collector to find."""
    from .garbage import left_for_the_collector

    def run() -> None:
        loop = asyncio.new_event_loop()

        async def measured() -> None:
            _looplag.measure()
            with async_limit(30.0):
                await asyncio.sleep(0)
            watch = watch_here()
            assert watch is not None and watch.lag is not None  # both timers are set

        loop.run_until_complete(measured())
        loop.close()

    assert left_for_the_collector(run, (_looplag.LagMeter, _LoopWatch, asyncio.AbstractEventLoop)) == []


def test_a_loop_still_blocked_is_late_for_the_whole_span_and_no_more() -> None:
    async def run() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        _looplag.measure()
        await asyncio.sleep(0.03)
        _block(0.3)  # the timer due meanwhile has not run yet
        short, long = _looplag.lateness(0.1), _looplag.lateness(1.0)
        return short, long, loop.time() - started

    short, long, measured = asyncio.run(run())
    assert short == pytest.approx(0.1)
    # The block, and no more than the loop's whole time since it was measured: on a loaded
    # machine the sleep before it may run late too (0.3003 s in all once, beside 0.3 s blocked).
    assert 0.25 <= long <= measured


class _FakeLoop:
    """A loop whose clock and timers a test moves: ``call_at`` keeps the one timer the
    meter has armed, and :meth:`run_late` runs it ``by`` seconds after it was due."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timer: tuple[float, Callable[[], object]] | None = None

    def time(self) -> float:
        return self.now

    def call_at(self, at: float, callback: Callable[[], object]) -> None:
        self.timer = (at, callback)

    def run_late(self, by: float) -> tuple[float, float]:
        """Run the armed timer ``by`` seconds late; the stretch (due, ran) it stands for."""
        assert self.timer is not None
        at, callback = self.timer
        self.timer = None
        self.now = max(self.now, at + by)
        callback()
        return at, self.now


@given(
    lates=st.lists(st.sampled_from([0.0, 0.0005, 0.003, 0.04, 0.25, 1.5]), min_size=1, max_size=40),
    pause=st.sampled_from([0.0, 0.01, 0.3]),
    spans=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=5),
)
def test_the_meter_sums_the_stretches_it_ran_late_within_a_span(lates: list[float], pause: float, spans: list[float]) -> None:
    """Against the definition: the time within the last ``span`` seconds that lies in a
    stretch from a timer's due time to when it ran (those at least NOTABLE late), or
    after the timer still due; never more than the span, never less for a longer span."""
    from pytest_failover._deadline import _LoopWatch

    loop = _FakeLoop()
    meter = _looplag.LagMeter(_LoopWatch(loop))  # type: ignore[arg-type]  # the fake stands for an asyncio loop
    stretches = []
    for by in lates:
        meter.asked()  # a client that keeps asking: the meter keeps measuring
        due, ran = loop.run_late(by)
        if ran - due >= _looplag.NOTABLE:
            stretches.append((due, ran))
    loop.now += pause  # the next timer may be overdue now
    assert loop.timer is not None
    due_now = loop.timer[0]
    if loop.now > due_now:
        stretches.append((due_now, loop.now))
    previous = 0.0
    for span in sorted(spans):
        since = loop.now - span
        expected = sum(max(0.0, ran - max(due, since)) for due, ran in stretches)
        late = meter.lateness(span)
        assert late == pytest.approx(expected, abs=1e-9)
        assert 0.0 <= late <= span + 1e-9 and late >= previous - 1e-9
        previous = late
