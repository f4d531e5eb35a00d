"""The stale fallback cache driven directly: RFC 9111 / RFC 5861 rules, credential partitions, bounds."""

from __future__ import annotations

import gzip
import random
import threading
from collections.abc import Mapping, Sequence

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_failover._stale import STALE_HEADER, StaleCache

POOL = "api"
BIG = 1 << 20
Fields = Mapping[str, str] | Sequence[tuple[str, str]]


def req(
    path: str = "/rooms?x=1",
    headers: Fields | None = None,
    *,
    method: str = "GET",
    host: str = "https://api.example.com",
) -> httpx.Request:
    return httpx.Request(method, host + path, headers=headers)


def resp(
    cache_control: str | None = "max-age=60",
    headers: Fields | None = None,
    *,
    status: int = 200,
    body: bytes = b"rooms",
) -> httpx.Response:
    fields = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
    if cache_control is not None:
        fields.append(("Cache-Control", cache_control))
    return httpx.Response(status, headers=fields, content=body)


def stored(
    cache: StaleCache,
    cache_control: str | None = "max-age=60",
    request_headers: Fields | None = None,
    response_headers: Fields | None = None,
    *,
    path: str = "/rooms?x=1",
    now: float = 0.0,
    status: int = 200,
    body: bytes = b"rooms",
) -> bool:
    response = resp(cache_control, response_headers, status=status, body=body)
    return cache.store(POOL, req(path, request_headers), response, now, max_bytes=BIG)


def served(
    cache: StaleCache,
    headers: Fields | None = None,
    *,
    now: float = 1.0,
    max_age: float = 300.0,
    path: str = "/rooms?x=1",
) -> httpx.Response | None:
    found: httpx.Response | None = cache.lookup(POOL, req(path, headers), now, max_age=max_age, response=httpx.Response)
    return found


# -- the issue ----------------------------------------------------------------


def test_the_issue_private_no_store_answer_for_token_a_is_never_served_to_token_b() -> None:
    """The reported leak: a ``private, no-store`` answer fetched with token-a is neither stored nor served to token-b."""
    cache = StaleCache()
    assert not stored(cache, "private, no-store", {"Authorization": "Bearer token-a"})
    assert served(cache, {"Authorization": "Bearer token-b"}) is None
    assert served(cache, {"Authorization": "Bearer token-a"}) is None


def test_a_public_answer_for_token_a_is_served_to_token_a_only() -> None:
    """Even a ``public`` answer stays in the partition of the credentials that fetched it."""
    cache = StaleCache()
    assert stored(cache, "public, max-age=60", {"Authorization": "Bearer token-a"})
    assert served(cache, {"Authorization": "Bearer token-b"}) is None
    assert served(cache) is None
    answer = served(cache, {"Authorization": "Bearer token-a"})
    assert answer is not None and answer.content == b"rooms"


@pytest.mark.parametrize("field", ["Cookie", "Proxy-Authorization"])
def test_cookie_and_proxy_authorization_partition_entries(field: str) -> None:
    """An answer fetched with one cookie or proxy credential is never served to another, nor to none."""
    cache = StaleCache()
    assert stored(cache, "max-age=60", {field: "session=alice"})
    assert served(cache, {field: "session=bob"}) is None
    assert served(cache) is None
    assert served(cache, {field: "session=alice"}) is not None


def test_an_anonymous_answer_is_not_served_to_a_request_with_credentials() -> None:
    """A response fetched without credentials is not served to a request carrying ``Authorization``."""
    cache = StaleCache()
    assert stored(cache, "public, max-age=60")
    assert served(cache, {"Authorization": "Bearer token-a"}) is None
    assert served(cache) is not None


# -- storing: RFC 9111 §3 -------------------------------------------------------


@pytest.mark.parametrize("cache_control", ["no-store", "max-age=60, no-store", "public, NO-STORE"])
def test_a_no_store_response_is_not_stored(cache_control: str) -> None:
    """``no-store`` on the response, in any case and position, keeps it out of storage."""
    cache = StaleCache()
    assert not stored(cache, cache_control)
    assert served(cache) is None


