"""Policy(resolver=...) through httpcore's network backend, over real sockets: a poisoned
system DNS, a domain's addresses failing over, serve-stale, the certificate bound to the name."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpcore
import httpx
import pytest
from client.frontends import (  # tests/client: a package on the rootdir path, as tests/resolve is
    KINDS,
    Harness,
)
from opentelemetry.sdk.trace import ReadableSpan

from pytest_failover import (
    AsyncFailoverTransport,
    FailoverTransport,
    Policy,
    Pool,
    faults,
    semconv,
)
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.resolve import (
    Answer,
    CachingResolver,
    ChainResolver,
    DoHResolver,
    Resolver,
    SystemResolver,
)
from pytest_failover.simulator import DoHServer, FakeDomain
from pytest_failover.telemetry_capture import FailoverTelemetry

from .conftest import DOH_HOST

API = "api.test"
BACKUP = "backup.test"


Make = Callable[..., Harness]
#: Every front-end: for the tests the requests adapter and the aiohttp middleware must pass too.
EVERY_FRONT_END = pytest.mark.parametrize("make", KINDS, indirect=True)


@pytest.fixture(params=["sync", "async", "httpx2", "httpx2-async"])
def make(
    request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, failover_telemetry: FailoverTelemetry
) -> Iterator[Make]:
    """``make(resolver, domains=[api, backup])``: a failover client of one front-end
    (httpx or httpx2, sync or async, by default: httpcore's and httpcore2's backends; any
    of ``KINDS`` with ``EVERY_FRONT_END``) whose
    pool resolves through ``resolver``, with its spans captured."""
    made: list[Harness] = []

    def build(resolver: Resolver | None, domains: tuple[str, ...] = (API, BACKUP), **policy: Any) -> Harness:
        pool = Pool("api", [f"https://{d}" for d in domains])
        options: dict[str, Any] = {"attempt_timeout": 2.0, "deadline": 6.0, **policy}
        harness = Harness(
            request.param,
            [pool],
            Policy(resolver=resolver, **options),
            loop=loop,
            tracer_provider=failover_telemetry.tracer_provider,
        )
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()


def attempt_spans(telemetry: FailoverTelemetry) -> list[ReadableSpan]:
    return [s for s in telemetry.spans() if s.attributes is not None and semconv.FAILOVER_ATTEMPT in s.attributes]


def address_switches(spans: list[ReadableSpan]) -> list[tuple[Any, Any]]:
    return [
        (e.attributes[semconv.FAILOVER_FROM], e.attributes[semconv.FAILOVER_TO])
        for s in spans
        for e in s.events
        if e.name == semconv.EVENT_ADDRESS_SWITCH and e.attributes is not None
    ]


def test_poisoned_system_dns_moves_the_pool_without_a_resolver(fd: FakeDomainsFixture, make: Make) -> None:
    """The control case: with the system's answer poisoned and no resolver, the pool leaves a healthy primary."""
    fd.add(API)
    fd.add(BACKUP)
    fd.fail(API, faults.dns_poisoned())
    harness = make(None)
    assert harness.get(f"https://{API}/").status_code == 200
    assert fd.requests(API) == [] and len(fd.requests(BACKUP)) == 1


@EVERY_FRONT_END
def test_poisoned_system_dns_with_doh_stays_on_the_primary(
    fd: FakeDomainsFixture,
    doh: tuple[DoHServer, FakeDomain],
    doh_resolver: DoHResolver,
    make: Make,
    failover_telemetry: FailoverTelemetry,
) -> None:
    """A poisoned system DNS and a working DoH resolver: 200 requests, no failure, no switch, every attempt names DoH."""
    api = fd.add(API)
    fd.add(BACKUP)
    fd.fail(API, faults.dns_poisoned())
    doh[0].answer(API, [api.address], ttl=60)
    harness = make(doh_resolver)
    statuses = [harness.get(f"https://{API}/item/{i}").status_code for i in range(200)]
    assert statuses == [200] * 200
    assert len(fd.requests(API)) == 200 and fd.requests(BACKUP) == []
    assert all(r.headers.get("host") == API for r in fd.requests(API))
    assert harness.transport.state().pools["api"].sticky in (None, f"https://{API}")
    spans = attempt_spans(failover_telemetry)
    assert len(spans) == 200
    for span in spans:
        assert span.attributes is not None
        assert span.attributes[semconv.FAILOVER_RESOLVE_SOURCE] == semconv.RESOLVE_SOURCE_DOH
        assert span.attributes[semconv.NETWORK_PEER_ADDRESS] == api.address
    assert failover_telemetry.switches() == []


