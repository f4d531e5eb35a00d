"""DoHResolver against the fake DoH server, over real loopback sockets and TLS."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from collections import Counter
from collections.abc import Callable

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_failover import faults, semconv
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.resolve import (
    Answer,
    BadAnswer,
    CachingResolver,
    ChainResolver,
    DoHResolver,
    ForbiddenAddress,
    NoAddresses,
    ResolveError,
    ResolverUnavailable,
    ResolveTimeout,
    SystemResolver,
    public_or_loopback,
)
from pytest_failover.resolve._doh import import_dns, parse_reply
from pytest_failover.simulator import DoHServer, FakeDomain

from .conftest import DOH_HOST, Ask

DoH = tuple[DoHServer, FakeDomain]
MakeDoH = Callable[..., DoHResolver]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_answer_has_both_families_interleaved_and_the_smallest_ttl(
    ask: Ask, doh: DoH, make_doh: MakeDoH, method: str
) -> None:
    """A and AAAA are both asked; IPv6 comes first, the families alternate (RFC 8305)."""
    server, _ = doh
    server.answer("api.example.com", ["127.0.0.5", "127.0.0.6", "::1"], ttl=42)
    answer = ask(make_doh(method=method), "api.example.com")
    assert answer.addresses[:2] == ("::1", answer.addresses[1])
    assert sorted(answer.addresses) == ["127.0.0.5", "127.0.0.6", "::1"]
    assert (answer.ttl, answer.source) == (42.0, semconv.RESOLVE_SOURCE_DOH)
    assert sorted(q.rdtype for q in server.queries("api.example.com")) == ["A", "AAAA"]
    assert {r.method for r in doh[1].requests()} == {method}


def test_tls_and_http_stay_bound_to_the_server_name(ask: Ask, doh: DoH, make_doh: MakeDoH) -> None:
    """Connected by IP, the request still names the DoH server in Host (and SNI: the
    certificate for doh.test is accepted)."""
    server, domain = doh
    server.answer("api.example.com", ["127.0.0.5"])
    ask(make_doh(), "api.example.com")
    assert {r.headers["host"] for r in domain.requests()} == {DOH_HOST}


def test_a_certificate_for_another_name_at_the_right_ip_is_refused(
    ask: Ask, fd: FakeDomainsFixture, doh: DoH, make_doh: MakeDoH
) -> None:
    """The server's certificate is checked against its name, not its IP."""
    doh[0].answer("api.example.com", ["127.0.0.5"])
    fd.fail(DOH_HOST, faults.tls_wrong_host())
    with pytest.raises(ResolverUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        ask(make_doh(), "api.example.com")


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        ("nxdomain", NoAddresses, "no A or AAAA"),
        ("refused", ResolverUnavailable, "REFUSED"),
        ("servfail", ResolverUnavailable, "SERVFAIL"),
        ("garbage", BadAnswer, "malformed DNS message"),
    ],
)
def test_each_fault_of_a_name_is_its_own_error(
    ask: Ask, doh: DoH, make_doh: MakeDoH, fault: str, error: type[Exception], message: str
) -> None:
    """A name's fault surfaces as the error that says what happened."""
    doh[0].fail("api.example.com", fault)  # type: ignore[arg-type]  # the parameter's str is a NameFault
    with pytest.raises(error, match=message):
        ask(make_doh(), "api.example.com")


def test_a_name_that_does_not_answer_times_out(ask: Ask, doh: DoH, make_doh: MakeDoH) -> None:
    """No answer within the resolver's timeout is ResolveTimeout."""
    doh[0].fail("api.example.com", "timeout")
    try:
        with pytest.raises(ResolveTimeout, match=r"0\.3 s"):
            ask(make_doh(timeout=0.3), "api.example.com")
    finally:
        doh[0].forget()  # let the held answers go


@pytest.mark.parametrize("bootstrap", [None, ["127.0.0.1", "127.0.0.2"]])
def test_every_query_carries_the_resolvers_timeout(bootstrap: list[str] | None) -> None:
    """Each request a resolver sends holds its own timeout: a client applies its default only
    to a request it builds (httpx from 0.28 to one it is given too), so on httpx 0.27 a
    query to a server that never answered waited for ever."""
    resolver = DoHResolver("https://dns.example/dns-query", bootstrap=bootstrap, timeout=1.5)
    requests = list(resolver.endpoint.requests("GET", httpx.URL("https://dns.example/dns-query"), {}, None))
    assert len(requests) == (1 if bootstrap is None else 2)
    for request in requests:
        assert request.extensions["timeout"] == httpx.Timeout(1.5).as_dict()