def test_a_no_store_request_is_not_stored_nor_answered() -> None:
    """A request with ``Cache-Control: no-store`` leaves nothing behind and is never answered from storage."""
    cache = StaleCache()
    assert not stored(cache, "max-age=60", {"Cache-Control": "no-store"})
    assert served(cache) is None
    assert stored(cache, "max-age=60")
    assert served(cache, {"Cache-Control": "no-store"}) is None


@pytest.mark.parametrize(
    "cache_control", ["private", "private, max-age=60", 'private="Set-Cookie", max-age=60']
)
def test_a_private_response_is_never_stored(cache_control: str) -> None:
    """A shared cache never stores ``private`` answers, qualified or not."""
    cache = StaleCache()
    assert not stored(cache, cache_control)
    assert served(cache) is None


def test_authorization_without_an_explicit_directive_is_not_stored() -> None:
    """A request with ``Authorization`` is stored only when the response allows shared caching (§3.5)."""
    cache = StaleCache()
    assert not stored(cache, "max-age=60", {"Authorization": "Bearer token-a"})
    assert served(cache, {"Authorization": "Bearer token-a"}) is None


@pytest.mark.parametrize("cache_control", ["public", "s-maxage=60", "max-age=60, must-revalidate"])
def test_authorization_with_public_s_maxage_or_must_revalidate_is_stored(
    cache_control: str,
) -> None:
    """``public``, ``s-maxage`` and ``must-revalidate`` each allow storing an authenticated answer."""
    cache = StaleCache()
    assert stored(cache, cache_control, {"Authorization": "Bearer token-a"})
    assert served(cache, {"Authorization": "Bearer token-a"}, now=0.5) is not None


@pytest.mark.parametrize("status", [206, 304])
def test_partial_and_not_modified_answers_are_not_stored(status: int) -> None:
    """206 and 304 are not complete answers, so they are never stored."""
    assert not stored(StaleCache(), "max-age=60", status=status)


def test_a_status_without_freshness_is_stored_only_if_heuristically_cacheable() -> None:
    """Without explicit freshness, 404 is stored and 403 is not; ``max-age`` makes 403 storable."""
    cache = StaleCache()
    assert stored(cache, None, status=404, path="/a")
    assert not stored(cache, None, status=403, path="/b")
    assert stored(cache, "max-age=60", status=403, path="/c")
    answer = served(cache, path="/a")
    assert answer is not None and answer.status_code == 404


def test_only_get_is_stored_and_a_range_request_is_neither_stored_nor_answered() -> None:
    """HEAD, POST and ranged GETs are not stored; a ranged GET is not answered from a full one."""
    cache = StaleCache()
    for method in ("HEAD", "POST"):
        assert not cache.store(POOL, req(method=method), resp(), 0.0, max_bytes=BIG)
    assert not cache.store(POOL, req(headers={"Range": "bytes=0-1"}), resp(), 0.0, max_bytes=BIG)
    assert stored(cache)
    assert served(cache, {"Range": "bytes=0-1"}) is None
    assert cache.lookup(POOL, req(method="HEAD"), 1.0, max_age=300, response=httpx.Response) is None


def test_a_successful_unsafe_request_invalidates_the_path_in_every_partition() -> None:
    """A non-error POST to a path forgets what every credential had stored for it (§4.4); an error does not."""
    cache = StaleCache()
    assert stored(cache, "public, max-age=60", {"Authorization": "Bearer token-a"})
    assert stored(cache, "max-age=60")
    assert stored(cache, "max-age=60", path="/other")
    assert not cache.store(POOL, req(method="POST"), resp(status=500), 0.0, max_bytes=BIG)
    assert served(cache) is not None
    assert not cache.store(POOL, req(method="POST"), resp(status=201), 0.0, max_bytes=BIG)
    assert served(cache) is None
    assert served(cache, {"Authorization": "Bearer token-a"}) is None
    assert served(cache, path="/other") is not None