@EVERY_FRONT_END
@pytest.mark.parametrize("stage", ["connect", "handshake"])
def test_one_address_down_serves_from_the_other(
    fd: FakeDomainsFixture,
    doh: tuple[DoHServer, FakeDomain],
    doh_resolver: DoHResolver,
    make: Make,
    failover_telemetry: FailoverTelemetry,
    stage: str,
) -> None:
    """One of two addresses refuses, or resets the TLS handshake: every request succeeds on
    the other, the breaker stays closed, one address switch."""
    api = fd.add(API, addresses=2)
    fd.add(BACKUP)
    down, up = api.addresses
    fd.fail(API, faults.address_down(down, stage=stage))  # a connect fault: each answer closes its connection
    doh[0].answer(API, [down, up], ttl=60)
    harness = make(doh_resolver)
    assert [harness.get(f"https://{API}/{i}").status_code for i in range(20)] == [200] * 20
    assert len(fd.requests(API)) == 20 and fd.requests(BACKUP) == []
    pool = harness.transport.state().pools["api"]
    assert pool.sticky in (None, f"https://{API}")
    assert pool.domain(f"https://{API}").breaker == "closed"
    assert pool.domain(f"https://{API}").consecutive_failures == 0
    spans = attempt_spans(failover_telemetry)
    assert len(spans) == 20  # one attempt per request: the address switch is no retry
    assert all(s.attributes is not None and s.attributes[semconv.FAILOVER_RESOLVE_SOURCE] == "doh" for s in spans)
    assert all(s.attributes is not None and s.attributes[semconv.NETWORK_PEER_ADDRESS] == up for s in spans)
    # The first request met the down address; the next ones start on the good one.
    assert address_switches(spans) == [(down, up)]


def test_every_address_down_fails_the_domain(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make
) -> None:
    """When every address of the domain refuses, the domain fails and the pool moves on."""
    api = fd.add(API, addresses=2)
    fd.add(BACKUP)
    fd.fail(API, faults.refused())
    doh[0].answer(API, list(api.addresses), ttl=60)
    doh[0].answer(BACKUP, [fd.domain(BACKUP).address], ttl=60)
    harness = make(doh_resolver)
    assert harness.get(f"https://{API}/").status_code == 200
    assert len(fd.requests(BACKUP)) == 1


def test_a_handshake_reset_at_every_address_fails_the_domain(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make
) -> None:
    """Both addresses reset the TLS handshake (the one a second time, as a sole address): the
    attempt fails as a connect error of the domain after trying each, and sends nothing."""
    api = fd.add(API)
    other = fd.add("other.test")  # a second address that resets too
    fd.fail(API, faults.address_down(api.address, stage="handshake"))
    fd.fail("other.test", faults.address_down(other.address, stage="handshake"))
    doh[0].answer(API, [api.address, other.address], ttl=60)
    harness = make(doh_resolver, domains=(API,), schedule=_one_attempt())
    with pytest.raises(harness.errors.AllDomainsFailed) as caught:
        harness.get(f"https://{API}/")
    [attempt] = caught.value.attempts
    assert attempt.error_type in {semconv.ERROR_CONNECTION_RESET, semconv.ERROR_TLS, semconv.ERROR_CONNECT}
    message = str(caught.value.__cause__ or caught.value)
    assert api.address in message and other.address in message, message
    assert fd.requests(API) == [] and fd.requests("other.test") == []


def test_a_certificate_failure_at_one_address_does_not_move_on(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make
) -> None:
    """The first address presents a certificate for another name, the second the right one:
    the attempt fails as ``server_certificate_invalid`` without trying the second, and the
    first is not remembered as a bad address (``_dial.address_failure`` says why)."""
    api = fd.add(API)
    evil = fd.add("evil.test")
    answer = Answer(host=API, addresses=(evil.address, api.address), ttl=60.0, source="doh")  # in this order
    harness = make(StaticResolver(answer), domains=(API,), schedule=_one_attempt())
    with pytest.raises(harness.errors.AllDomainsFailed) as caught:
        harness.get(f"https://{API}/")
    assert [a.error_type for a in caught.value.attempts] == [semconv.ERROR_SERVER_CERTIFICATE_INVALID]
    assert fd.requests(API) == [] and fd.requests("evil.test") == []
    # Nor is the address remembered as bad (that would send the next request to the second one).
    with pytest.raises(harness.errors.AllDomainsFailed) as again:
        harness.get(f"https://{API}/")
    assert [a.error_type for a in again.value.attempts] == [semconv.ERROR_SERVER_CERTIFICATE_INVALID]
    assert fd.requests(API) == []


