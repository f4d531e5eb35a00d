"""One failover state behind several front-ends (``X.sharing(other)``): httpx sync and
async, requests and aiohttp see one breaker, budget, serving domain and control
document per pool, through real sockets to the outage simulator's fake domains."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from requests.adapters import HTTPAdapter

from benchmarks.scenarios._metrics import max_in_window
from pytest_failover import (
    AsyncFailoverTransport,
    ControlDocument,
    ControlError,
    FailoverResult,
    FailoverTransport,
    Hedging,
    Policy,
    Pool,
    faults,
    semconv,
)
from pytest_failover._state import State
from pytest_failover.integrations.aiohttp import FailoverMiddleware
from pytest_failover.integrations.requests import FailoverAdapter
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.shared import AsyncRedisHealth
from pytest_failover.simulator import FakeDomain

from .frontends import KINDS, Harness
from .servers import LoopbackServer
from .test_transport import fast, info

PRIMARY, BACKUP = "api.example.com", "api2.example.com"


@pytest.fixture
def domains(fake_domains: FakeDomainsFixture) -> tuple[FakeDomain, FakeDomain]:
    return fake_domains.add(PRIMARY), fake_domains.add(BACKUP)


@pytest.fixture
def chain(request: pytest.FixtureRequest) -> Iterator[Callable[[str, Policy], list[Harness]]]:
    """``chain(owner_kind, policy)``: a client of every kind; the first (of ``owner_kind``)
    builds the state, each next one shares the previous one's front-end."""
    made: list[Harness] = []

    def build(owner: str, policy: Policy) -> list[Harness]:
        pool = Pool("api", [f"http://{PRIMARY}", f"http://{BACKUP}"])
        made.append(Harness(owner, [pool], policy))
        for kind in [k for k in KINDS if k != owner]:
            made.append(Harness(kind, [], None, share=made[-1].transport))
        return list(made)

    yield build
    for harness in made:
        harness.close()


@pytest.mark.parametrize("owner", KINDS)
def test_a_breaker_opened_under_one_client_sends_every_other_client_straight_to_the_backup(
    owner: str, domains: tuple[FakeDomain, FakeDomain], chain: Callable[[str, Policy], list[Harness]]
) -> None:
    """The primary fails one request of the first client; the breaker it opens is the
    others' too: their first attempt goes to the backup, none reaches the primary."""
    primary, _ = domains
    clients = chain(owner, fast(breaker_threshold=1, breaker_cooldown=30.0))
    primary.fail(faults.status(503))
    first = info(clients[0].request("GET", f"http://{PRIMARY}/v1/rooms"))
    assert [a.status for a in first.attempts] == [503, 200] and first.domain == f"http://{BACKUP}"
    assert len(primary.requests()) == 1
    for client in clients[1:]:
        result = info(client.request("GET", f"http://{PRIMARY}/v1/rooms"))
        assert [a.domain for a in result.attempts] == [f"http://{BACKUP}"], client.kind
    assert len(primary.requests()) == 1  # no other client tried it
    states = [c.transport.state() for c in clients]
    assert all(s.pools == states[0].pools for s in states)  # one breaker, budget, serving domain
    pool = states[0].pools["api"]
    assert pool.domain(f"http://{PRIMARY}").breaker == "open" and pool.sticky == f"http://{BACKUP}"


def test_a_control_document_applied_through_one_client_holds_for_all(
    domains: tuple[FakeDomain, FakeDomain], chain: Callable[[str, Policy], list[Harness]]
) -> None:
    """Disabling the primary through the middleware moves every client to the backup, and
    the version counter is one: an older document is refused through any of them."""
    primary, backup = domains
    clients = chain("requests", fast())
    key = b"k" * 32
    doc = ControlDocument.parse(
        ControlDocument.sign(version=3, pools={"api": [f"http://{PRIMARY}"]}, expires_in=60, hmac_key=key),
        hmac_key=key,
    )
    by_kind = {c.kind: c for c in clients}
    by_kind["aiohttp"].transport.apply_control(doc)
    for client in clients:
        assert info(client.request("GET", f"http://{PRIMARY}/x")).domain == f"http://{BACKUP}"
        state = client.transport.state()
        assert state.control_version == 3 and not state.pools["api"].domain(f"http://{PRIMARY}").enabled
    assert primary.requests() == [] and len(backup.requests()) == len(KINDS)
    older = ControlDocument.parse(
        ControlDocument.sign(version=2, pools={"api": []}, expires_in=60, hmac_key=key), hmac_key=key
    )
    with pytest.raises(ControlError):
        by_kind["sync"].transport.apply_control(older)