def test_a_body_larger_than_max_bytes_is_not_stored() -> None:
    """``max_bytes`` bounds every stored body, inclusive."""
    cache = StaleCache()
    assert cache.store(POOL, req("/a"), resp(body=b"x" * 10), 0.0, max_bytes=10)
    assert not cache.store(POOL, req("/b"), resp(body=b"x" * 11), 0.0, max_bytes=10)
    assert served(cache, path="/a") is not None and served(cache, path="/b") is None


def test_a_response_whose_body_was_not_read_is_not_stored() -> None:
    """Only complete bodies are stored: an unread stream is refused, not read."""
    response = httpx.Response(
        200, headers={"Cache-Control": "max-age=60"}, stream=httpx.ByteStream(b"x")
    )
    assert not StaleCache().store(POOL, req(), response, 0.0, max_bytes=BIG)


def test_an_invalid_age_field_keeps_the_response_out() -> None:
    """A response whose ``Age`` is not delta-seconds cannot be aged, so it is not stored."""
    assert not stored(StaleCache(), "max-age=60", response_headers={"Age": "soon"})


def test_a_newer_answer_that_is_not_stored_forgets_the_older_one() -> None:
    """Once the caller saw a newer unstorable answer, the older one is never served."""
    cache = StaleCache()
    assert stored(cache, "max-age=60", body=b"v1")
    assert not stored(cache, "no-store", body=b"v2", now=1.0)
    assert served(cache, now=2.0) is None
    assert stored(cache, "max-age=60", body=b"v3", now=3.0)
    assert not cache.store(POOL, req(), resp(body=b"x" * 11), 4.0, max_bytes=10)
    assert served(cache, now=5.0) is None


def test_a_newer_stored_answer_replaces_the_older_one() -> None:
    """Storing again for the same request keeps only the newest answer."""
    cache = StaleCache()
    assert stored(cache, body=b"v1") and stored(cache, body=b"v2", now=1.0)
    answer = served(cache, now=2.0)
    assert answer is not None and answer.content == b"v2" and len(cache) == 1


# -- Vary: RFC 9111 §4.1 ---------------------------------------------------------


def test_vary_serves_only_a_request_with_the_same_selecting_values() -> None:
    """``Vary: Accept-Language`` selects by that request field; other fields do not matter."""
    cache = StaleCache()
    vary = {"Vary": "Accept-Language"}
    assert stored(cache, "max-age=60", {"Accept-Language": "fr", "Accept": "a"}, vary, body=b"fr")
    assert stored(cache, "max-age=60", {"Accept-Language": "de"}, vary, body=b"de")
    assert served(cache, {"Accept-Language": "en"}) is None
    assert served(cache) is None
    french = served(cache, {"Accept-Language": "fr", "Accept": "b"})
    assert french is not None and french.content == b"fr"
    german = served(cache, {"accept-language": "de"})
    assert german is not None and german.content == b"de"


def test_vary_tells_an_absent_field_from_an_empty_one() -> None:
    """A selecting field that was absent does not match the same field sent empty."""
    cache = StaleCache()
    assert stored(cache, "max-age=60", None, {"Vary": "X-Tenant"})
    assert served(cache, {"X-Tenant": ""}) is None
    assert served(cache) is not None


def test_vary_over_several_lines_and_names_is_combined() -> None:
    """Every ``Vary`` line and name counts, in any case and order."""
    cache = StaleCache()
    fields = [("Vary", "accept, X-Tenant"), ("vary", "Accept-Language")]
    assert stored(
        cache, "max-age=60", {"Accept": "j", "X-Tenant": "t", "Accept-Language": "fr"}, fields
    )
    assert served(cache, {"Accept": "j", "X-Tenant": "t"}) is None
    assert served(cache, {"Accept": "j", "X-Tenant": "t", "Accept-Language": "fr"}) is not None