class StaticResolver:
    """A resolver that always gives one answer, its addresses in a known order (a DNS
    message's records have none)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    def resolve(self, host: str) -> Answer:
        return self.answer

    async def aresolve(self, host: str) -> Answer:
        return self.answer

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def test_resolver_down_with_a_warm_cache_serves_stale(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make,
    failover_telemetry: FailoverTelemetry,
) -> None:
    """DoH down after the answer expired: the stale answer keeps requests on the primary."""
    api = fd.add(API)
    fd.add(BACKUP)
    fd.fail(API, faults.dns_poisoned())  # a resolve-stage fault: every answer closes its connection
    doh[0].answer(API, [api.address], ttl=60)
    now = [0.0]
    resolver = ChainResolver([CachingResolver(doh_resolver, clock=lambda: now[0]), SystemResolver()])
    harness = make(resolver)
    assert harness.get(f"https://{API}/warm").status_code == 200
    fd.fail(DOH_HOST, faults.refused())
    now[0] += 600.0
    assert [harness.get(f"https://{API}/{i}").status_code for i in range(5)] == [200] * 5
    assert len(fd.requests(API)) == 6 and fd.requests(BACKUP) == []
    sources = [s.attributes[semconv.FAILOVER_RESOLVE_SOURCE] for s in attempt_spans(failover_telemetry) if s.attributes]
    assert sources[0] == semconv.RESOLVE_SOURCE_DOH
    assert set(sources[1:]) == {semconv.RESOLVE_SOURCE_STALE}


def test_resolver_down_with_a_cold_cache_falls_back_to_the_system(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make,
    failover_telemetry: FailoverTelemetry,
) -> None:
    """DoH down and nothing cached: the chain's system resolver answers."""
    api = fd.add(API)
    fd.add(BACKUP)
    fd.fail(DOH_HOST, faults.refused())
    harness = make(ChainResolver([CachingResolver(doh_resolver), SystemResolver()]))
    assert harness.get(f"https://{API}/").status_code == 200
    [span] = attempt_spans(failover_telemetry)
    assert span.attributes is not None
    assert span.attributes[semconv.FAILOVER_RESOLVE_SOURCE] == semconv.RESOLVE_SOURCE_SYSTEM
    assert span.attributes[semconv.NETWORK_PEER_ADDRESS] == api.address


def test_a_certificate_for_another_name_at_the_resolved_ip_is_refused(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make
) -> None:
    """DoH sends the client to another server with a valid certificate for its own name: TLS refuses it."""
    fd.add(API)
    evil = fd.add("evil.test")
    doh[0].answer(API, [evil.address], ttl=60)
    harness = make(doh_resolver, domains=(API,), schedule=_one_attempt())
    with pytest.raises(harness.errors.AllDomainsFailed) as caught:
        harness.get(f"https://{API}/")
    assert [a.error_type for a in caught.value.attempts] == [semconv.ERROR_SERVER_CERTIFICATE_INVALID]
    assert fd.requests("evil.test") == [] and fd.requests(API) == []


@EVERY_FRONT_END
def test_the_wrong_certificate_at_the_right_ip_is_refused(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, make: Make
) -> None:
    """The domain's own address presents a certificate for another name: refused, nothing sent."""
    api = fd.add(API)
    fd.fail(API, faults.tls_wrong_host())
    doh[0].answer(API, [api.address], ttl=60)
    harness = make(doh_resolver, domains=(API,), schedule=_one_attempt())
    with pytest.raises(harness.errors.AllDomainsFailed) as caught:
        harness.get(f"https://{API}/")
    assert [a.error_type for a in caught.value.attempts] == [semconv.ERROR_SERVER_CERTIFICATE_INVALID]
    assert fd.requests(API) == []


def _one_attempt() -> Any:
    from pytest_failover import ExponentialBackoff

    return ExponentialBackoff(max_attempts=1)