def test_a_server_that_is_down_is_unavailable(ask: Ask, fd: FakeDomainsFixture, doh: DoH, make_doh: MakeDoH) -> None:
    """Connection refused at the bootstrap address is ResolverUnavailable."""
    fd.fail(DOH_HOST, faults.refused())
    with pytest.raises(ResolverUnavailable, match="ConnectError"):
        ask(make_doh(), "api.example.com")


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"", "application/dns-message", "malformed"),
        (b"\x00" * 11, "application/dns-message", "malformed"),
        (b'{"Status": 0}', "application/json", "content type 'application/json'"),
    ],
)
def test_malformed_replies_are_bad_answers(
    ask: Ask, doh: DoH, make_doh: MakeDoH, body: bytes, content_type: str, message: str
) -> None:
    """A reply that is not a DNS message is BadAnswer, saying what was wrong."""
    doh[0].raw("api.example.com", body, content_type=content_type)
    with pytest.raises(BadAnswer, match=message):
        ask(make_doh(), "api.example.com")


def test_a_reply_to_another_question_is_a_bad_answer(ask: Ask, doh: DoH, make_doh: MakeDoH) -> None:
    """A well-formed DNS message that answers something else is refused."""
    import dns.message

    other = dns.message.make_response(dns.message.make_query("evil.example.com", "A"))
    doh[0].raw("api.example.com", other.to_wire(), content_type="application/dns-message")
    with pytest.raises(BadAnswer, match="does not answer the question"):
        ask(make_doh(), "api.example.com")


def test_a_ttl_with_the_top_bit_set_reads_as_zero(ask: Ask, doh: DoH, make_doh: MakeDoH) -> None:
    """A wire TTL above 2**31 - 1 is taken as 0 (RFC 2181, section 8), which a cache raises
    to its min_ttl."""
    doh[0].answer("api.example.com", ["127.0.0.5"], ttl=2**31 + 5)
    assert ask(make_doh(), "api.example.com").ttl == 0.0
    assert ask(CachingResolver(make_doh(), min_ttl=7), "api.example.com").ttl == 7.0


@pytest.mark.parametrize("address", ["10.0.0.1", "192.168.1.1", "169.254.0.1", "0.0.0.0", "fe80::1", "::ffff:10.0.0.1"])
def test_forbidden_addresses_are_refused(ask: Ask, doh: DoH, make_doh: MakeDoH, address: str) -> None:
    """With allow=public_or_loopback, a private address makes the whole answer refused."""
    doh[0].answer("api.example.com", ["127.0.0.5", address])
    with pytest.raises(ForbiddenAddress, match="refuses") as caught:
        ask(make_doh(allow=public_or_loopback), "api.example.com")
    assert ipaddress.ip_address(caught.value.address) == ipaddress.ip_address(address)


def test_bad_input_leaves_the_last_good_answer_in_use(ask: Ask, doh: DoH, make_doh: MakeDoH) -> None:
    """After a good answer expired, garbage, a forbidden address or an absurd TTL only make
    the cache serve the good answer as stale."""
    server, _ = doh
    clock = [0.0]
    cache = CachingResolver(make_doh(allow=public_or_loopback), min_ttl=0, clock=lambda: clock[0])
    server.answer("api.example.com", ["127.0.0.5"], ttl=10)
    assert ask(cache, "api.example.com").source == semconv.RESOLVE_SOURCE_DOH
    bad_inputs: list[Callable[[], None]] = [
        lambda: server.fail("api.example.com", "garbage"),
        lambda: server.answer("api.example.com", ["10.1.2.3"]),
        lambda: server.raw("api.example.com", b"", content_type="text/html"),
    ]
    for bad in bad_inputs:
        bad()
        clock[0] += 100  # past the TTL and past the stale hold
        answer = ask(cache, "api.example.com")
        assert (answer.addresses, answer.source) == (("127.0.0.5",), semconv.RESOLVE_SOURCE_STALE)
    assert len(server.queries("api.example.com")) == 8


def test_serve_stale_keeps_working_when_the_server_goes_down(
    ask: Ask, fd: FakeDomainsFixture, doh: DoH, make_doh: MakeDoH
) -> None:
    """With a warm cache, the DoH server down means stale answers, not failures."""
    doh[0].answer("api.example.com", ["127.0.0.5"], ttl=1)
    clock = [0.0]
    cache = CachingResolver(make_doh(), min_ttl=1, clock=lambda: clock[0])
    ask(cache, "api.example.com")
    fd.fail(DOH_HOST, faults.refused())
    clock[0] += 5
    answer = ask(cache, "api.example.com")
    assert (answer.addresses, answer.source) == (("127.0.0.5",), semconv.RESOLVE_SOURCE_STALE)


def test_a_cold_cache_falls_back_to_the_system_resolver(
    ask: Ask, fd: FakeDomainsFixture, doh: DoH, make_doh: MakeDoH
) -> None:
    """DoH down and nothing cached: the chain's next resolver (the system's) answers."""
    api = fd.add("api.example.com")
    fd.fail(DOH_HOST, faults.refused())
    chain = ChainResolver([CachingResolver(make_doh()), SystemResolver()])
    answer = ask(chain, "api.example.com")
    assert (answer.addresses, answer.source) == ((api.address,), semconv.RESOLVE_SOURCE_SYSTEM)