@pytest.mark.parametrize("vary", ["*", "Accept, *"])
def test_vary_star_is_never_stored_and_forgets_an_older_answer(vary: str) -> None:
    """A response with ``Vary: *`` is never served, so it is not stored and supersedes what was."""
    cache = StaleCache()
    assert stored(cache, "max-age=60")
    assert not stored(cache, "max-age=60", None, {"Vary": vary}, now=1.0)
    assert served(cache, now=2.0) is None


def test_the_most_recent_matching_variant_wins() -> None:
    """When answers with different Vary names both match, the most recently stored is served."""
    cache = StaleCache()
    assert stored(cache, "max-age=60", {"Accept": "j"}, {"Vary": "Accept"}, body=b"old")
    assert stored(cache, "max-age=60", {"Accept": "j"}, {"Vary": "X-Tenant"}, body=b"new", now=1.0)
    answer = served(cache, {"Accept": "j"}, now=2.0)
    assert answer is not None and answer.content == b"new"


# -- keys ----------------------------------------------------------------------------


def test_the_key_is_pool_path_and_query_but_not_the_host() -> None:
    """A pool's domains are interchangeable; the pool, the path and the query are not."""
    cache = StaleCache()
    assert stored(cache)
    assert cache.lookup(POOL, req(host="https://api2.example.com"), 1.0, max_age=300, response=httpx.Response) is not None
    assert cache.lookup("other", req(), 1.0, max_age=300, response=httpx.Response) is None
    assert served(cache, path="/rooms?x=2") is None
    assert served(cache, path="/rooms") is None


# -- freshness and the stale windows ------------------------------------------------


def test_max_age_then_the_clients_max_age_when_the_response_says_nothing_more() -> None:
    """``max-age=60`` with the client's 30 s is served until age 90, not at 90."""
    cache = StaleCache()
    assert stored(cache, "max-age=60")
    assert served(cache, now=89.9, max_age=30) is not None
    assert served(cache, now=90.0, max_age=30) is None


def test_no_freshness_at_all_is_served_within_the_clients_max_age() -> None:
    """A response that says nothing about caching is served for ``max_age`` seconds."""
    cache = StaleCache()
    assert stored(cache, None)
    assert served(cache, now=299.0, max_age=300) is not None
    assert served(cache, now=300.0, max_age=300) is None


def test_stale_if_error_replaces_the_clients_max_age() -> None:
    """``max-age=10, stale-if-error=100`` is served until age 110 whatever the client's max_age."""
    cache = StaleCache()
    assert stored(cache, "max-age=10, stale-if-error=100")
    assert served(cache, now=109.0, max_age=5) is not None
    assert served(cache, now=110.0, max_age=5) is None
    assert served(cache, now=110.0, max_age=10_000) is None


def test_age_from_upstream_counts_against_the_windows() -> None:
    """An ``Age`` received with the response is added to the time spent here, and the served ``Age`` says so."""
    cache = StaleCache()
    assert stored(cache, "max-age=60", response_headers={"Age": "50"}, now=100.0)
    answer = served(cache, now=105.5, max_age=10)
    assert answer is not None and answer.headers["Age"] == "55"
    assert served(cache, now=120.0, max_age=10) is None


def test_s_maxage_overrides_max_age_and_forbids_serving_it_stale() -> None:
    """For a shared cache ``s-maxage`` wins over ``max-age`` and implies ``proxy-revalidate``."""
    cache = StaleCache()
    assert stored(cache, "max-age=1000, s-maxage=20")
    assert served(cache, now=19.0) is not None
    assert served(cache, now=20.0) is None


def test_expires_minus_date_is_the_lifetime() -> None:
    """Without max-age, the lifetime is ``Expires`` minus ``Date``."""
    cache = StaleCache()
    dates = {"Date": "Mon, 01 Jan 2024 00:00:00 GMT", "Expires": "Mon, 01 Jan 2024 00:01:00 GMT"}
    assert stored(cache, "must-revalidate", response_headers=dates)
    assert served(cache, now=59.0) is not None
    assert served(cache, now=60.0) is None


