"""Slow-call verdicts leave out the client's own delays where they can be told: how long
an answer sat in the kernel before the client read it (``_sockets.waited``,
``Attempt.waited``: a thread kept from the GIL), and calls in flight count only on a slow
answer's evidence (``SlowCallWindow.add``: loops in many threads). The domains answer from another process (``benchmarks._simulated``), so
the CPU-bound threads here hold up the client and never the servers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from benchmarks._simulated import Simulated, simulated
from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool, SlowCalls
from pytest_failover._sockets import waited

from .load import loops_in_threads

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


def _served_sync(transport: FailoverTransport, url: str, requests: int) -> Counter[str]:
    served: Counter[str] = Counter()
    stop = time.monotonic() + 20
    with httpx.Client(transport=transport) as client:
        for _ in range(requests):
            if time.monotonic() > stop:
                break
            served[client.get(url + "/v1/ping").extensions["failover"].domain] += 1
    return served


def test_threads_kept_from_the_gil_never_eject_a_healthy_domain() -> None:
    """Eight CPU-bound threads beside a sync client: its 2 ms calls take a tenth of a second
    and more, waiting for the GIL after their answers came. Before the kernel's clock was
    read, the primary was ejected after its first 5 calls and 35 of 40 requests went to
    the backup."""
    with _domains() as (_, a, b), _cpu_bound_threads(8):
        transport = FailoverTransport([Pool("api", [a, b])], POLICY)
        served = _served_sync(transport, a, 40)
    assert served == Counter({a: 40}), served
    assert [d.breaker for d in transport.state().pools["api"].domains] == ["closed", "closed"]


def test_a_slow_domain_is_still_ejected_from_threads_kept_from_the_gil() -> None:
    """The kernel's clock does not excuse the domain: its answers come 0.3 s late, and
    traffic moves to the backup once ``minimum_calls`` calls were slow, CPU-bound threads
    or not."""
    with _domains(primary_held=0.3) as (_, a, b), _cpu_bound_threads(8):
        transport = FailoverTransport([Pool("api", [a, b])], POLICY)
        served = _served_sync(transport, a, 20)
    assert served[a] == 5 and served[b] == 15, served
    assert transport.state().pools["api"].domains[0].breaker == "open"


def test_twelve_event_loops_in_threads_share_a_healthy_domain() -> None:
    """One failover state, twelve threads each running its own event loop (``sharing``)
    with 10 tasks, on 2 cores, starting together: every loop waits for the GIL in turn,
    more than any loop's own lateness shows. The first calls' answers came in time, and
    the calls still in flight then counted as slow ejected the shared primary in about
    one run in four."""
    with _domains() as (_, a, b):
        transport = AsyncFailoverTransport([Pool("api", [a, b])], POLICY)

        async def run() -> Counter[str]:
            served: Counter[str] = Counter()
            stop = time.monotonic() + 2.0
            async with httpx.AsyncClient(transport=AsyncFailoverTransport.sharing(transport)) as client:

                async def user() -> None:
                    for _ in range(200):  # bounded; the clock ends it first
                        if time.monotonic() >= stop:
                            return
                        served[(await client.get(a + "/v1/ping")).extensions["failover"].domain] += 1

                await asyncio.gather(*[user() for _ in range(10)])
            return served

        results = loops_in_threads(12, run)
    assert len(results) == 12 and all(isinstance(r, Counter) for r in results), results
    served = sum((r for r in results if isinstance(r, Counter)), Counter[str]())
    assert set(served) == {a}, (served, [d.breaker for d in transport.state().pools["api"].domains])


def test_the_kernel_says_how_long_an_answer_sat_unread() -> None:
    """``waited`` reads the time since the answer's bytes came: at least the time the
    client left them after reading its head (less a tick and the kernel's rounding), at
    most the time since the request went out less the 0.2 s the domain held the answer
    (so not the time since the request's bytes were sent)."""
    with _domains(primary_held=0.2) as (_, a, _b), httpx.Client() as client:
        client.get(a + "/v1/ping")  # a connection kept alive
        sent = time.monotonic()
        with client.stream("GET", a + "/v1/ping") as response:
            came = time.monotonic()
            time.sleep(0.3)
            sat = waited(response)
            now = time.monotonic()
        assert now - came - 0.02 <= sat <= now - sent - 0.2, (sat, now - came, now - sent)


def test_no_socket_no_word() -> None:
    """An answer made in process, or one whose connection closed, tells nothing."""
    assert waited(httpx.Response(200, content=b"{}")) == 0.0
    with _domains() as (_, a, _b), httpx.Client() as client:
        response = client.get(a + "/v1/ping", headers={"Connection": "close"})
        assert waited(response) == 0.0