def test_closing_a_sharer_leaves_the_others_working(
    domains: tuple[FakeDomain, FakeDomain], chain: Callable[[str, Policy], list[Harness]]
) -> None:
    """Each front-end closes only its own connections; the state goes on serving the rest."""
    clients = chain("async", fast())
    for client in clients[1:]:
        client.close()  # its session and front-end
    assert info(clients[0].request("GET", f"http://{PRIMARY}/x")).domain == f"http://{PRIMARY}"


# What a front-end keeps of its own: its I/O (the inner transport; a sync one's hedging threads).
# A front-end's own I/O: its inner transport, its hedging threads, and whether its race can
# cut its inner transport's sockets (then its hedging pools' requests take the lane); and the
# library it speaks (its class's, kept as its own: ``_FailoverBase._begin``).
OWN = {"_transport", "_hedgers", "_lane_hedges", "_library"}


def test_a_sharer_holds_every_piece_of_state_its_source_holds() -> None:
    """Whatever a transport's constructor keeps (its state: core, telemetry, stale cache,
    sticky files, fallback, clock, shared health, and anything added later) is the very
    same object in every kind of sharer; only the I/O is its own."""
    source = FailoverTransport([Pool("api", ["http://a.test", "http://b.test"])], Policy(hedging=Hedging(delay=0.1)))
    state = {name: value for name, value in vars(source).items() if name not in OWN}
    assert state.keys() == {"_state"}
    held_by_state = {name for name in State.__slots__ if getattr(source._state, name) is not None}
    assert {"core", "telemetry", "stale", "sticky", "clock"} <= held_by_state
    sync = [FailoverTransport.sharing(source), FailoverAdapter.sharing(source)._transport]
    asynchronous = [AsyncFailoverTransport.sharing(source), FailoverMiddleware.sharing(source)._transport]
    for sharer in [*sync, *asynchronous]:
        held = vars(sharer)
        assert all(held.get(name, source) is value for name, value in state.items()), type(sharer).__name__
        assert held["_transport"] is not source._transport
    for transport in sync:
        assert transport._hedgers is not None and transport._hedgers is not source._hedgers
        transport.close()
    for twin in asynchronous:
        asyncio.run(twin.aclose())
    source.close()


def test_stale_copies_and_telemetry_are_shared(servers: dict[str, LoopbackServer]) -> None:
    """An answer stored under requests is served stale to aiohttp in the outage, and the
    aiohttp requests' spans go to the tracer provider the adapter was built with."""
    a = servers["a"]
    a.set(body=b'{"rooms": [1]}', headers={"Cache-Control": "public, max-age=0, stale-if-error=60"})
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(stale_on_failure=True), tracer_provider=provider)
    with requests.Session() as session:
        session.mount("http://", adapter)
        assert session.get(a.url() + "/rooms", timeout=5).json() == {"rooms": [1]}
    exporter.clear()
    a.set(reset=True)
    middleware = FailoverMiddleware.sharing(adapter)

    async def outage() -> tuple[str | None, bytes]:
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session, session.get(a.url() + "/rooms") as r:
            return r.headers.get("X-Failover-Stale"), await r.read()

    assert asyncio.run(outage()) == ("1", b'{"rooms": [1]}')
    names = {span.name for span in exporter.get_finished_spans()}
    assert names == {f"{semconv.REQUEST_SPAN_PREFIX}api", "GET"}  # the logical request's and its attempt's
    adapter.close()


BAD = [object(), None, "https://api.example.com", requests.Session(), Pool("api", ["https://a.test"])]


SHARING: dict[str, Callable[[Any], object]] = {
    "FailoverTransport": FailoverTransport.sharing,
    "AsyncFailoverTransport": AsyncFailoverTransport.sharing,
    "FailoverAdapter": FailoverAdapter.sharing,
    "FailoverMiddleware": FailoverMiddleware.sharing,
}


@pytest.mark.parametrize("name", SHARING)
def test_sharing_takes_only_a_failover_front_end(name: str) -> None:
    """Anything else is a TypeError naming the constructor and what it got (an httpx client:
    with the hint to pass its transport)."""
    for bad in BAD:
        with pytest.raises(TypeError, match=rf"{name}\.sharing: takes the failover front-end .* got {type(bad).__name__}"):
            SHARING[name](bad)
    with httpx.Client() as client, pytest.raises(TypeError, match="got Client; pass the failover transport the client"):
        SHARING[name](client)