@pytest.mark.parametrize(
    "dates",
    [
        {"Expires": "0"},
        {"Expires": "Mon, 01 Jan 2024 00:01:00 GMT"},
        {"Date": "Mon, 01 Jan 2024 00:00:00 GMT", "Expires": "yesterday"},
    ],
)
def test_invalid_or_unanchored_expires_means_already_stale(dates: dict[str, str]) -> None:
    """An invalid ``Expires``, or one without ``Date``, gives a lifetime of 0."""
    cache = StaleCache()
    assert stored(cache, "must-revalidate", response_headers=dates)
    assert served(cache, now=0.0) is None


@pytest.mark.parametrize(
    "cache_control",
    [
        "max-age=abc, must-revalidate",
        "max-age=-5, must-revalidate",
        "max-age=60, max-age=5, must-revalidate",
    ],
)
def test_invalid_or_repeated_max_age_is_read_conservatively(cache_control: str) -> None:
    """An invalid ``max-age`` is 0 and repeated ones count as their minimum."""
    cache = StaleCache()
    assert stored(cache, cache_control)
    assert served(cache, now=6.0) is None


def test_a_huge_max_age_is_capped_not_an_error() -> None:
    """Delta-seconds beyond 2**31 (or too many digits to parse) are read as 2**31."""
    cache = StaleCache()
    assert stored(cache, "max-age=" + "9" * 5000 + ", must-revalidate")
    assert served(cache, now=2.0**31 - 1) is not None
    assert served(cache, now=2.0**31) is None


def test_must_revalidate_is_served_while_fresh_only() -> None:
    """``must-revalidate`` forbids serving the answer once stale."""
    cache = StaleCache()
    assert stored(cache, "max-age=60, must-revalidate")
    assert served(cache, now=59.0) is not None
    assert served(cache, now=60.0, max_age=10_000) is None


def test_must_revalidate_with_stale_if_error_is_served_within_it() -> None:
    """An explicit ``stale-if-error`` lifts the ``must-revalidate`` prohibition for its window."""
    cache = StaleCache()
    assert stored(cache, "max-age=60, must-revalidate, stale-if-error=30")
    assert served(cache, now=89.0) is not None
    assert served(cache, now=90.0) is None


def test_proxy_revalidate_is_served_while_fresh_only() -> None:
    """``proxy-revalidate`` binds a shared cache like ``must-revalidate``."""
    cache = StaleCache()
    assert stored(cache, "max-age=60, proxy-revalidate")
    assert served(cache, now=59.0) is not None
    assert served(cache, now=61.0) is None


def test_no_cache_is_never_served_without_stale_if_error() -> None:
    """Unqualified ``no-cache`` forbids reuse without validation, fresh or not."""
    cache = StaleCache()
    assert stored(cache, "no-cache, max-age=60")
    assert served(cache, now=1.0) is None


def test_no_cache_with_stale_if_error_is_served_within_it() -> None:
    """``no-cache`` with ``stale-if-error=30`` is served until 30 s past the lifetime."""
    cache = StaleCache()
    assert stored(cache, "no-cache, stale-if-error=30")
    assert served(cache, now=29.0) is not None
    assert served(cache, now=30.0) is None


def test_qualified_no_cache_drops_only_the_named_fields() -> None:
    """``no-cache="X-Secret"`` keeps the answer but never serves that field from storage."""
    cache = StaleCache()
    assert stored(
        cache,
        'no-cache="X-Secret, X-Other", max-age=60',
        response_headers={"X-Secret": "s", "X-Other": "o", "X-Kept": "k"},
    )
    answer = served(cache)
    assert answer is not None
    assert (
        "x-secret" not in answer.headers
        and "x-other" not in answer.headers
        and answer.headers["x-kept"] == "k"
    )


