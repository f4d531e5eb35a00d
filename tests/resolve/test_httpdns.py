"""HTTPDNSResolver against the fake HTTPDNS endpoint, and its parsers on every shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

from pytest_failover import faults, semconv
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.resolve import (
    BadAnswer,
    CachingResolver,
    ForbiddenAddress,
    HTTPDNSResolver,
    NoAddresses,
    ResolverUnavailable,
    ResolveTimeout,
    parse_dns_json,
    parse_json,
    parse_text,
    public_or_loopback,
)
from pytest_failover.simulator import FakeDomain, HTTPDNSServer

from .conftest import HTTPDNS_HOST, Ask

HTTPDNS = tuple[HTTPDNSServer, FakeDomain]
MakeHTTPDNS = Callable[..., HTTPDNSResolver]


def test_an_answer_has_the_addresses_and_ttl(ask: Ask, httpdns: HTTPDNS, make_httpdns: MakeHTTPDNS) -> None:
    """The endpoint's JSON becomes an answer; the request names the endpoint's host."""
    server, domain = httpdns
    server.answer("api.example.com", ["127.0.0.5", "::1"], ttl=30)
    answer = ask(make_httpdns(), "api.example.com")
    assert (answer.addresses, answer.ttl, answer.source) == (("127.0.0.5", "::1"), 30.0, semconv.RESOLVE_SOURCE_HTTPDNS)
    assert [q.name for q in server.queries()] == ["api.example.com"]
    assert {r.headers["host"] for r in domain.requests()} == {HTTPDNS_HOST}


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        ("nxdomain", NoAddresses, "no address"),
        ("refused", ResolverUnavailable, "HTTP 403"),
        ("servfail", ResolverUnavailable, "HTTP 503"),
        ("garbage", BadAnswer, "is not JSON"),
    ],
)
def test_each_fault_of_a_name_is_its_own_error(
    ask: Ask, httpdns: HTTPDNS, make_httpdns: MakeHTTPDNS, fault: str, error: type[Exception], message: str
) -> None:
    """A name's fault surfaces as the error that says what happened."""
    httpdns[0].fail("api.example.com", fault)  # type: ignore[arg-type]  # the parameter's str is a NameFault
    with pytest.raises(error, match=message):
        ask(make_httpdns(), "api.example.com")


def test_a_name_that_does_not_answer_times_out(ask: Ask, httpdns: HTTPDNS, make_httpdns: MakeHTTPDNS) -> None:
    """No answer within the resolver's timeout is ResolveTimeout."""
    httpdns[0].fail("api.example.com", "timeout")
    try:
        with pytest.raises(ResolveTimeout):
            ask(make_httpdns(timeout=0.3), "api.example.com")
    finally:
        httpdns[0].forget()


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ('["127.0.0.5"]', BadAnswer, "not an object with 'ips'"),
        ('{"host": "api.example.com", "ttl": 60}', BadAnswer, "not an object with 'ips'"),
        ('{"ips": ["127.0.0.5"]}', BadAnswer, "has no 'ttl'"),
        ('{"ips": "127.0.0.5", "ttl": 60}', BadAnswer, "'ips' that is not a list"),
        ('{"host": "evil.example.com", "ips": ["127.0.0.5"], "ttl": 60}', BadAnswer, "another name"),
        ('{"ips": ["not-an-ip"], "ttl": 60}', BadAnswer, "'not-an-ip', which is not an IP address"),
        ('{"ips": [2130706437], "ttl": 60}', BadAnswer, "2130706437, which is not an IP address"),
        ('{"ips": ["127.0.0.5"], "ttl": -5}', BadAnswer, "TTL -5"),
        ('{"ips": ["127.0.0.5"], "ttl": 1e300}', BadAnswer, "TTL 1e\\+300"),
        ('{"ips": ["127.0.0.5"], "ttl": 4294967295}', BadAnswer, "TTL 4294967295"),
        ('{"ips": ["127.0.0.5"], "ttl": "60"}', BadAnswer, "TTL '60'"),
        ('{"ips": ["127.0.0.5"], "ttl": true}', BadAnswer, "TTL True"),
        ('{"ips": ["10.0.0.1"], "ttl": 60}', ForbiddenAddress, "10.0.0.1"),
        ('{"dns": [{"host": "other.example.com", "ips": ["127.0.0.5"], "ttl": 60}]}', BadAnswer, "no entry"),
        ('{"ips": [], "ttl": 60}', NoAddresses, "no address"),
    ],
)
def test_every_wrong_shape_is_a_specific_error(
    ask: Ask, httpdns: HTTPDNS, make_httpdns: MakeHTTPDNS, body: str, error: type[Exception], message: str
) -> None:
    """JSON of the wrong shape, absurd TTLs, non-IP strings and forbidden addresses are each
    refused with an error naming what was wrong."""
    httpdns[0].raw("api.example.com", body)
    with pytest.raises(error, match=message):
        ask(make_httpdns(allow=public_or_loopback), "api.example.com")