@pytest.mark.parametrize("name", SHARING)
def test_a_state_bound_to_async_redis_health_cannot_be_shared(name: str) -> None:
    """AsyncRedisHealth's tasks live in one event loop: every sharing constructor refuses
    it and says to build the state with RedisHealth on a sync front-end."""
    owner = FailoverMiddleware([Pool("api", ["http://a.test"])], shared=AsyncRedisHealth("redis://127.0.0.1:1/0"))
    with pytest.raises(TypeError, match=r"AsyncRedisHealth, whose tasks live in one event loop.*RedisHealth"):
        SHARING[name](owner)


def test_an_async_fallback_is_refused_by_a_sync_sharer_and_taken_by_an_async_one() -> None:
    async def fallback(request: httpx.Request, error: Exception) -> httpx.Response:
        return httpx.Response(200)

    owner = AsyncFailoverTransport([Pool("api", ["http://a.test"])], fallback=fallback)
    for sync in (FailoverTransport.sharing, FailoverAdapter.sharing):
        with pytest.raises(TypeError, match="the shared fallback is async and this front-end is sync"):
            sync(owner)
    assert FailoverMiddleware.sharing(owner)._transport._state.fallback is fallback


# -- a dozen threads and two event loops of tasks on one state, while the primary fails and recovers


COOLDOWN = 0.3
TASKS = 50  # per event loop
# Every client waits this long (s) between two requests, so that the load stays within what
# 2 shared cores serve.
THINK = 0.2
KEEP_ALL = httpx.Limits(max_connections=None, max_keepalive_connections=None)  # a connection per task


def served_by(response: Any) -> str | None:
    """The domain that answered a requests or aiohttp response (its ``.failover``)."""
    result: FailoverResult = response.failover
    return result.domain


class Load:
    """Clients of every kind sending GETs until ``stop``: what each got, and when it asked."""

    def __init__(self, owner: FailoverAdapter, stop: threading.Event) -> None:
        self.owner = owner
        self.stop = stop
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.answers: list[tuple[str, float, str | None]] = []  # (client kind, sent at, domain)
        self.in_flight: dict[int, float] = {}  # request -> sent at
        self._numbers = itertools.count()
        self.started = threading.Barrier(12 + 3 + 1)

    def sent(self) -> tuple[int, float]:
        with self.lock:
            key, at = next(self._numbers), time.time()
            self.in_flight[key] = at
            return key, at

    def done(self, kind: str, request: tuple[int, float], status: int | None, domain: str | None, error: str = "") -> None:
        key, at = request
        with self.lock:
            del self.in_flight[key]
            if status == 200 and domain is not None:
                self.answers.append((kind, at, domain))
            else:
                self.failures.append(f"{kind}: {status} from {domain} {error}")

    def oldest_in_flight(self) -> float:
        with self.lock:
            return min(self.in_flight.values(), default=time.time())

    def served(self, since: float) -> Counter[tuple[str, str | None]]:
        """(kind, domain) -> answers to the requests sent at ``since`` or later."""
        with self.lock:
            return Counter((kind, domain) for kind, at, domain in self.answers if at >= since)

    def requests_thread(self) -> None:
        with requests.Session() as session:
            session.mount("http://", self.owner)
            self.started.wait(10)
            while not self.stop.is_set():
                request = self.sent()
                try:
                    r = session.get(f"http://{PRIMARY}/x", timeout=10)
                    self.done("requests", request, r.status_code, served_by(r))
                except Exception as exc:
                    self.done("requests", request, None, None, repr(exc))
                self.stop.wait(THINK)

    def httpx_thread(self) -> None:
        with httpx.Client(transport=FailoverTransport.sharing(self.owner), timeout=10) as client:
            self.started.wait(10)
            while not self.stop.is_set():
                request = self.sent()
                try:
                    r = client.get(f"http://{PRIMARY}/x")
                    self.done("sync", request, r.status_code, r.extensions["failover"].domain)
                except Exception as exc:
                    self.done("sync", request, None, None, repr(exc))
                self.stop.wait(THINK)

    def aiohttp_loop(self) -> None:
        async def main() -> None:
            middleware = FailoverMiddleware.sharing(self.owner)
            connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver(), limit=0)
            async with aiohttp.ClientSession(connector=connector, middlewares=(middleware,)) as session:

                async def task() -> None:
                    while not self.stop.is_set():
                        request = self.sent()
                        try:
                            async with session.get(f"http://{PRIMARY}/x") as r:
                                await r.read()
                                self.done("aiohttp", request, r.status, served_by(r))
                        except Exception as exc:
                            self.done("aiohttp", request, None, None, repr(exc))
                        await asyncio.sleep(THINK)

                await asyncio.to_thread(self.started.wait, 10)
                await asyncio.gather(*(task() for _ in range(TASKS)))

        asyncio.run(main())

    def httpx_async_loop(self) -> None:
        async def main() -> None:
            transport = AsyncFailoverTransport.sharing(self.owner, httpx.AsyncHTTPTransport(limits=KEEP_ALL))
            async with httpx.AsyncClient(transport=transport, timeout=10) as client:

                async def task() -> None:
                    while not self.stop.is_set():
                        request = self.sent()
                        try:
                            r = await client.get(f"http://{PRIMARY}/x")
                            self.done("async", request, r.status_code, r.extensions["failover"].domain)
                        except Exception as exc:
                            self.done("async", request, None, None, repr(exc))
                        await asyncio.sleep(THINK)

                await asyncio.to_thread(self.started.wait, 10)
                await asyncio.gather(*(task() for _ in range(TASKS)))

        asyncio.run(main())


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.01)