def test_an_invalid_stale_if_error_allows_nothing() -> None:
    """``stale-if-error`` that is not delta-seconds counts as 0, not as silence."""
    cache = StaleCache()
    assert stored(cache, "max-age=10, stale-if-error=soon")
    assert served(cache, now=9.0) is not None
    assert served(cache, now=10.0, max_age=300) is None


# -- request directives ------------------------------------------------------------


def test_a_request_stale_if_error_caps_the_responses() -> None:
    """The request's ``stale-if-error`` narrows the response's window."""
    cache = StaleCache()
    assert stored(cache, "max-age=10, stale-if-error=100")
    assert served(cache, {"Cache-Control": "stale-if-error=5"}, now=14.0) is not None
    assert served(cache, {"Cache-Control": "stale-if-error=5"}, now=15.0) is None


def test_a_request_stale_if_error_replaces_the_clients_max_age() -> None:
    """When the response says nothing, the request's ``stale-if-error`` stands in for ``max_age``."""
    cache = StaleCache()
    assert stored(cache, "max-age=10")
    assert served(cache, {"Cache-Control": "stale-if-error=600"}, now=609.0, max_age=5) is not None
    assert served(cache, {"Cache-Control": "stale-if-error=0"}, now=10.0, max_age=300) is None
    assert served(cache, {"Cache-Control": "stale-if-error=0"}, now=9.0, max_age=300) is not None


def test_a_request_stale_if_error_cannot_lift_a_prohibition() -> None:
    """A client's ``stale-if-error`` does not override the origin's ``must-revalidate`` or ``no-cache``."""
    cache = StaleCache()
    assert stored(cache, "max-age=10, must-revalidate", path="/a")
    assert stored(cache, "no-cache", path="/b")
    assert served(cache, {"Cache-Control": "stale-if-error=600"}, now=11.0, path="/a") is None
    assert served(cache, {"Cache-Control": "stale-if-error=600"}, now=1.0, path="/b") is None


@pytest.mark.parametrize("directive", ["no-cache", "max-stale, NO-CACHE", "no-store"])
def test_a_request_insisting_on_validation_is_not_answered(directive: str) -> None:
    """A request's ``no-cache`` or ``no-store`` means no stale answer at all."""
    cache = StaleCache()
    assert stored(cache, "max-age=60")
    assert served(cache, {"Cache-Control": directive}) is None


# -- the served answer ----------------------------------------------------------------