def test_an_async_transport_resolves_under_trio(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver
) -> None:
    """Under trio: a poisoned system DNS with a DoH chain in front (cache waiters, DoH's two
    queries), then one of two addresses down, then the system resolver as the chain's
    fallback with DoH down: every request succeeds on the primary."""
    import anyio

    api = fd.add(API, addresses=2)
    fd.add(BACKUP)
    fd.fail(API, faults.dns_poisoned())
    doh[0].answer(API, list(api.addresses), ttl=60)
    cached = ChainResolver([CachingResolver(doh_resolver), SystemResolver()])
    pool = Pool("api", [f"https://{API}", f"https://{BACKUP}"])

    async def run() -> tuple[list[int], list[int]]:
        with anyio.fail_after(30.0):  # bounded
            transport = AsyncFailoverTransport(pool, Policy(resolver=cached, attempt_timeout=2.0, deadline=6.0))
            async with httpx.AsyncClient(transport=transport) as client:
                statuses = [(await client.get(f"https://{API}/p/{i}")).status_code for i in range(5)]
                fd.fail(API, faults.address_down(api.addresses[0]))
                statuses += [(await client.get(f"https://{API}/d/{i}")).status_code for i in range(5)]
            await cached.aclose()
            fd.heal(API)
            fd.fail(DOH_HOST, faults.refused())
            cold = ChainResolver([CachingResolver(doh_resolver), SystemResolver()])
            fallback = AsyncFailoverTransport(pool, Policy(resolver=cold, attempt_timeout=2.0, deadline=6.0))
            async with httpx.AsyncClient(transport=fallback) as client:
                system = [(await client.get(f"https://{API}/s/{i}")).status_code for i in range(3)]
            await cold.aclose()
            return statuses, system

    statuses, system = anyio.run(run, backend="trio")
    assert statuses == [200] * 10 and system == [200] * 3
    assert len(fd.requests(API)) == 13 and fd.requests(BACKUP) == []


def test_a_resolver_with_a_transport_of_ones_own_is_an_error(doh_resolver: DoHResolver) -> None:
    """The resolver works through the inner transport the library builds: a caller's own is refused, not ignored."""
    with pytest.raises(ValueError, match="leave transport= unset"):
        FailoverTransport(Pool("api", [f"https://{API}"]), Policy(resolver=doh_resolver), transport=httpx.HTTPTransport())


def test_a_resolver_with_an_adapter_of_ones_own_is_an_error(doh_resolver: DoHResolver) -> None:
    """The requests adapter resolves through the connections it makes: a wrapped adapter of one's own is refused."""
    from requests.adapters import HTTPAdapter

    from pytest_failover.integrations.requests import FailoverAdapter

    with pytest.raises(ValueError, match="leave adapter= unset"):
        FailoverAdapter(Pool("api", [f"https://{API}"]), Policy(resolver=doh_resolver), adapter=HTTPAdapter())


