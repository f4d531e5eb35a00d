"""``State.forget`` and ``forget_everywhere`` (the pytest plugin's ``failover_fresh_state``):
what traffic taught a front-end is forgotten, what it was told is kept, and requests from
threads and tasks meanwhile never fail for it."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from pathlib import Path

import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from pytest_failover import (
    AsyncFailoverTransport,
    FailoverTransport,
    Hedging,
    Policy,
    Pool,
    RetryBudget,
    SlowCalls,
)
from pytest_failover._state import _LIVE, forget_everywhere
from pytest_failover._transport import _state_of
from pytest_failover.control import ControlDocument
from pytest_failover.resolve import SystemResolver

from .test_transport import fast

PRIMARY, BACKUP = "http://127.0.0.1:1", "http://127.0.0.2:1"  # answered in process: nothing is dialled


class Domains:
    """An in-process inner transport: the backup always answers 200; the primary refuses
    while ``down``, else answers ``status``."""

    def __init__(self) -> None:
        self.down = False
        self.status = 200

    def answer(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "127.0.0.1":
            if self.down:
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(self.status, content=b"primary")
        return httpx.Response(self.status, content=b"backup")

    async def answer_async(self, request: httpx.Request) -> httpx.Response:
        return self.answer(request)


def test_what_traffic_taught_is_forgotten_and_what_was_told_is_kept() -> None:
    """After the primary refused (its breaker open, the backup serving), 503s drained part
    of the budget and a GET left a stale copy: every breaker is closed again, the primary
    serves, the budget is full and no copy is served; the control document's word stays."""
    domains = Domains()
    transport = FailoverTransport(
        [Pool("api", [PRIMARY, BACKUP])],
        fast(breaker_threshold=2, stale_on_failure=True, retry_budget=RetryBudget(max_tokens=10)),
        transport=httpx.MockTransport(domains.answer),
    )
    with httpx.Client(transport=transport) as client:
        assert client.get(PRIMARY + "/x").extensions["failover"].domain == PRIMARY  # a stale copy now
        domains.status = 503  # both: retries that failed after sending cost tokens
        assert client.get(PRIMARY + "/x").extensions["failover"].stale
        domains.down, domains.status = True, 200
        assert client.get(PRIMARY + "/x").extensions["failover"].domain == BACKUP
        pool = transport.state().pools["api"]
        assert pool.domain(PRIMARY).breaker == "open" and pool.sticky == BACKUP
        assert pool.budget_tokens is not None and pool.budget_tokens < 10
        domains.down, domains.status = False, 503

        assert forget_everywhere() >= 1
        pool = transport.state().pools["api"]
        assert [d.breaker for d in pool.domains] == ["closed", "closed"]
        assert [d.consecutive_failures for d in pool.domains] == [0, 0]
        assert pool.sticky is None and pool.budget_tokens == 10
        result = client.get(PRIMARY + "/x").extensions["failover"]
        assert result.outcome == "failure" and not result.stale  # no copy left to serve

        transport.apply_control(ControlDocument.create(version=1, pools={"api": [PRIMARY]}, expires_in=60))
        forget_everywhere()
        assert [d.enabled for d in transport.state().pools["api"].domains] == [False, True]
        domains.status = 200
        assert client.get(PRIMARY + "/x").extensions["failover"].domain == BACKUP


def test_the_slow_domain_counts_start_afresh() -> None:
    """The hedge throttle, the latency each adaptive hedge delay reads and the slow-call
    windows are as built again: none of them counts a call of before."""
    transport = FailoverTransport(
        [Pool("api", [PRIMARY, BACKUP])],
        fast(hedging=Hedging(), slow_calls=SlowCalls(threshold=5.0)),
        transport=httpx.MockTransport(Domains().answer),
    )
    with httpx.Client(transport=transport) as client:
        for _ in range(5):
            client.get(PRIMARY + "/x")
    core = _state_of(transport, "test")._state.core.pools["api"]
    assert core.throttle is not None and core.latency is not None and core.slow_calls is not None
    assert core.throttle.requests == 5 and len(core.latency[core.order[0]]) == 5
    assert core.slow_calls[core.order[0]].last is not None
    forget_everywhere()
    assert core.throttle.requests == 0 and len(core.latency[core.order[0]]) == 0
    assert core.slow_calls[core.order[0]].last is None


def test_each_state_is_forgotten_once_and_a_collected_one_is_gone() -> None:
    """A ``sharing`` front-end shares its state, so one forget serves both; a transport
    that was collected is no longer reached."""
    gc.collect()
    before = len(_LIVE)
    transport = FailoverTransport([Pool("api", [PRIMARY, BACKUP])], fast(), transport=httpx.MockTransport(Domains().answer))
    shared = FailoverTransport.sharing(transport, transport=httpx.MockTransport(Domains().answer))
    assert len(_LIVE) == before + 1
    assert forget_everywhere() == before + 1
    del transport, shared
    gc.collect()
    assert len(_LIVE) == before


def test_threads_sharing_a_transport_never_fail_while_it_forgets() -> None:
    """A dozen threads send through one transport while its primary flaps and the state is
    forgotten again and again: every request is answered (the backup is up throughout)."""
    domains = Domains()
    transport = FailoverTransport(
        [Pool("api", [PRIMARY, BACKUP])], fast(breaker_threshold=1), transport=httpx.MockTransport(domains.answer)
    )
    failures: list[BaseException] = []
    served = 0
    lock = threading.Lock()
    stop = time.monotonic() + 10  # bounded in time as in count

    def send(client: httpx.Client) -> None:
        nonlocal served
        for _ in range(150):
            if time.monotonic() > stop:
                return
            try:
                assert client.get(PRIMARY + "/x").status_code == 200
            except BaseException as exc:  # a user-visible failure, counted
                failures.append(exc)
            with lock:
                served += 1

    with httpx.Client(transport=transport) as client:
        threads = [threading.Thread(target=send, args=(client,)) for _ in range(12)]
        for thread in threads:
            thread.start()
        for flip in range(300):
            domains.down = flip % 3 == 0
            forget_everywhere()
            time.sleep(0.001)
        for thread in threads:
            thread.join(15)
        domains.down = False
        forget_everywhere()
        assert client.get(PRIMARY + "/x").extensions["failover"].domain == PRIMARY
    assert failures == [] and served == 12 * 150