def test_a_warm_cache_in_the_chain_is_served_stale_before_the_system_resolver(
    ask: Ask, fd: FakeDomainsFixture, doh: DoH, make_doh: MakeDoH
) -> None:
    """Chain([Caching(DoH), System]): DoH down with a warm cache serves its stale answer,
    not the system's (which may be the poisoned one)."""
    fd.add("api.example.com")
    doh[0].answer("api.example.com", ["127.0.0.5"], ttl=1)
    clock = [0.0]
    chain = ChainResolver([CachingResolver(make_doh(), min_ttl=1, clock=lambda: clock[0]), SystemResolver()])
    ask(chain, "api.example.com")
    fd.fail(DOH_HOST, faults.refused())
    clock[0] += 5
    answer = ask(chain, "api.example.com")
    assert (answer.addresses, answer.source) == (("127.0.0.5",), semconv.RESOLVE_SOURCE_STALE)


# --------------------------------------------------------------------------- single-flight

NAMES = [f"n{i}.example.com" for i in range(4)]


def _slow_answers(server: DoHServer) -> None:
    for i, name in enumerate(NAMES):
        server.answer(name, [f"127.0.1.{i + 1}"], ttl=60, delay=0.3)


def _one_query_per_name(server: DoHServer) -> None:
    asked = Counter((q.name, q.rdtype) for q in server.queries())
    assert asked == Counter({(name, rdtype): 1 for name in NAMES for rdtype in ("A", "AAAA")})


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_200_tasks_on_a_cold_cache_make_one_query_per_name(doh: DoH, make_doh: MakeDoH, backend: str) -> None:
    """200 concurrent tasks over 4 names, under asyncio and under trio: each name is asked
    once (A and AAAA, concurrently)."""
    server, _ = doh
    _slow_answers(server)
    cache = CachingResolver(make_doh())

    async def run() -> list[Answer | None]:
        answers: list[Answer | None] = [None] * 200

        async def one(i: int) -> None:
            answers[i] = await cache.aresolve(NAMES[i % len(NAMES)])

        try:
            with anyio.fail_after(20.0):  # bounded
                async with anyio.create_task_group() as group:
                    for i in range(200):
                        group.start_soon(one, i)
        finally:
            await cache.aclose()  # in this event loop, whose sockets the client holds
        return answers

    answers = anyio.run(run, backend=backend)
    assert [a and a.addresses for a in answers] == [(f"127.0.1.{i % len(NAMES) + 1}",) for i in range(200)]
    _one_query_per_name(server)


def test_a_dozen_threads_on_a_cold_cache_make_one_query_per_name(doh: DoH, make_doh: MakeDoH) -> None:
    """12 threads, each resolving every name at once: each name is asked once."""
    server, _ = doh
    _slow_answers(server)
    cache = CachingResolver(make_doh())
    answers: list[Answer] = []
    lock = threading.Lock()
    start = threading.Barrier(12, timeout=10.0)

    def work(offset: int) -> None:
        start.wait()
        for i in range(len(NAMES)):
            answer = cache.resolve(NAMES[(i + offset) % len(NAMES)])
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20.0)
    assert len(answers) == 48
    _one_query_per_name(server)


def test_threads_and_tasks_together_make_one_query_per_name(
    doh: DoH, make_doh: MakeDoH, loop: asyncio.AbstractEventLoop
) -> None:
    """Threads and asyncio tasks missing the same names share the same queries."""
    server, _ = doh
    _slow_answers(server)
    cache = CachingResolver(make_doh())
    threads = [threading.Thread(target=cache.resolve, args=(NAMES[n % len(NAMES)],)) for n in range(12)]
    for thread in threads:
        thread.start()

    async def run() -> list[Answer]:
        return await asyncio.gather(*(cache.aresolve(NAMES[i % len(NAMES)]) for i in range(200)))

    loop.run_until_complete(asyncio.wait_for(run(), 20.0))
    for thread in threads:
        thread.join(20.0)
    _one_query_per_name(server)


def test_the_dnspython_extra_is_needed_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without dnspython, making a DoHResolver says which extra to install."""
    import sys

    monkeypatch.setitem(sys.modules, "dns.message", None)
    with pytest.raises(ImportError, match=r"pytest-failover\[resolve\]"):
        DoHResolver("https://doh.test/dns-query")


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=80), prefix=st.sampled_from([b"", b"\x00\x00\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00"]))
def test_any_bytes_give_an_answer_or_a_resolve_error(body: bytes, prefix: bytes) -> None:
    """Whatever bytes a DoH server sends, reading them raises nothing but a ResolveError."""
    dns = import_dns()
    query = dns.message.make_query("api.example.com", "A")
    query.id = 0
    try:
        addresses, ttl = parse_reply(dns, "api.example.com", query, (200, "application/dns-message", prefix + body))
    except ResolveError:
        return
    assert isinstance(addresses, list) and isinstance(ttl, int)
