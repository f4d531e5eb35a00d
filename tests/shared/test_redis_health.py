"""Shared health in one process: several transports, each with its own RedisHealth, share one
real redis-server exactly as worker processes would (their own breakers, clocks and
connections). The tests across real processes are in test_fleet_processes.py."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
from client.forking import (
    in_child,  # tests/client: a package on the rootdir path, as tests/shared is
)
from client.servers import closed_port
from opentelemetry.sdk.metrics import MeterProvider, ObservableGauge
from opentelemetry.sdk.metrics import _Gauge as SyncGauge  # the SDK exports it only privately
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    NumberDataPoint,
)

from benchmarks._redis_server import RedisServer
from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool, semconv
from pytest_failover._breaker import Standing
from pytest_failover._pool import Domain
from pytest_failover.shared import AsyncRedisHealth, RedisHealth
from pytest_failover.shared._wire import Keys

A, B = "http://a.test", "http://b.test"
POLICY = Policy(breaker_threshold=2, breaker_cooldown=0.5, sticky=False)


class Domains:
    """An inner transport: the hosts in ``down`` refuse connections; attempts are counted."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        self.gate: threading.Event | None = None  # set: the primary answers only once it is set
        self.waiting = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        origin = f"http://{request.url.host}"
        with self.lock:
            self.hits[origin] = self.hits.get(origin, 0) + 1
        gate = self.gate
        if origin == A and gate is not None:
            self.waiting = True
            gate.wait(5)
        if origin in self.down:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=origin)

    def sync(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def asynchronous(self) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            return self.handle(request)

        return httpx.MockTransport(handle)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)


def standing(transport: FailoverTransport | AsyncFailoverTransport, url: str) -> Standing:
    return transport._state.core.pools["api"].standing(Domain.parse(url), time.monotonic())


def heard_opened(transport: FailoverTransport | AsyncFailoverTransport, url: str, since: float) -> bool:
    """Has ``transport``'s breaker of ``url`` been opened since ``since``, whatever it
    stands at by the time anyone looks? A forked child's run can take longer than the
    0.5 s cooldown on a loaded machine, so the opening the parent heard may have lapsed."""
    return transport._state.core.pools["api"].breakers[Domain.parse(url)].open_until > since


@pytest.fixture
def make(redis_server: RedisServer, prefix: str) -> Iterator[Callable[..., FailoverTransport]]:
    """Connected sync transports on the session's Redis, closed at the end."""
    made: list[FailoverTransport] = []

    def build(domains: Domains, *, policy: Policy = POLICY, url: str | None = None, **options: float) -> FailoverTransport:
        health = RedisHealth(url or redis_server.url, prefix=prefix, **options)
        transport = FailoverTransport([Pool("api", [A, B])], policy, domains.sync(), shared=health)
        made.append(transport)
        return transport

    yield build
    for transport in made:
        transport.close()


def connected(*transports: FailoverTransport | AsyncFailoverTransport) -> None:
    def up(t: FailoverTransport | AsyncFailoverTransport) -> bool:
        shared = t.state().shared
        return shared is not None and shared.state == "connected"

    for t in transports:
        wait_for(lambda: up(t), "connected")  # noqa: B023  # called at once, in this iteration


def test_an_opening_reaches_the_other_process_before_it_fails(make: Callable[..., FailoverTransport]) -> None:
    """A opens the dead primary; B hears it and sends its next request to the backup with no attempt on the primary."""
    domains = Domains()
    a, b = make(domains), make(domains)
    connected(a, b)
    domains.down.add(A)
    with httpx.Client(transport=a) as client:
        for _ in range(2):
            assert client.get(f"{A}/x").text == B
    wait_for(lambda: standing(b, A) in (Standing.RESTING, Standing.OPEN), "B's breaker of A open")
    before = domains.hits[A]
    with httpx.Client(transport=b) as client:
        response = client.get(f"{A}/x")
    assert response.text == B and len(response.extensions["failover"].attempts) == 1
    assert domains.hits[A] == before
    assert b.state().pools["api"].domain(A).breaker == "open"


# The two processes below, once the first opened the primary: the domains, the two
# transports and a client over each.
Opened = tuple[Domains, FailoverTransport, FailoverTransport, httpx.Client, httpx.Client]