def test_tasks_sharing_an_async_transport_never_fail_while_it_forgets() -> None:
    """The same with 200 tasks on one event loop and an async transport."""
    domains = Domains()

    async def run() -> tuple[list[BaseException], str]:
        transport = AsyncFailoverTransport(
            [Pool("api", [PRIMARY, BACKUP])], fast(breaker_threshold=1), transport=httpx.MockTransport(domains.answer_async)
        )
        failures: list[BaseException] = []
        async with httpx.AsyncClient(transport=transport) as client:

            async def send() -> None:
                for _ in range(10):
                    try:
                        assert (await client.get(PRIMARY + "/x")).status_code == 200
                    except BaseException as exc:  # a user-visible failure, counted
                        failures.append(exc)

            async def flap() -> None:
                for flip in range(200):
                    domains.down = flip % 3 == 0
                    forget_everywhere()
                    await asyncio.sleep(0)

            async with asyncio.timeout(30):
                await asyncio.gather(flap(), *(send() for _ in range(200)))
            domains.down = False
            forget_everywhere()
            last = (await client.get(PRIMARY + "/x")).extensions["failover"].domain
        return failures, last

    failures, last = asyncio.run(run())
    assert failures == [] and last == PRIMARY


def test_a_pool_that_was_never_used_forgets_nothing_it_did_not_have() -> None:
    """Forgetting a fresh state changes nothing a snapshot shows."""
    transport = FailoverTransport([Pool("api", [PRIMARY, BACKUP])], Policy(), transport=httpx.MockTransport(Domains().answer))
    before = transport.state()
    forget_everywhere()
    assert transport.state() == before


def test_the_breaker_gauges_say_closed_again() -> None:
    """``failover.breaker.state`` follows the breakers it reports: after a forget the
    primary's reads closed (0) again, where it read open (2); no transition is counted."""
    reader = InMemoryMetricReader()
    domains = Domains()
    transport = FailoverTransport(
        [Pool("api", [PRIMARY, BACKUP])],
        fast(breaker_threshold=1),
        transport=httpx.MockTransport(domains.answer),
        meter_provider=MeterProvider(metric_readers=[reader]),
    )

    def read(name: str) -> dict[str, float]:
        data = reader.get_metrics_data()
        return {
            str((point.attributes or {})["failover.domain"]): point.value
            for rm in (data.resource_metrics if data else [])
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
            for point in metric.data.data_points
            if isinstance(point, NumberDataPoint)  # a gauge's and a counter's
        }

    domains.down = True
    client = httpx.Client(transport=transport)
    client.get(PRIMARY + "/x")
    assert read("failover.breaker.state") == {PRIMARY: 2, BACKUP: 0}
    forget_everywhere()
    assert read("failover.breaker.state") == {PRIMARY: 0, BACKUP: 0}
    assert read("failover.breaker.transitions") == {PRIMARY: 1}  # the opening, and nothing since
    client.close()


def test_no_address_is_held_bad_any_more() -> None:
    """A pool with a resolver remembers the addresses that failed lately, to try them last:
    forgotten too."""
    transport = FailoverTransport([Pool("api", ["http://localhost:1", BACKUP])], fast(resolver=SystemResolver()))
    dialer = _state_of(transport, "test")._state.dialer
    assert dialer is not None
    dialer.failed("localhost", "127.0.0.1")
    assert dialer.bad("localhost") == ["127.0.0.1"]
    assert dialer.order("localhost", ["127.0.0.1", "::1"]) == ["::1", "127.0.0.1"]
    forget_everywhere()
    assert dialer.bad("localhost") == [] and dialer.order("localhost", ["127.0.0.1", "::1"]) == ["127.0.0.1", "::1"]


def test_a_pool_resumed_from_its_sticky_file_resumes_there_again(tmp_path: Path) -> None:
    """Built from a sticky file that says the backup served, the pool starts there, its
    primary suspect for a cooldown; after traffic moved it back to the primary (its file
    says so now), a forget leaves it as built: on the backup again, whatever the file says
    since (a session-wide client built before the first test keeps what it was built with)."""
    path = tmp_path / "sticky.json"
    path.write_text(json.dumps({"version": 1, "pools": {"api": BACKUP}}))
    now = [100.0]
    transport = FailoverTransport(
        [Pool("api", [PRIMARY, BACKUP])],
        fast(sticky_path=str(path), breaker_cooldown=30.0),
        transport=httpx.MockTransport(Domains().answer),
        clock=lambda: now[0],
    )
    as_built = transport.state()
    assert as_built.pools["api"].sticky == BACKUP
    with httpx.Client(transport=transport) as client:
        now[0] += 31.0  # the cooldown is over: the next request fails back to the primary
        assert client.get(PRIMARY + "/x").extensions["failover"].domain == PRIMARY
    assert transport.state().pools["api"].sticky == PRIMARY
    assert json.loads(path.read_text())["pools"]["api"] == PRIMARY
    forget_everywhere()
    assert transport.state() == as_built
    with httpx.Client(transport=transport) as client:
        assert client.get(PRIMARY + "/x").extensions["failover"].domain == BACKUP