def test_a_resolver_with_a_connector_of_ones_own_is_an_error(
    fd: FakeDomainsFixture,
    doh: tuple[DoHServer, FakeDomain],
    doh_resolver: DoHResolver,
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The aiohttp middleware resolves through the connector it makes: a session with
    another connector is refused before anything is sent, and so is a resolver given to
    ``connector()``; the middleware's own connector serves."""
    import aiohttp

    from pytest_failover.integrations.aiohttp import FailoverMiddleware

    doh[0].answer(API, [fd.add(API).address], ttl=60)
    middleware = FailoverMiddleware(Pool("api", [f"https://{API}"]), Policy(resolver=doh_resolver))

    async def get(connector: aiohttp.BaseConnector | None) -> int:
        async with (
            aiohttp.ClientSession(connector=connector, middlewares=(middleware,)) as session,
            session.get(f"https://{API}/") as response,
        ):
            return response.status

    with pytest.raises(ValueError, match=r"connector=failover.connector\(\)"):
        loop.run_until_complete(get(None))
    assert fd.requests(API) == []
    with pytest.raises(ValueError, match="leave resolver= unset"):
        middleware.connector(resolver="my own")

    async def own() -> int:
        return await get(middleware.connector())

    assert loop.run_until_complete(own()) == 200  # the control: the middleware's connector


#: The attempt time of the flipping test, and how often an address goes down by turns: more
#: than a third of it, so that no dial can see three flips. A dial tries each address, and
#: each once more when all refused (``_dial`` rule 5): it fails only if every try lands on
#: the address that is down at that instant, which takes a flip between each two of its
#: four tries. With flips every 200 ms and connects slowed to 125-400 ms each by a loaded
#: event loop (100 tasks, two CPU-bound processes on two cores), dials did: 5 runs in 52
#: failed so, each address refused when it was tried (the code doing as designed).
FLIP_ATTEMPT = 3.0
FLIP_EVERY = FLIP_ATTEMPT / 3 + 0.05
FLIPS = 3  # the least number of flips the requests must see


def test_tasks_and_threads_while_an_address_flips(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver, loop: asyncio.AbstractEventLoop
) -> None:
    """Waves of 100 asyncio tasks and 4 threads on one transport state while one of two
    addresses goes down by turns, over at least three flips: no failure."""
    api = fd.add(API, addresses=2)
    fd.add(BACKUP)
    first, second = api.addresses
    doh[0].answer(API, [first, second], ttl=60)
    pool = Pool("api", [f"https://{API}"])
    resolver = ChainResolver([CachingResolver(doh_resolver), SystemResolver()])
    sync = FailoverTransport(pool, Policy(resolver=resolver, attempt_timeout=FLIP_ATTEMPT, deadline=8.0))
    tasks_transport = AsyncFailoverTransport.sharing(sync)
    stop = threading.Event()
    flips: list[float] = []

    def flip() -> None:
        for i in range(100):  # bounded: 100 flips
            fd.fail(API, faults.address_down(first if i % 2 == 0 else second))
            flips.append(time.monotonic())
            if stop.wait(FLIP_EVERY):
                return

    def enough() -> bool:
        return len(flips) > FLIPS  # the first sets the fault, the next FLIPS flip it

    failures: list[BaseException] = []
    statuses: list[int] = []
    lock = threading.Lock()

    # One client for the four threads: a client closes its transport as it leaves its
    # ``with``, and the first thread done would close the others' connections under them.
    client = httpx.Client(transport=sync)

    def thread_body() -> None:
        for i in range(500):  # bounded; until the flips are seen
            if enough():
                return
            try:
                status = client.get(f"https://{API}/t/{i}").status_code
            except Exception as exc:  # counted and asserted on below
                with lock:
                    failures.append(exc)
                continue
            with lock:
                statuses.append(status)

    async def tasks() -> list[int]:
        seen: list[int] = []
        async with httpx.AsyncClient(transport=tasks_transport) as client:
            for wave in range(50):  # bounded; until the flips are seen
                responses = await asyncio.gather(*(client.get(f"https://{API}/a/{wave}/{i}") for i in range(100)))
                seen += [r.status_code for r in responses]
                if enough():
                    break
        return seen

    flipper = threading.Thread(target=flip)
    threads = [threading.Thread(target=thread_body) for _ in range(4)]
    flipper.start()
    for t in threads:
        t.start()
    started = time.monotonic()
    try:
        task_statuses = loop.run_until_complete(asyncio.wait_for(tasks(), 60.0))
    finally:
        for t in threads:
            t.join(60.0)
        stop.set()
        flipper.join(5.0)
        loop.run_until_complete(tasks_transport.aclose())
        client.close()
    assert time.monotonic() - started < 60.0
    assert enough(), flips  # the requests ran across the flips
    assert failures == []
    assert task_statuses == [200] * len(task_statuses) and len(task_statuses) >= 100
    assert statuses == [200] * len(statuses) and len(statuses) >= 4
    assert fd.requests(BACKUP) == []  # the flips never moved the pool


A1, A2 = "127.0.0.1", "127.0.0.2"


@pytest.mark.parametrize(
    ("errors", "tried"),
    [
        ([httpcore.ConnectError, httpcore.ConnectError], [A1, A2, A1, A2]),  # every one refused: once more
        ([httpcore.ConnectTimeout, httpcore.ConnectError], [A1, A2]),  # a time-out: no second pass
    ],
)
def test_a_dial_whose_every_address_refused_tries_them_once_more(errors: list[type[Exception]], tried: list[str]) -> None:
    """A refusal is instant and an address may come back between two tries, so a dial
    whose every address refused goes over them once more; one that timed out does not."""
    from pytest_failover._dial import Dial, Dialer
    from pytest_failover.resolve import Answer

    dialer = Dialer({}, clock=time.monotonic, forget_after=0.0)
    dial = Dial(dialer, "api.test", Answer(host="api.test", addresses=(A1, A2), ttl=60.0, source="doh"), 10.0, httpcore)
    seen: list[str] = []
    for address, _ in dial:
        seen.append(address)
        dial.failed(address, (errors[len(seen) - 1] if len(seen) <= len(errors) else httpcore.ConnectError)("no"))
    assert seen == tried
    assert type(dial.error()) is httpcore.ConnectError  # not every address timed out
