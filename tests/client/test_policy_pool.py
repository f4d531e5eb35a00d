"""Pools, domains and policies validate when built and rewrite URLs correctly."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_failover import (
    ExponentialBackoff,
    FailoverTransport,
    Policy,
    Pool,
    RetryBudget,
    ScheduleTable,
    Step,
)
from pytest_failover._pool import _REWRITES_KEPT, Domain


def test_domain_normalises_case_trailing_dot_and_default_port() -> None:
    assert Domain.parse("HTTPS://API.Example.com.:443/") == Domain("https", "api.example.com", None)
    assert Domain.parse("http://[::1]:8080").url == "http://[::1]:8080"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://api.example.com", "scheme"),
        ("https://api.example.com/v1", "only scheme, host and port"),
        ("https://api.example.com/?a=1", "only scheme, host and port"),
        ("https://user:pw@api.example.com", "credentials"),
        ("", "expected a base URL"),
        ("https://", "host"),
        ("https://api.example.com:99999", r"port 99999 out of range \(0 to 65535\)"),
        ("https://api.example.com:abc", "invalid port 'abc'"),
        ("https://a b.example", "invalid host"),
    ],
)
def test_domain_rejects_what_is_not_a_base_url(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Domain.parse(url)


def test_domains_parse_without_an_http_library_as_its_urls_name_them() -> None:
    """The standard library parses a domain; an IDNA host is kept in the form httpx and
    httpx2 route on (``URL.host``: decoded)."""
    import httpx2

    for url in ("https://xn--bcher-kva.example", "https://bücher.example"):
        assert Domain.parse(url).host == httpx.URL(url).host == httpx2.URL(url).host == "bücher.example"


def test_a_rewrite_keeps_the_library_of_the_url_it_moves() -> None:
    """A sharing group may mix httpx and httpx2: the same URL moved for each stays a URL of
    its own library (the memo is per URL class)."""
    import httpx2

    target = Domain.parse("https://api2.example.com")
    for _ in range(2):  # the second time from the memo
        moved, moved2 = target.rewrite(httpx.URL("https://api.example.com/a?b=1")), target.rewrite(
            httpx2.URL("https://api.example.com/a?b=1")
        )
        assert type(moved) is httpx.URL and type(moved2) is httpx2.URL
        assert str(moved) == str(moved2) == "https://api2.example.com/a?b=1"


def test_pool_rejects_duplicates_and_unknown_region_domains() -> None:
    with pytest.raises(ValueError, match="twice"):
        Pool("api", ["https://a.example", "https://A.example/"])
    with pytest.raises(ValueError, match="not a domain of the pool"):
        Pool("api", ["https://a.example"], region_order={"cn": ["https://b.example"]})
    with pytest.raises(ValueError, match="non-empty"):
        Pool("api", [])


def test_region_order_puts_its_domains_first_and_keeps_the_rest() -> None:
    pool = Pool(
        "api",
        ["https://api.example.com", "https://api2.example.com", "https://api-cn.example.com"],
        region_order={"cn": ["https://api-cn.example.com"]},
    )
    assert [d.host for d in pool.order("cn")] == ["api-cn.example.com", "api.example.com", "api2.example.com"]
    assert pool.order("eu") == pool.domains == pool.order(None)


def test_routing_matches_scheme_host_and_port() -> None:
    """A URL belongs to a pool's domain by scheme, host (any case, trailing dot) and port."""
    from pytest_failover._core import FailoverCore
    from pytest_failover._values import RequestOptions

    pool = Pool("api", ["https://api.example.com", "http://api2.example.com:8080"])
    core = FailoverCore([pool])

    def origin(url: str) -> object:
        route = core.route(httpx.URL(url), RequestOptions())
        return None if route is None else route[2]

    assert origin("https://API.example.com./v1") == pool.domains[0]
    assert origin("http://api.example.com/v1") is None
    assert origin("http://api2.example.com:8080/x") == pool.domains[1]
    assert origin("http://api2.example.com/x") is None