@contextmanager
def primary_opened(make: Callable[..., FailoverTransport]) -> Iterator[Opened]:
    """Two processes on one fleet, the primary dead: the first opens it (two failures), and
    the second has heard it."""
    domains = Domains()
    a, b = make(domains), make(domains)
    connected(a, b)
    domains.down.add(A)
    with httpx.Client(transport=a) as ca, httpx.Client(transport=b) as cb:
        for _ in range(2):
            ca.get(f"{A}/x")
        wait_for(lambda: standing(b, A) is not Standing.HEALTHY, "the other heard the opening")
        yield domains, a, b, ca, cb


def test_one_probe_per_cooldown_and_the_fleet_fails_back_on_its_answer(make: Callable[..., FailoverTransport]) -> None:
    """When the primary is due in both, one takes the fleet's lease and probes; the other
    keeps to the backup (no second probe) until the probe's answer closes the primary in both."""
    with primary_opened(make) as (domains, a, b, ca, cb):
        domains.down.clear()  # the primary recovers, but answers A's probe only when let go
        domains.gate = threading.Event()
        wait_for(lambda: standing(a, A) is Standing.DUE and standing(b, A) is Standing.DUE, "due in both", 2)
        probe = threading.Thread(target=lambda: ca.get(f"{A}/x"))
        probe.start()
        wait_for(lambda: domains.waiting, "A's probe reached the primary")
        hits = domains.hits[A]
        response = cb.get(f"{A}/x")
        assert response.text == B and domains.hits[A] == hits  # B did not probe a second time
        assert standing(b, A) is Standing.PROBING
        domains.gate.set()
        probe.join(5)
        wait_for(lambda: standing(b, A) is Standing.HEALTHY, "B heard the probe's answer")
        assert cb.get(f"{A}/x").text == A


def test_a_process_that_starts_afresh_hears_the_fleets_next_word(make: Callable[..., FailoverTransport]) -> None:
    """A process that forgets what traffic taught it (``State.forget``: the pytest plugin's
    fresh state before each test) forgets the fleet's word with the rest: the primary that
    another process opened is closed here, and tried again, though Redis still holds the
    opening. The other process keeps its own state, and its next word, an opening of the
    primary once its probe fails, is heard here as before."""
    with primary_opened(make) as (domains, a, b, ca, cb):
        b._state.forget()
        assert b.state().pools["api"].domain(A).breaker == "closed"
        assert standing(a, A) is not Standing.HEALTHY, "the other process's own state stays"
        hits = domains.hits[A]
        assert cb.get(f"{A}/x").text == B and domains.hits[A] == hits + 1, "B tried the primary again"
        since = time.monotonic()
        wait_for(lambda: standing(a, A) is Standing.DUE, "A's probe due", 2)
        assert ca.get(f"{A}/x").text == B  # its probe fails: the primary opens again
        wait_for(lambda: heard_opened(b, A, since), "B heard the fleet's next word")
        assert b.state().pools["api"].domain(A).breaker == "open"


def opening_published(url: str, prefix: str, domain: str) -> None:
    """Wait until an opening of ``domain`` (pool ``api``) reached Redis: its key, set in the
    same pipeline as its message (so that a child leaves only once it told the fleet)."""
    import redis

    key = Keys(prefix).open("api", domain)
    with redis.Redis.from_url(url) as client:
        wait_for(lambda: bool(client.exists(key)), "the opening in Redis")
    time.sleep(0.05)  # (the message right behind it)