def test_the_served_answer_is_marked_aged_and_free_of_hop_and_session_fields() -> None:
    """Served: status, body, ``Age``, ``X-Failover-Stale: 1``, a fresh length, no hop-by-hop, cookie or encoding fields."""
    cache = StaleCache()
    fields = [
        ("Content-Type", "application/json"),
        ("Content-Encoding", "gzip"),
        ("Content-Length", "999"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Set-Cookie", "session=alice"),
        ("Proxy-Authenticate", "Basic"),
        ("ETag", '"v1"'),
        (STALE_HEADER, "0"),
    ]
    assert stored(
        cache, "max-age=60", None, fields, status=203, body=gzip.compress(b'{"rooms": [1]}')
    )
    answer = served(cache, now=12.7)
    assert answer is not None
    assert answer.status_code == 203 and answer.json() == {"rooms": [1]}
    assert answer.headers["Age"] == "12" and answer.headers.get_list(STALE_HEADER) == ["1"]
    assert answer.headers["Content-Length"] == str(len(b'{"rooms": [1]}'))
    assert answer.headers["ETag"] == '"v1"' and answer.headers["Content-Type"] == "application/json"
    for field in (
        "content-encoding",
        "connection",
        "x-hop",
        "keep-alive",
        "set-cookie",
        "proxy-authenticate",
        "warning",
    ):
        assert field not in answer.headers
    assert answer.request.url == req().url


def test_cache_control_with_quoted_commas_is_parsed() -> None:
    """A quoted directive argument may contain commas without splitting the header."""
    cache = StaleCache()
    assert not stored(cache, 'no-cache="A, B", no-store')
    assert stored(cache, 'ext="x, no-store", max-age=60')


# -- bounds -------------------------------------------------------------------------


def test_entries_are_evicted_least_recently_used_first() -> None:
    """Past ``max_entries`` the least recently stored or served entry goes first."""
    cache = StaleCache(max_entries=2)
    assert stored(cache, path="/a") and stored(cache, path="/b")
    assert served(cache, path="/a") is not None
    assert stored(cache, path="/c")
    assert len(cache) == 2
    assert served(cache, path="/b") is None
    assert served(cache, path="/a") is not None and served(cache, path="/c") is not None


def test_total_bytes_are_bounded() -> None:
    """Past ``max_total_bytes`` the oldest entries go; an entry larger than the bound is not stored."""
    cache = StaleCache(max_total_bytes=250)
    assert stored(cache, path="/a", body=b"a" * 100)
    assert stored(cache, path="/b", body=b"b" * 100)
    assert cache.total_bytes <= 250 and len(cache) == 2
    assert stored(cache, path="/c", body=b"c" * 100)
    assert cache.total_bytes <= 250 and len(cache) == 2
    assert served(cache, path="/a") is None and served(cache, path="/c") is not None
    assert not stored(cache, path="/d", body=b"d" * 251)
    assert served(cache, path="/b") is not None


def test_zero_entries_stores_nothing() -> None:
    """``max_entries=0`` disables storage."""
    cache = StaleCache(max_entries=0)
    assert not stored(cache)
    assert len(cache) == 0 and cache.total_bytes == 0


@pytest.mark.parametrize("kwargs", [{"max_entries": -1}, {"max_total_bytes": -1}])
def test_negative_bounds_are_rejected(kwargs: dict[str, int]) -> None:
    """A negative bound is a configuration error named in the message."""
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        StaleCache(**kwargs)


def test_concurrent_stores_and_lookups_keep_the_bounds_and_the_books() -> None:
    """Threads storing, serving and invalidating at once never raise, break a bound or lose count of bytes."""
    cache = StaleCache(max_entries=40, max_total_bytes=4_000)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for i in range(400):
                path = f"/p{rng.randrange(60)}"
                headers = {
                    "Authorization": f"Bearer {rng.randrange(3)}",
                    "Accept": str(rng.randrange(2)),
                }
                op = rng.random()
                if op < 0.5:
                    response = resp(
                        "public, max-age=60", {"Vary": "Accept"}, body=b"x" * rng.randrange(200)
                    )
                    cache.store(POOL, req(path, headers), response, float(i), max_bytes=150)
                elif op < 0.95:
                    answer = cache.lookup(POOL, req(path, headers), float(i), max_age=300, response=httpx.Response)
                    assert answer is None or answer.headers[STALE_HEADER] == "1"
                else:
                    cache.store(
                        POOL, req(path, method="DELETE"), resp(status=204), float(i), max_bytes=150
                    )
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert not any(thread.is_alive() for thread in threads)
    assert len(cache) <= 40 and cache.total_bytes <= 4_000
    # The private books must agree with the entries they describe.
    entries = cache._entries
    assert cache.total_bytes == sum(entry.size for entry in entries.values())
    assert sum(sum(v.values()) for v in cache._variants.values()) == len(entries)


# -- properties ---------------------------------------------------------------------

_VALUES = st.one_of(st.none(), st.sampled_from(["", "a", "b", "Bearer token-a", "Bearer token-b"]))
_FIELDS = ("Authorization", "Proxy-Authorization", "Cookie", "Accept", "Accept-Language")
_Profile = tuple[str | None, ...]


def _headers(profile: _Profile) -> list[tuple[str, str]]:
    return [
        (name, value) for name, value in zip(_FIELDS, profile, strict=True) if value is not None
    ]


_PROFILES = st.tuples(*([_VALUES] * len(_FIELDS)))


@settings(max_examples=300, deadline=None)
@given(
    stored_profile=_PROFILES,
    looked_profile=_PROFILES,
    vary=st.lists(st.sampled_from(["Accept", "Accept-Language", "Authorization"]), unique=True),
)
def test_a_lookup_never_crosses_credentials_or_vary_selection(
    stored_profile: _Profile, looked_profile: _Profile, vary: list[str]
) -> None:
    """An answer is served iff the request's credentials and Vary-selected fields equal those that fetched it."""
    cache = StaleCache()
    response = resp("public, max-age=60", {"Vary": ", ".join(vary)} if vary else None)
    assert cache.store(POOL, req(headers=_headers(stored_profile)), response, 0.0, max_bytes=BIG)
    answer = cache.lookup(POOL, req(headers=_headers(looked_profile)), 1.0, max_age=300, response=httpx.Response)
    same_credentials = stored_profile[:3] == looked_profile[:3]
    selecting = [_FIELDS.index(name) for name in vary]
    same_selection = all(stored_profile[i] == looked_profile[i] for i in selecting)
    assert (answer is not None) == (same_credentials and same_selection)


@settings(max_examples=200, deadline=None)
@given(
    stores=st.lists(
        st.tuples(
            st.sampled_from(["Bearer token-a", "Bearer token-b", None]), st.binary(max_size=8)
        ),
        max_size=12,
    ),
    looked=st.sampled_from(["Bearer token-a", "Bearer token-b", None]),
)
def test_a_lookup_returns_the_latest_body_stored_with_the_same_credentials(
    stores: list[tuple[str | None, bytes]], looked: str | None
) -> None:
    """Whatever was stored in between, a lookup returns the newest body its own credentials fetched, or nothing."""
    cache = StaleCache()
    for i, (token, body) in enumerate(stores):
        headers = {"Authorization": token} if token is not None else None
        assert stored(cache, "public, max-age=60", headers, now=float(i), body=body)
    expected = [body for token, body in stores if token == looked]
    answer = served(
        cache, {"Authorization": looked} if looked is not None else None, now=float(len(stores))
    )
    assert (answer.content if answer is not None else None) == (expected[-1] if expected else None)


@settings(max_examples=200, deadline=None)
@given(
    cache_control=st.lists(
        st.sampled_from(
            [
                "max-age=10",
                "s-maxage=5",
                "stale-if-error=20",
                "no-cache",
                "must-revalidate",
                "proxy-revalidate",
                "public",
                "stale-if-error=x",
            ]
        ),
        max_size=4,
    ),
    request_sie=st.one_of(st.none(), st.integers(0, 50)),
    times=st.lists(st.floats(0, 200), min_size=2, max_size=6),
    max_age=st.floats(0, 100),
)
def test_once_too_old_an_entry_is_never_served_again(
    cache_control: list[str], request_sie: int | None, times: list[float], max_age: float
) -> None:
    """Servability only ever turns from yes to no as time passes, never back."""
    cache = StaleCache()
    assert stored(cache, ", ".join(cache_control) or None)
    headers = (
        {"Cache-Control": f"stale-if-error={request_sie}"} if request_sie is not None else None
    )
    answers = [served(cache, headers, now=t, max_age=max_age) is not None for t in sorted(times)]
    assert answers == sorted(answers, reverse=True)


@settings(max_examples=300, deadline=None)
@given(
    cache_control=st.text(max_size=60),
    vary=st.text(st.characters(codec="ascii", exclude_characters="\r\n\x00"), max_size=30),
)
def test_arbitrary_cache_control_and_vary_never_raise(cache_control: str, vary: str) -> None:
    """Any header text is parsed to a decision, never an exception."""
    cache = StaleCache()
    response = httpx.Response(
        200,
        headers=[
            (b"Cache-Control", cache_control.encode("utf-8")),
            (b"Vary", vary.encode("ascii")),
        ],
        content=b"x",
    )
    cache.store(POOL, req(), response, 0.0, max_bytes=BIG)
    served(cache)