@given(
    segments=st.lists(st.text(alphabet="abc/", max_size=5), max_size=4),
    query=st.text(alphabet="ab=&", max_size=6),
)
def test_rewrite_keeps_path_and_query_and_never_produces_double_slash(
    segments: list[str], query: str
) -> None:
    path = "/" + "/".join(segments)
    url = httpx.URL("https://api.example.com" + path + ("?" + query if query else ""))
    target = Domain.parse("https://api2.example.com:8443")
    out = target.rewrite(url)
    assert out.host == "api2.example.com" and out.port == 8443
    assert not out.raw_path.startswith(b"//")
    assert out.query == url.query
    assert out.path.lstrip("/") == url.path.lstrip("/")


def test_a_remembered_rewrite_is_the_rewrite_of_that_very_url_and_the_memory_is_bounded() -> None:
    target = Domain.parse("https://api2.example.com")
    urls = [
        "https://api.example.com/v1/rooms",
        "https://api.example.com/v1/rooms?page=2",
        "https://api.example.com/v1/rooms#top",
        "https://user:secret@api.example.com/v1/rooms",
        "https://api.example.com:8443/v1/rooms",
    ]
    first = [target.rewrite(httpx.URL(u)) for u in urls]
    again = [target.rewrite(httpx.URL(u)) for u in urls]  # new URL objects, the same strings
    assert [str(u) for u in first] == [
        "https://api2.example.com/v1/rooms",
        "https://api2.example.com/v1/rooms?page=2",
        "https://api2.example.com/v1/rooms#top",
        "https://user:secret@api2.example.com/v1/rooms",
        "https://api2.example.com/v1/rooms",
    ]
    assert all(a is b for a, b in zip(first, again, strict=True))  # remembered, not parsed again
    for n in range(3 * _REWRITES_KEPT):
        assert target.rewrite(httpx.URL(f"https://api.example.com/v1/item/{n}")).path == f"/v1/item/{n}"
    assert len(target._rewrites) <= _REWRITES_KEPT


def test_agora_policy_is_the_seed_schedule() -> None:
    policy = Policy.agora()
    assert isinstance(policy.schedule, ScheduleTable)
    assert [(s.at, s.domain) for s in policy.schedule.steps] == [(0, 0), (1, 0), (3, 1), (6, 2), (10, 3)]
    assert policy.attempt_timeout == 10 and policy.deadline == 20 and policy.max_attempts == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deadline": 0}, "deadline"),
        ({"attempt_timeout": -1}, "attempt_timeout"),
        ({"retry_statuses": {404}}, "4xx is an answer"),
        ({"retry_statuses": {999}}, "not HTTP status codes"),
        ({"breaker_threshold": 0}, "breaker_threshold"),
        ({"breaker_cooldown": float("nan")}, "breaker_cooldown"),
    ],
)
def test_policy_rejects_bad_values_naming_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(**kwargs)  # type: ignore[arg-type]  # bad values are the point of the test


def test_schedule_validation() -> None:
    with pytest.raises(ValueError, match="never delayed"):
        ScheduleTable([Step(1, 0)])
    with pytest.raises(ValueError, match="must not decrease"):
        ScheduleTable([Step(0, 0), Step(3, 1), Step(2, 0)])
    with pytest.raises(ValueError, match="cap must be >= base"):
        ExponentialBackoff(base=2, cap=1)
    with pytest.raises(ValueError, match="max_tokens"):
        RetryBudget(max_tokens=5000)


@given(retry=st.integers(min_value=1, max_value=40), r=st.floats(min_value=0, max_value=1))
def test_full_jitter_stays_within_the_capped_exponential(retry: int, r: float) -> None:
    backoff = ExponentialBackoff(base=0.2, cap=10)
    delay = backoff.delay(retry, lambda: r)
    assert 0 <= delay <= min(10, 0.2 * 2 ** (retry - 1))
    assert backoff.delay(0, lambda: r) == 0