def test_a_forks_child_shares_health_as_a_process_of_its_own(
    make: Callable[..., FailoverTransport], redis_server: RedisServer, prefix: str
) -> None:
    """A transport with shared health, made before the fork (gunicorn ``--preload``), is a
    process of its own to the fleet in the child: its own connection to Redis (the parent's
    threads are not there), its own sender (the parent would take the child's words for its
    own, and ignore them). The child opens the dead primary; the parent hears it."""
    domains = Domains()
    parent = make(domains)
    connected(parent)
    shared = parent._state.shared
    assert shared is not None

    def child() -> str:
        connected(parent)  # its own connection, or its copy of the parent's state
        domains.down.add(A)  # (the child's copy of the inner transport)
        with httpx.Client(transport=parent) as client:
            for _ in range(2):
                client.get(f"{A}/x")
        wait_for(lambda: standing(parent, A) is not Standing.HEALTHY, "the child's breaker of A open")
        opening_published(redis_server.url, prefix, A)
        return str(shared.sender)

    forked = time.monotonic()
    assert not heard_opened(parent, A, forked)
    sender = in_child(child)
    assert sender != shared.sender and not sender.startswith(("raised", "no answer")), sender
    wait_for(lambda: heard_opened(parent, A, forked), "the parent heard the child")
    assert domains.hits.get(A, 0) == 0  # the parent itself never tried it


def test_a_forks_child_starts_the_async_twins_tasks_in_its_own_loop(redis_server: RedisServer, prefix: str) -> None:
    """``AsyncRedisHealth`` whose tasks ran in a loop of the parent's: in the child, the
    first request starts them in the child's loop, and the child's opening reaches the fleet
    (here, a sync transport of the parent's)."""
    domains = Domains()
    hearing = FailoverTransport([Pool("api", [A, B])], POLICY, domains.sync(), shared=RedisHealth(redis_server.url, prefix=prefix))
    health = AsyncRedisHealth(redis_server.url, prefix=prefix)
    transport = AsyncFailoverTransport([Pool("api", [A, B])], POLICY, domains.asynchronous(), shared=health)

    async def used() -> None:
        client = httpx.AsyncClient(transport=transport)  # (closing it would close the transport)
        await client.get(f"{A}/x")  # starts the tasks (in this loop)
        await async_wait(lambda: health.state == "connected")

    async def child() -> str:
        client = httpx.AsyncClient(transport=transport)
        await client.get(f"{B}/x")  # starts its tasks
        await async_wait(lambda: health.state == "connected")
        domains.down.add(A)  # (the child's copy of the inner transport)
        for _ in range(2):
            await client.get(f"{A}/x")
        await asyncio.to_thread(opening_published, redis_server.url, prefix, A)
        return str(health.sender)

    try:
        asyncio.run(used())
        connected(hearing)
        parent_sender = health.sender
        forked = time.monotonic()
        assert not heard_opened(hearing, A, forked)
        said = in_child(lambda: asyncio.run(child()))
        assert said != parent_sender and not said.startswith(("raised", "no answer")), said
        wait_for(lambda: heard_opened(hearing, A, forked), "the parent heard the child")
    finally:
        hearing.close()


def test_keys_and_messages_naming_unknown_domains_are_ignored(
    make: Callable[..., FailoverTransport], redis_server: RedisServer, prefix: str
) -> None:
    """Forged keys and messages about a domain or pool this process lacks change nothing;
    the same forms naming a local domain do (so the reading is not simply off)."""
    raw = redis_server.client()
    far = time.time() + 60
    raw.set(f"{prefix}:open:api:http://evil.test", f'{{"until":{far}}}')
    raw.set(f"{prefix}:open:other:{A}", f'{{"until":{far}}}')
    raw.set(f"{prefix}:open:api:{B}", f'{{"until":{far}}}')  # a local domain: applied
    raw.set(f"{prefix}:serving:api", "http://evil.test")
    domains = Domains()
    t = make(domains)
    connected(t)
    assert t.state().pools["api"].domain(B).breaker == "open"
    assert t.state().pools["api"].domain(A).breaker == "closed"
    health = t._state.shared
    assert health is not None
    ignored = health.ignored
    forged = [
        f'{{"v":1,"from":"x","kind":"open","pool":"api","domain":"http://evil.test","until":{far}}}',
        f'{{"v":1,"from":"x","kind":"open","pool":"other","domain":"{A}","until":{far}}}',
        '{"v":1,"from":"x","kind":"open","pool":"api"',
        f'{{"v":1,"from":"x","kind":"open","pool":"api","domain":"{A}","until":"soon"}}',
    ]
    for message in forged:
        raw.publish(f"{prefix}:events", message)
    wait_for(lambda: health.ignored == ignored + len(forged), "every forged message read")
    assert t.state().pools["api"].domain(A).breaker == "closed"
    raw.publish(f"{prefix}:events", f'{{"v":1,"from":"x","kind":"open","pool":"api","domain":"{A}","until":{far}}}')
    wait_for(lambda: t.state().pools["api"].domain(A).breaker == "open", "a genuine message applied")
    # a deadline far away is trusted for one cooldown at most
    open_until = t._state.core.pools["api"].breakers[Domain.parse(A)].open_until
    assert open_until <= time.monotonic() + POLICY.breaker_cooldown
    raw.close()