def test_threads_and_tasks_on_one_state_ride_out_an_outage_with_one_probe_per_cooldown(
    domains: tuple[FakeDomain, FakeDomain],
) -> None:
    """12 requests threads, an httpx thread and 100 tasks (aiohttp and httpx, two event
    loops): the primary refuses, then answers 503 while it recovers, then is healthy. No
    client sees a failure; the recovering primary gets at most one request per cooldown
    from all of them together; once it is back, every client's requests go to it."""
    primary, _ = domains
    policy = Policy(breaker_cooldown=COOLDOWN, attempt_timeout=5.0, deadline=10.0)
    pool = Pool("api", [f"http://{PRIMARY}", f"http://{BACKUP}"])
    owner = FailoverAdapter([pool], policy, adapter=HTTPAdapter(pool_maxsize=16))  # a connection per thread
    stop = threading.Event()
    load = Load(owner, stop)
    workers = [threading.Thread(target=load.requests_thread) for _ in range(12)]
    workers += [threading.Thread(target=f) for f in (load.httpx_thread, load.aiohttp_loop, load.httpx_async_loop)]
    for worker in workers:
        worker.start()

    def breaker() -> str:
        return owner.state().pools["api"].domain(f"http://{PRIMARY}").breaker

    try:
        load.started.wait(10)
        time.sleep(2 * COOLDOWN)  # every client connected, its first answers in
        primary.fail(faults.refused())
        wait_for(lambda: breaker() != "closed", "the primary's breaker opened")
        opened = time.time()
        # Requests sent before the breaker opened may still be on their way to the primary
        # (a client short of CPU sends late): only once they are all back is every request
        # the primary receives one the core decided to send it as a probe.
        wait_for(lambda: load.oldest_in_flight() > opened, "the requests sent before the opening ended")
        time.sleep(COOLDOWN)
        primary.fail(faults.status(503))
        recovering = time.monotonic()

        def probes() -> list[float]:
            return [r.time for r in primary.requests() if r.fault == faults.status(503)]

        wait_for(lambda: len(probes()) >= 3 and time.monotonic() - recovering > 4 * COOLDOWN, "3 probes")
        primary.heal()
        wait_for(lambda: owner.state().pools["api"].sticky == f"http://{PRIMARY}", "traffic back on the primary")
        back = time.time()
        time.sleep(2 * COOLDOWN)
    finally:
        stop.set()
        for worker in workers:
            worker.join(15)
        owner.close()
    assert not any(w.is_alive() for w in workers)
    assert load.failures == []
    seen = probes()
    assert max_in_window(seen, COOLDOWN) == 1, [round(t - seen[0], 3) for t in seen]
    after = load.served(back)
    for kind in ("requests", "sync", "aiohttp", "async"):
        assert after[(kind, f"http://{PRIMARY}")] > 0 and after[(kind, f"http://{BACKUP}")] == 0, (kind, after)