def test_bad_input_leaves_the_last_good_answer_in_use(
    ask: Ask, fd: FakeDomainsFixture, httpdns: HTTPDNS, make_httpdns: MakeHTTPDNS
) -> None:
    """After a good answer expired, a wrong shape or the endpoint down only make the cache
    serve the good answer as stale."""
    server, _ = httpdns
    clock = [0.0]
    cache = CachingResolver(make_httpdns(), min_ttl=0, clock=lambda: clock[0])
    server.answer("api.example.com", ["127.0.0.5"], ttl=10)
    ask(cache, "api.example.com")
    server.raw("api.example.com", '{"ips": ["127.0.0.6"], "ttl": "soon"}')
    clock[0] += 100
    assert ask(cache, "api.example.com").source == semconv.RESOLVE_SOURCE_STALE
    fd.fail(HTTPDNS_HOST, faults.status(503))
    clock[0] += 100
    answer = ask(cache, "api.example.com")
    assert (answer.addresses, answer.source) == (("127.0.0.5",), semconv.RESOLVE_SOURCE_STALE)


def test_a_parser_of_ones_own_is_called_and_its_failure_is_a_bad_answer(
    ask: Ask, httpdns: HTTPDNS, make_httpdns: MakeHTTPDNS
) -> None:
    """``parse=`` reads other shapes; an exception it raises becomes BadAnswer naming it."""

    def parse_mine(host: str, body: bytes) -> tuple[Sequence[object], object]:
        document = json.loads(body)
        return document["data"]["addrs"], document["data"]["ttl"]

    httpdns[0].raw("api.example.com", '{"data": {"addrs": ["127.0.0.9"], "ttl": 5}}')
    assert ask(make_httpdns(parse=parse_mine), "api.example.com").addresses == ("127.0.0.9",)
    httpdns[0].raw("api.example.com", '{"data": {}}')
    with pytest.raises(BadAnswer, match="parse_mine: KeyError"):
        ask(make_httpdns(parse=parse_mine), "api.example.com")


# --------------------------------------------------------------------------- the parsers alone


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"host": "a.test", "ips": ["127.0.0.5"], "ipsv6": ["::1"], "ttl": 57, "origin_ttl": 60}', (["127.0.0.5", "::1"], 57)),
        (b'{"dns": [{"host": "b.test", "ips": [], "ttl": 1}, {"host": "A.test.", "ips": ["127.0.0.5"], "ttl": 9}]}', (["127.0.0.5"], 9)),
        (b'{"ipv6": ["::1"], "ttl": 3}', (["::1"], 3)),
    ],
)
def test_parse_json_reads_the_common_shapes(body: bytes, expected: tuple[list[str], int]) -> None:
    """The single and batch forms of the common JSON shape."""
    assert parse_json("a.test", body) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [(b"127.0.0.5;127.0.0.6,120", (["127.0.0.5", "127.0.0.6"], 120)), (b"0", ([], 0)), (b"", ([], 0))],
)
def test_parse_text_reads_the_dnspod_form(body: bytes, expected: tuple[list[str], int]) -> None:
    """``ip;ip,ttl``, and ``0`` for no address."""
    assert parse_text("a.test", body) == expected


@pytest.mark.parametrize("body", [b"127.0.0.5", b"127.0.0.5,soon", b"\xff\xfe"])
def test_parse_text_refuses_other_text(body: bytes) -> None:
    """Text that is not ``ip;ip,ttl`` is a bad answer naming the name asked."""
    with pytest.raises(BadAnswer, match=r"a\.test"):
        parse_text("a.test", body)


def test_parse_dns_json_reads_the_dns_json_api() -> None:
    """A and AAAA records of the Answer, the smallest TTL; NXDOMAIN is no address."""
    body = {
        "Status": 0,
        "Answer": [
            {"name": "a.test.", "type": 5, "TTL": 1, "data": "b.test."},
            {"name": "b.test.", "type": 1, "TTL": 60, "data": "127.0.0.5"},
            {"name": "b.test.", "type": 28, "TTL": 30, "data": "::1"},
        ],
    }
    assert parse_dns_json("a.test", json.dumps(body).encode()) == (["127.0.0.5", "::1"], 30)
    assert parse_dns_json("a.test", b'{"Status": 3}') == ([], 0)
    with pytest.raises(BadAnswer, match="DNS status 2"):
        parse_dns_json("a.test", b'{"Status": 2}')
    assert parse_dns_json("a.test", b'{"Status": 0, "Answer": [{"type": 1, "TTL": "x", "data": "127.0.0.5"}]}')[1] == "x"


def test_the_url_template_needs_one_host_placeholder() -> None:
    """A template without ``{host}`` is refused when the resolver is made."""
    with pytest.raises(ValueError, match=r"\{host\}"):
        HTTPDNSResolver("https://httpdns.test/d?host=")