def test_redis_killed_mid_run_loses_nothing_and_comes_back(
    own_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis dies under load: every request still answers, the state, gauge and log say
    local-only (one line per change), and the transport reconnects when Redis is back."""
    reader = InMemoryMetricReader()
    domains = Domains()
    # Before the transport: its connection thread may log "connected" while it is built.
    caplog.set_level(logging.INFO, logger="pytest_failover")
    health = RedisHealth(own_redis.url, prefix=prefix, max_backoff=0.2)
    t = FailoverTransport(
        [Pool("api", [A, B])], POLICY, domains.sync(), shared=health, meter_provider=MeterProvider([reader])
    )
    try:
        connected(t)
        assert gauge(reader) == 1
        domains.down.add(A)
        answered = 0
        with httpx.Client(transport=t) as client:
            for i in range(300):
                if i == 100:
                    own_redis.stop()
                if i == 200:
                    wait_for(lambda: t.state().shared.state == "disconnected", "disconnected")  # type: ignore[union-attr]  # configured
                    assert gauge(reader) == 0
                    own_redis.start()
                answered += client.get(f"{A}/x").status_code == 200
            assert answered == 300
            connected(t)
            assert gauge(reader) == 1
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shared health")]
        assert sum("local-only" in line for line in lines) == 1, lines
        assert sum(line.endswith("connected; sharing 2 domain(s)") for line in lines) == 2, lines
    finally:
        t.close()
    assert t.state().shared.state == "closed"  # type: ignore[union-attr]  # configured


def gauge(reader: InMemoryMetricReader) -> int:
    [value] = gauge_points(reader)
    return value


def gauge_points(reader: InMemoryMetricReader) -> list[int]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        int(point.value)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        if scope.scope.name == semconv.SHARED_SCOPE
        for metric in scope.metrics
        if metric.name == semconv.FAILOVER_SHARED_STATE
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint)
    ]


def test_the_gauge_is_read_at_every_collection_until_shared_health_closes(redis_server: RedisServer, prefix: str) -> None:
    """Observed, not set at each change: a gauge set at each change goes unreported once a
    collection passes without one (delta temporality, or a cumulative one before SDK 1.45)."""
    delta: dict[type, AggregationTemporality] = {ObservableGauge: AggregationTemporality.DELTA,
                                                 SyncGauge: AggregationTemporality.DELTA}
    reader = InMemoryMetricReader(preferred_temporality=delta)
    health = RedisHealth(redis_server.url, prefix=prefix)
    t = FailoverTransport([Pool("api", [A, B])], POLICY, Domains().sync(), shared=health,
                          meter_provider=MeterProvider([reader]))  # fmt: skip
    try:
        connected(t)
        assert [gauge(reader) for _ in range(3)] == [1, 1, 1]
    finally:
        t.close()
    assert gauge_points(reader) == []  # closed: no value


def _connections_of(health: RedisHealth | AsyncRedisHealth, url: str) -> list[str]:
    """The names of ``health``'s connections, as Redis lists its clients."""
    admin = redis.Redis.from_url(url)
    try:
        names = [str(client.get("name", "")) for client in admin.client_list()]
    finally:
        admin.close()
    return [name for name in names if health.sender.replace(" ", "_") in name]


def test_a_state_whose_front_ends_were_all_dropped_unclosed_stops_its_shared_health(
    redis_server: RedisServer, prefix: str
) -> None:
    """A client built and never closed (one per job, say), dropped in a reference cycle:
    once collected, its shared health's threads end and Redis sees none of its connections
    (its threads held it, so nothing else would ever have stopped them)."""
    health = RedisHealth(redis_server.url, prefix=prefix)
    held = [FailoverTransport([Pool("api", [A, B])], POLICY, Domains().sync(), shared=health)]
    connected(held[0])
    assert _connections_of(health, redis_server.url)
    _collected_stops(held, health, redis_server.url)


def _collected_stops(held: list[FailoverTransport], health: RedisHealth, url: str) -> None:
    """Drop the front-end ``held`` holds (its caller's only reference) in a reference cycle,
    and collect it: ``health``'s two threads, alive until then, end, and Redis sees none of
    its connections."""
    threads = list(health._threads)
    assert [thread.is_alive() for thread in threads] == [True, True]
    cycle: list[object] = [held.pop()]
    cycle.append(cycle)
    del cycle
    gc.collect()
    for thread in threads:
        thread.join(5)
    assert [thread.is_alive() for thread in threads] == [False, False]
    wait_for(lambda: not _connections_of(health, url), "its connections closed")


def test_the_last_open_front_end_dropped_beside_a_closed_one_stops_its_shared_health(
    redis_server: RedisServer, prefix: str
) -> None:
    """The owner is closed but still referenced (an attribute of a long-lived object, say),
    which keeps the state alive; its sharer, the last open front-end, is dropped unclosed. Once
    it is collected the shared health's threads end, as at the last close."""
    health = RedisHealth(redis_server.url, prefix=prefix)
    owner = FailoverTransport([Pool("api", [A, B])], POLICY, Domains().sync(), shared=health)
    held = [FailoverTransport.sharing(owner, Domains().sync())]
    connected(owner)
    owner.close()  # not the last: the sharer is open
    _collected_stops(held, health, redis_server.url)
    assert owner._state.shared is health  # the closed owner, and its state, live on


def test_a_closed_front_end_collected_beside_an_open_one_stops_nothing(redis_server: RedisServer, prefix: str) -> None:
    """The other way round: the open front-end keeps its shared health running."""
    health = RedisHealth(redis_server.url, prefix=prefix)
    owner = FailoverTransport([Pool("api", [A, B])], POLICY, Domains().sync(), shared=health)
    sharer = FailoverTransport.sharing(owner, Domains().sync())
    connected(owner)
    sharer.close()
    del sharer
    gc.collect()
    time.sleep(0.3)
    try:
        assert health.state == "connected" and all(thread.is_alive() for thread in health._threads)
    finally:
        owner.close()


def test_an_async_state_whose_front_ends_were_all_dropped_unclosed_stops_its_tasks(
    redis_server: RedisServer, prefix: str
) -> None:
    """The async twin: its tasks, which hold it, are cancelled in their loop, and their
    connections close."""

    async def main() -> None:
        health = AsyncRedisHealth(redis_server.url, prefix=prefix)
        transport = AsyncFailoverTransport([Pool("api", [A, B])], POLICY, Domains().asynchronous(), shared=health)
        await transport.handle_async_request(httpx.Request("GET", f"{A}/x"))  # starts the tasks
        await async_wait(lambda: health.state == "connected")
        tasks = list(health._tasks)
        assert [task.done() for task in tasks] == [False, False]
        assert await asyncio.to_thread(_connections_of, health, redis_server.url)
        cycle: list[object] = [transport]
        cycle.append(cycle)
        del transport, cycle
        gc.collect()
        await asyncio.wait(tasks, timeout=5)
        assert [task.cancelled() for task in tasks] == [True, True]
        deadline = time.monotonic() + 5.0
        while await asyncio.to_thread(_connections_of, health, redis_server.url):
            assert time.monotonic() < deadline, "its connections still open"
            await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_slow_redis_costs_one_bounded_wait_then_local_only(tmp_path: Path, prefix: str) -> None:
    """While Redis stalls, the probe lease gives up after ``timeout`` and the probe goes
    ahead locally; the transport is local-only until Redis answers quickly again."""
    server = RedisServer(tmp_path / "slow", extra=("--enable-debug-command", "yes")).start()
    try:
        domains = Domains()
        t = FailoverTransport(
            [Pool("api", [A, B])], POLICY, domains.sync(), shared=RedisHealth(server.url, prefix=prefix, max_backoff=0.2)
        )
        connected(t)
        domains.down.add(A)
        with httpx.Client(transport=t) as client:
            for _ in range(2):
                client.get(f"{A}/x")
            domains.down.clear()
            wait_for(lambda: standing(t, A) is Standing.DUE, "due", 2)
            stall = threading.Thread(target=lambda: server.client().execute_command("DEBUG", "SLEEP", "1"))  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            stall.start()
            time.sleep(0.05)
            started = time.monotonic()
            response = client.get(f"{A}/x")
            took = time.monotonic() - started
            assert response.text == A and took < 0.5, took  # the probe went ahead, locally
            assert t.state().shared.state == "disconnected"  # type: ignore[union-attr]  # configured
            stall.join(5)
            connected(t)
        t.close()
    finally:
        server.stop()


def test_construction_errors_are_specific(redis_server: RedisServer, prefix: str) -> None:
    """A bad URL, prefix or timeout, the wrong twin, or one health for two transports: a clear error."""
    with pytest.raises(ValueError, match="redis://, rediss://, unix://"):
        RedisHealth("http://127.0.0.1:6379")
    with pytest.raises(ValueError, match="prefix must be"):
        RedisHealth(redis_server.url, prefix="has space")
    with pytest.raises(ValueError, match="timeout must be"):
        RedisHealth(redis_server.url, timeout=0)
    with pytest.raises(TypeError, match="takes RedisHealth, got AsyncRedisHealth"):
        FailoverTransport([Pool("api", [A, B])], shared=AsyncRedisHealth(redis_server.url))  # type: ignore[arg-type]  # the error under test
    health = RedisHealth(redis_server.url, prefix=prefix)
    t = FailoverTransport([Pool("api", [A, B])], shared=health)
    try:
        with pytest.raises(ValueError, match="serves one transport"):
            FailoverTransport([Pool("api", [A, B])], shared=health)
    finally:
        t.close()


def test_the_password_is_never_shown(redis_server: RedisServer) -> None:
    """The URL in logs and state() keeps the user, not the password."""
    assert RedisHealth("redis://app:s3cret@127.0.0.1:1/0").shown_url == "redis://app:***@127.0.0.1:1/0"


def test_the_control_version_is_shared(make: Callable[..., FailoverTransport]) -> None:
    """A version one process applied shows as the fleet's in the others' state()."""
    from pytest_failover.control import ControlDocument

    domains = Domains()
    a, b = make(domains), make(domains)
    connected(a, b)
    a.apply_control(ControlDocument.create(version=5, pools={"api": [B]}, expires_in=60))
    wait_for(lambda: b.state().shared.fleet_control_version == 5, "B heard version 5")  # type: ignore[union-attr]  # configured
    assert b.state().control_version is None  # only a verified document changes B's pools
    assert b.state().as_dict()["shared"]["fleet_control_version"] == 5  # type: ignore[index]  # a dict


async def test_the_async_twin_shares_with_a_sync_transport(redis_server: RedisServer, prefix: str) -> None:
    """AsyncRedisHealth (redis-py's asyncio client, tasks started by the first request)
    hears a sync process's opening and tells it its own."""
    domains = Domains()
    sync = FailoverTransport([Pool("api", [A, B])], POLICY, domains.sync(), shared=RedisHealth(redis_server.url, prefix=prefix))
    health = AsyncRedisHealth(redis_server.url, prefix=prefix)
    asynchronous = AsyncFailoverTransport([Pool("api", [A, B])], POLICY, domains.asynchronous(), shared=health)
    try:
        async with httpx.AsyncClient(transport=asynchronous) as client:
            assert (await client.get(f"{A}/x")).text == A  # starts the tasks
            await async_wait(lambda: health.state == "connected")
            connected(sync)
            domains.down.add(A)
            sync_client = httpx.Client(transport=sync)  # closing it would close the transport
            for _ in range(2):
                await asyncio.to_thread(sync_client.get, f"{A}/x")
            await async_wait(lambda: standing(asynchronous, A) is not Standing.HEALTHY)
            hits = domains.hits[A]
            assert (await client.get(f"{A}/x")).text == B and domains.hits[A] == hits
            domains.down.add(B)  # now the async transport opens B: the sync one hears it
            with pytest.raises(httpx.TransportError):  # pinned: two failed attempts on B
                await client.get(f"{B}/x", extensions={"failover": {"domain": B}})
            await async_wait(lambda: standing(sync, B) is not Standing.HEALTHY)
    finally:
        await asynchronous.aclose()
        sync.close()
    assert health.state == "closed"


async def async_wait(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.005)


def test_the_requests_and_aiohttp_front_ends_take_shared(redis_server: RedisServer, prefix: str) -> None:
    """FailoverAdapter(shared=RedisHealth) and FailoverMiddleware(shared=AsyncRedisHealth) pass it on."""
    from pytest_failover.integrations.aiohttp import FailoverMiddleware
    from pytest_failover.integrations.requests import FailoverAdapter

    adapter = FailoverAdapter([Pool("api", [A, B])], shared=RedisHealth(redis_server.url, prefix=prefix))
    try:
        wait_for(lambda: adapter.state().shared.state == "connected", "adapter connected")  # type: ignore[union-attr]  # configured
    finally:
        adapter.close()
    assert adapter.state().shared.state == "closed"  # type: ignore[union-attr]  # configured
    middleware = FailoverMiddleware([Pool("api", [A, B])], shared=AsyncRedisHealth(redis_server.url, prefix=prefix))
    assert middleware.state().shared is not None
    asyncio.run(middleware.aclose())
    assert middleware.state().shared.state == "closed"  # type: ignore[union-attr]  # configured


def test_an_httpx2_transport_shares_health_with_an_httpx_one(
    make: Callable[..., FailoverTransport], redis_server: RedisServer, prefix: str
) -> None:
    """httpx2's front-end takes ``shared=`` as httpx's does: the httpx transport opens the
    dead primary, the httpx2 one (another process, by its own RedisHealth) hears it and
    sends its next request to the backup with no attempt on the primary."""
    import httpx2

    from pytest_failover import httpx2 as pf2

    domains = Domains()
    first = make(domains)

    def handle(request: httpx2.Request) -> httpx2.Response:
        try:
            response = domains.handle(httpx.Request(request.method, str(request.url)))  # counted alike
        except httpx.ConnectError as exc:
            raise httpx2.ConnectError(str(exc), request=request) from None
        return httpx2.Response(response.status_code, text=response.text)

    health = RedisHealth(redis_server.url, prefix=prefix)
    second = pf2.FailoverTransport([Pool("api", [A, B])], POLICY, httpx2.MockTransport(handle), shared=health)
    try:
        connected(first)
        wait_for(lambda: second.state().shared.state == "connected", "httpx2 connected")  # type: ignore[union-attr]  # configured
        domains.down.add(A)
        with httpx.Client(transport=first) as client:
            for _ in range(2):
                assert client.get(f"{A}/x").text == B
        wait_for(lambda: second._state.core.pools["api"].standing(Domain.parse(A), time.monotonic())
                 in (Standing.RESTING, Standing.OPEN), "the httpx2 transport's breaker of A open")
        before = domains.hits[A]
        with httpx2.Client(transport=second) as client2:
            response = client2.get(f"{A}/x")
        assert response.text == B and len(response.extensions["failover"].attempts) == 1
        assert domains.hits[A] == before
    finally:
        second.close()


def test_the_gauge_says_local_only_while_any_shared_health_is(redis_server: RedisServer, prefix: str) -> None:
    """One series for the process: 0 while any of its transports' shared health is
    local-only, whichever was built first."""
    reader = InMemoryMetricReader()
    provider = MeterProvider([reader])
    down = FailoverTransport([Pool("eu", [A, B])], POLICY, Domains().sync(), meter_provider=provider,
                             shared=RedisHealth(f"redis://127.0.0.1:{closed_port()}", prefix=prefix))  # fmt: skip
    up = FailoverTransport([Pool("api", [A, B])], POLICY, Domains().sync(), meter_provider=provider,
                           shared=RedisHealth(redis_server.url, prefix=prefix))  # fmt: skip
    try:
        connected(up)
        assert down.state().shared.state == "disconnected"  # type: ignore[union-attr]  # configured
        assert gauge(reader) == 0
        down.close()
        assert gauge(reader) == 1
    finally:
        up.close()
        down.close()