def test_an_unsteered_request_walks_the_pools_precomputed_order_with_no_work() -> None:
    """The default path stays free: without weights, affinity or time windows, and with no
    order named, a plan holds the pool's own precomputed orders, not a copy."""
    from pytest_failover._core import FailoverCore
    from pytest_failover._values import RequestOptions

    pool = Pool("api", ["https://a.example", "https://b.example"], region_order={"x": ["https://b.example"]})
    core = FailoverCore([pool])
    pool_core = core.pools["api"]
    assert not pool_core.steers
    for options in (RequestOptions(), RequestOptions(affinity="user-42"), RequestOptions(idempotent=True)):
        plan = core.begin(pool_core, "GET", httpx.Headers(), options, True, None, 0.0)
        assert plan._orders is pool_core.orders and plan.steering is None
    named = core.begin(pool_core, "GET", httpx.Headers(), RequestOptions(order="x"), True, None, 0.0)
    assert named._orders is not pool_core.orders and named.steering == "order"


@pytest.mark.parametrize("url", ["https://xn--bcher-kva.example/x", "https://bücher.example/x", "https://b.example./x"])
def test_a_url_routes_to_its_pool_in_every_spelling_of_its_host(url: str) -> None:
    """The route of a URL is looked up by its parsed parts (the IDNA host in its ASCII
    form there), and a host the look-up misses takes the general path: an IDNA domain
    in either spelling, and a fully qualified name, still reach their pool."""
    import httpx2

    from pytest_failover import httpx2 as failover2

    pool = Pool("api", ["https://bücher.example", "https://b.example"])
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return httpx.Response(200)

    def answer2(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.host)
        return httpx2.Response(200)

    with httpx.Client(transport=FailoverTransport([pool], transport=httpx.MockTransport(answer))) as client:
        assert client.get(url).extensions["failover"].pool == "api"
    with httpx2.Client(transport=failover2.FailoverTransport([pool], transport=httpx2.MockTransport(answer2))) as client2:
        assert client2.get(url).extensions["failover"].pool == "api"
    assert seen == ["bücher.example"] * 2  # the first domain of the pool serves


def test_each_attempt_caps_the_clients_timeouts_at_its_own_time() -> None:
    """httpx's four timeouts reach the inner transport each capped at the attempt's time (an
    unset one is that time; one within it is kept), in a dict of the request's own, however
    often the same timeouts were capped before."""
    seen: list[dict[str, float | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200)

    transport = FailoverTransport(
        [Pool("api", ["https://a.example", "https://b.example"])],
        Policy(attempt_timeout=10.0, deadline=30.0),
        transport=httpx.MockTransport(answer),
        clock=lambda: 100.0,
    )
    cases = [
        (httpx.Timeout(600.0, connect=5.0), {"connect": 5.0, "read": 10.0, "write": 10.0, "pool": 10.0}),
        (httpx.Timeout(None), dict.fromkeys(("connect", "read", "write", "pool"), 10.0)),
        (httpx.Timeout(1.0), dict.fromkeys(("connect", "read", "write", "pool"), 1.0)),
        (httpx.Timeout(600.0, connect=5.0), {"connect": 5.0, "read": 10.0, "write": 10.0, "pool": 10.0}),
    ]
    with httpx.Client(transport=transport) as client:
        for timeout, _ in cases:
            client.get("https://a.example/x", timeout=timeout)
        assert seen == [capped for _, capped in cases]
        seen[0]["read"] = 0.5  # whoever holds a request's timeouts may change them: nobody else's change
        assert seen[3]["read"] == 10.0 and seen[3] is not seen[0]
        # Timeouts found within the attempt's time are remembered (``_exchange._WITHIN``) as a
        # copy: a change to a request's own, or other timeouts, are tested again.
        seen[2]["read"] = 50.0
        again = [
            (httpx.Timeout(1.0), dict.fromkeys(("connect", "read", "write", "pool"), 1.0)),
            (httpx.Timeout(1.0, read=50.0), {"connect": 1.0, "read": 10.0, "write": 1.0, "pool": 1.0}),
            (httpx.Timeout(1.0), dict.fromkeys(("connect", "read", "write", "pool"), 1.0)),
        ]
        for timeout, _ in again:
            client.get("https://a.example/x", timeout=timeout)
    assert seen[4:] == [capped for _, capped in again]
