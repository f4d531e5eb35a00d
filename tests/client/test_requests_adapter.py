"""The requests adapter next to a bare ``requests.Session``: what a caller of requests sees
of an answer (its raw stream, its cookies, its body) is what the bare session shows, on
the primary and after a failover alike."""

from __future__ import annotations

import copy
import gzip
import io
import os
import pickle
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3 import Timeout

from pytest_failover import ExponentialBackoff, Hedging, Pool, faults
from pytest_failover._values import AttemptRecord
from pytest_failover.integrations.requests import (
    AllDomainsFailed,
    CircuitOpenError,
    FailoverAdapter,
)
from pytest_failover.simulator import FakeDomains, RecordedRequest, Response

from .servers import Flapping, LoopbackServer, closed_port
from .test_concurrency import POLICY, check
from .test_transport import fast

Servers = dict[str, LoopbackServer]
Sessions = dict[str, tuple[requests.Session, str]]  # name: the session, the base URL it asks for


@pytest.fixture
def sessions(servers: Servers) -> Iterator[Sessions]:
    """Three sessions that all get their answers from ``a``: ``bare`` (no adapter),
    ``primary`` (a pool whose first domain is ``a``) and ``failover`` (a pool whose first
    domain refuses connections, the URL it asks for, then ``a``). The pools read at most
    100 KiB of a body before handing it over."""
    a = servers["a"]
    dead = f"http://127.0.0.1:{closed_port()}"
    made: Sessions = {"bare": (requests.Session(), a.url())}
    for name, domains in (("primary", [a.url()]), ("failover", [dead, a.url()])):
        session = requests.Session()
        session.mount("http://", FailoverAdapter([Pool("api", domains)], fast(read_body_max_bytes=100 << 10, sticky=False)))
        made[name] = (session, domains[0])
    yield made
    for session, _ in made.values():
        session.close()


# name: the body, the answer's headers, sent chunked (no length)?
BODIES: dict[str, tuple[bytes, dict[str, str], bool]] = {
    "sized": (b"line\n" * 2000, {}, False),  # read whole in the adapter
    "chunked past the limit": (os.urandom(300 << 10), {}, True),  # read up to the limit, then streamed
    "gzip": (gzip.compress(b"line\n" * 2000), {"Content-Encoding": "gzip"}, True),
    "gzip past the limit": (gzip.compress(os.urandom(300 << 10)), {"Content-Encoding": "gzip"}, True),
}


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("name", ["primary", "failover"])
def test_a_streamed_answer_reads_from_raw_as_the_bare_session_does(
    sessions: Sessions, servers: Servers, name: str, body: str
) -> None:
    """``stream=True`` answers keep ``raw`` readable as bare requests leaves it: its bytes
    as they came (still compressed), ``read(n)`` n at a time, ``read(decode_content=True)``
    decoded; ``iter_content`` decoded; whether the adapter read the body whole or streams
    it past its read limit, on the primary and after a failover."""
    payload, headers, chunked = BODIES[body]
    servers["a"].set(body=payload, headers=headers, chunked=chunked)
    decoded = gzip.decompress(payload) if headers else payload
    for session, base in (sessions["bare"], sessions[name]):
        url = base + "/file"
        response = session.get(url, timeout=10, stream=True)
        assert response.raw.read(5) == payload[:5]
        assert response.raw.read() == payload[5:]
        assert session.get(url, timeout=10, stream=True).raw.read(decode_content=True) == decoded
        assert b"".join(session.get(url, timeout=10, stream=True).iter_content(1000)) == decoded
        assert session.get(url, timeout=10).content == decoded


@pytest.mark.parametrize("name", ["bare", "primary", "failover"])
def test_cookies_of_an_answer_past_the_read_limit_reach_the_jar(sessions: Sessions, servers: Servers, name: str) -> None:
    """A ``Set-Cookie`` on an answer whose body streams past the read limit is filed in the
    session's jar, as on one read whole (requests takes an answer's cookies from ``raw``)."""
    servers["a"].set(body=os.urandom(300 << 10), headers={"Set-Cookie": "sid=42; Path=/"}, chunked=True)
    session, base = sessions[name]
    assert len(session.get(base + "/login", timeout=10).content) == 300 << 10
    assert session.cookies.get("sid") == "42"


def test_an_answer_past_the_read_limit_closed_early_closes_its_connection(servers: Servers) -> None:
    """A streamed answer the caller closes after its first chunk, past the read limit,
    closes urllib3's response under it (its connection is not handed back half read) and
    the next request is answered."""
    a = servers["a"]
    a.set(body=os.urandom(300 << 10), chunked=True)
    raws: list[Any] = []

    class Recording(HTTPAdapter):
        def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
            response = super().send(request, *args, **kwargs)
            raws.append(response.raw)
            return response

    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(read_body_max_bytes=100 << 10), adapter=Recording())
    with requests.Session() as session:
        session.mount("http://", adapter)
        with session.get(a.url() + "/file", timeout=10, stream=True) as response:
            assert len(next(response.iter_content(1000))) == 1000
        assert raws[0].closed
        a.set(body=b"again")
        assert session.get(a.url() + "/again", timeout=10).content == b"again"


@pytest.mark.parametrize(
    "timeout",
    [-1, 0, float("nan"), True, "x", [1, 2], (1, 2, 3), (1,), (0.1, "y"), (-1, 5)],
    ids=repr,
)
def test_an_invalid_timeout_is_requests_own_error_and_sends_nothing(sessions: Sessions, servers: Servers, timeout: Any) -> None:
    """A ``timeout=`` bare requests refuses is refused with requests' own ``ValueError`` and
    message, before anything is sent: no attempt, no breaker count."""
    messages = []
    for name in ("bare", "primary"):
        session, base = sessions[name]
        with pytest.raises(ValueError, match=r"(?i)timeout|NaN") as refused:
            session.get(base + "/x", timeout=timeout)
        messages.append(str(refused.value))
    assert messages[1] == messages[0]
    assert servers["a"].total == 0
    adapter = sessions["primary"][0].get_adapter("http://")
    assert isinstance(adapter, FailoverAdapter)
    assert adapter.state().pools["api"].domains[0].consecutive_failures == 0


@pytest.mark.parametrize("failover", [False, True])
def test_a_urllib3_timeout_with_a_total_bounds_the_attempt(servers: Servers, failover: bool) -> None:
    """``urllib3.Timeout(total=...)``, which requests takes, bounds the wait for an answer
    (a slow one fails with a requests error) and lets a prompt one through."""
    a = servers["a"]
    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(breaker_threshold=10))
    with requests.Session() as session:
        if failover:
            session.mount("http://", adapter)
        a.set(delay=2.0)
        with pytest.raises(requests.RequestException):
            session.get(a.url() + "/slow", timeout=Timeout(total=0.3))  # type: ignore[arg-type]  # requests takes one (HTTPAdapter.send); its stubs do not say so
        a.set()
        assert session.get(a.url() + "/x", timeout=Timeout(total=5, connect=2)).status_code == 200  # type: ignore[arg-type]  # as above


def _body(kind: str, folder: Path) -> tuple[dict[str, Any], bytes, bool]:
    """A body of one kind requests sends: its keyword arguments, bytes its request carries,
    and whether it can be sent again (a file object cannot: requests reads it as it goes)."""
    if kind == "file":
        path = folder / "upload.bin"
        path.write_bytes(b"file-bytes" * 1000)
        return {"data": path.open("rb")}, b"file-bytes" * 1000, False
    kinds: dict[str, tuple[dict[str, Any], bytes, bool]] = {
        "bytes": ({"data": b"raw-bytes"}, b"raw-bytes", True),
        "str": ({"data": "some text"}, b"some text", True),
        "form": ({"data": {"k": "v"}}, b"k=v", True),
        "json": ({"json": {"k": "v"}}, b'{"k": "v"}', True),
        "files": ({"files": {"up": ("x.txt", b"multipart-content")}}, b"multipart-content", True),
        "BytesIO": ({"data": io.BytesIO(b"in-memory file")}, b"in-memory file", False),
    }
    return kinds[kind]


@pytest.mark.parametrize("kind", ["bytes", "str", "form", "json", "files", "file", "BytesIO"])
@pytest.mark.parametrize("fault", ["refused", "reset after sending"])
def test_every_kind_of_body_moves_on_when_nothing_was_sent_and_only_a_replayable_one_after(
    servers: Servers, tmp_path: Path, kind: str, fault: str
) -> None:
    """A POST with an ``Idempotency-Key``, whatever its body: a primary that refused the
    connection got nothing, so the backup gets the whole body; one that reset after reading
    it (before any answer: a drop) gets it again, then the backup, only if it can be sent
    again (not a file object, which fails with ``AllDomainsFailed``, ``not_retryable``)."""
    a, b = servers["a"], servers["b"]
    keywords, carried, replayable = _body(kind, tmp_path)
    first = f"http://127.0.0.1:{closed_port()}" if fault == "refused" else a.url()
    a.set(reset=True)
    adapter = FailoverAdapter([Pool("api", [first, b.url()])], fast(sticky=False))
    with requests.Session() as session:
        session.mount("http://", adapter)

        def call() -> requests.Response:
            return session.post(first + "/up", timeout=10, headers={"Idempotency-Key": "k1"}, **keywords)

        if fault == "refused" or replayable:
            assert call().headers["x-served-by"] == "b"
            assert [carried in body for _, _, _, body in b.seen] == [True]
        else:
            with pytest.raises(requests.exceptions.ConnectionError, match="not_retryable"):
                call()
            assert b.total == 0
    if fault != "refused":
        assert [carried in body for _, _, _, body in a.seen] == [True] * (2 if replayable else 1)
    if isinstance(keywords.get("data"), io.IOBase):
        keywords["data"].close()


def _cookie_handler(request: RecordedRequest) -> Response | dict[str, Any]:
    """Sets a cookie at ``/login``, one for its own host at ``/own``, redirects ``/go``
    to ``/landing`` (a relative ``Location``); otherwise says who it is and what cookies came."""
    if request.path == "/login":
        return Response(200, b"ok", (("Set-Cookie", f"sid={request.host}; Path=/"),))
    if request.path == "/own":
        return Response(200, b"ok", (("Set-Cookie", f"own=1; Domain={request.host}; Path=/"),))
    if request.path == "/go":
        return Response(302, b"", (("Location", "/landing"),))
    return {"host": request.host, "cookie": request.headers.get("cookie")}


def test_a_cookie_the_backup_sets_is_filed_under_the_host_the_session_asked_for() -> None:
    """requests files an answer's cookies under the host of its own request (the URL the
    caller gave), not ``response.url``'s: the next request to that URL carries a cookie the
    backup set, whichever domain answers it. A cookie whose ``Domain`` names the backup's
    host is refused, as any cookie for another host is. A redirect is followed from
    ``response.url``: a relative one the backup answered goes to the backup's host, with
    that host's cookies (none here)."""
    with FakeDomains() as fake, requests.Session() as session:
        fake.add("api.example.com", _cookie_handler)
        fake.add("api2.example.com", _cookie_handler)
        pool = Pool("api", ["http://api.example.com", "http://api2.example.com"])
        session.mount("http://", FailoverAdapter([pool], fast(sticky=False, breaker_threshold=100)))
        fake.fail("api.example.com", faults.refused())
        login = session.get("http://api.example.com/login", timeout=10)
        assert login.url == "http://api2.example.com/login"
        session.get("http://api.example.com/own", timeout=10)
        assert [(c.name, c.value, c.domain) for c in session.cookies] == [("sid", "api2.example.com", "api.example.com")]
        assert session.get("http://api.example.com/me", timeout=10).json() == {"host": "api2.example.com", "cookie": "sid=api2.example.com"}
        followed = session.get("http://api.example.com/go", timeout=10)
        assert followed.json() == {"host": "api2.example.com", "cookie": None}
        assert [r.url for r in followed.history] == ["http://api2.example.com/go"]
        fake.fail("api.example.com", faults.healthy())
        assert session.get("http://api.example.com/me", timeout=10).json() == {"host": "api.example.com", "cookie": "sid=api2.example.com"}


@pytest.mark.parametrize("variant", ["plain", "hedging"])
def test_12_threads_share_one_session_while_the_primary_flaps(
    flapping: Flapping,
    variant: str,
) -> None:
    """Twelve threads share one session and adapter while the primary cycles through
    healthy, 503, reset and a body cut short (the backup stays up): every GET is answered
    200; a POST without an idempotency key is answered (200, or the primary's 503, which is
    not re-sent) or fails with the adapter's ``AllDomainsFailed`` / ``CircuitOpenError``
    (never any other error), and no POST reaches the servers twice; every attempt sent is
    one a server saw. Hedged GETs race from the adapter's own threads (requests' sockets
    cannot be cut: the pooled race).

    Once the primary heals: the next request is answered and both breakers close within a
    few cooldowns, no hedge's thread is busy, and urllib3's pools have every connection
    back (a response nobody closed keeps its connection out of the pool for good)."""
    a, b, heal = flapping
    records: list[AttemptRecord] = []
    posts: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    answered: Counter[tuple[str, int]] = Counter()  # (method, status): answers
    lock = threading.Lock()
    session = requests.Session()
    hedging = Hedging(delay=0.005, max_ratio=1.0) if variant == "hedging" else None
    adapter = FailoverAdapter([Pool("api", [a.url(), b.url()])], replace(POLICY, hedging=hedging))
    session.mount("http://", adapter)

    def worker(n: int) -> None:  # any error but the adapter's two is a bug: map raises it
        for i in range(10):
            method, body = ("POST", f"thread-{n}-{i}") if i % 2 else ("GET", "")
            with lock:
                posts.update([body] if body else [])
            try:
                response = session.request(method, a.url() + "/orders", data=body.encode(), timeout=30)
            except (AllDomainsFailed, CircuitOpenError) as exc:
                with lock:
                    records.extend(exc.attempts)
                    failed[method] += 1
                continue
            with lock:
                answered[method, response.status_code] += 1
                records.extend(response.failover.attempts)  # type: ignore[attr-defined]  # the adapter sets it

    with session:
        with ThreadPoolExecutor(12) as threads:
            list(threads.map(worker, range(12), timeout=60))
        assert failed["GET"] == 0 and {method for method, status in answered if status != 200} <= {"POST"}, (answered, failed)
        assert {status for _, status in answered} <= {200, 503}  # a POST's 503 is its answer: not re-sent
        check(records, posts, a, b)
        assert len(records) >= 120
        heal()
        for _ in range(40):  # (a cooldown apart: a breaker lets one request through once it is over)
            time.sleep(2 * POLICY.breaker_cooldown)
            assert session.get(a.url() + "/orders", timeout=30).status_code == 200
            if all(d.breaker == "closed" for d in adapter.state().pools["api"].domains):
                break
        assert [d.breaker for d in adapter.state().pools["api"].domains] == ["closed", "closed"]
        hedgers = adapter._transport._hedgers  # (the adapter's httpx transport inside)
        deadline = time.monotonic() + 5.0  # a hedge that lost ends once its answer came
        while hedgers is not None and hedgers._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hedgers is None or hedgers._busy == 0, "a hedge's thread still busy"
        # (urllib3's RecentlyUsedContainer refuses iteration; keys() is a copy, under its lock)
        pools = [adapter.poolmanager.pools[key] for key in adapter.poolmanager.pools.keys()]  # noqa: SIM118
        out = {pool.port: pool.pool.maxsize - pool.pool.qsize() for pool in pools}
        assert set(out) == {a.port, b.port} and set(out.values()) == {0}, f"connections out of their pools: {out}"


def test_a_wrapped_adapters_pool_limits_hold_inside_the_pools_and_close_is_idempotent(servers: Servers) -> None:
    """``adapter=HTTPAdapter(pool_maxsize=1, pool_block=True)``: inside the pools its one
    connection serves four threads in turn (never a second connection). Closing the
    session, then the adapter, twice each, raises nothing, and the session still sends
    afterwards, as a bare one does (requests makes its pools anew)."""
    a = servers["a"]
    a.set(delay=0.05)
    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(), adapter=HTTPAdapter(pool_maxsize=1, pool_block=True))
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    accepted = a.accepted
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(session.get(a.url() + "/x", timeout=10).status_code)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert statuses == [200] * 4 and a.accepted == accepted + 1
    session.close()
    session.close()
    adapter.close()
    adapter.close()
    assert session.get(a.url() + "/again", timeout=10).status_code == 200
    session.close()


# name: method, status, body, headers, chunked
ANSWERS: dict[str, tuple[str, int, bytes, dict[str, str], bool]] = {
    "HEAD": ("HEAD", 200, b'{"ok": true}', {}, False),
    "204": ("GET", 204, b"", {}, False),
    "304": ("GET", 304, b"", {"ETag": '"v1"'}, False),
    "empty": ("GET", 200, b"", {}, False),
    "gzip": ("GET", 200, gzip.compress('{"é": 1}'.encode()), {"Content-Encoding": "gzip"}, False),
    "deflate": ("GET", 200, zlib.compress(b'{"d": 2}'), {"Content-Encoding": "deflate"}, False),
    "chunked": ("GET", 200, b"x" * 200_000, {"Content-Type": "text/plain; charset=latin-1"}, True),
    "404": ("GET", 404, b'{"error": "missing"}', {}, False),
}


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("name", ["primary", "failover"])
def test_an_answer_reads_as_the_bare_sessions_does(sessions: Sessions, servers: Servers, name: str, answer: str) -> None:
    """HEAD, 204, 304, an empty body, gzip, deflate, a chunked body, a 404: status, headers,
    content, text, encoding, ``raise_for_status``, ``ok`` and ``is_redirect`` are the bare
    session's; a response hook runs once, on the answer the caller gets, whose ``url`` and
    ``request.url`` name the domain that answered, ``connection`` the adapter it was sent
    through, and ``elapsed`` the whole call."""
    method, status, body, headers, chunked = ANSWERS[answer]
    servers["a"].set(status=status, body=body, headers=headers, chunked=chunked)
    seen: dict[str, list[requests.Response]] = {}
    for key in ("bare", name):
        session, base = sessions[key]
        hooked: list[requests.Response] = []

        def hook(response: requests.Response, *args: Any, into: list[requests.Response] = hooked, **kwargs: Any) -> None:
            into.append(response)

        response = session.request(method, base + "/x", timeout=10, hooks={"response": hook})
        seen[key] = [*hooked, response]
    (bare_hooked, bare), (ours_hooked, ours) = seen["bare"], seen[name]
    assert ours_hooked is ours and bare_hooked is bare
    assert (ours.status_code, ours.content, ours.text, ours.encoding, ours.ok, ours.is_redirect) == (
        bare.status_code, bare.content, bare.text, bare.encoding, bare.ok, bare.is_redirect
    )
    assert {k: v for k, v in ours.headers.items() if k.lower() != "date"} == {k: v for k, v in bare.headers.items() if k.lower() != "date"}
    if status >= 400:
        with pytest.raises(requests.HTTPError):
            ours.raise_for_status()
    else:
        ours.raise_for_status()
    assert ours.url == ours.request.url == servers["a"].url() + "/x"
    assert ours.connection is sessions[name][0].get_adapter(ours.url)
    assert ours.elapsed.total_seconds() > 0


def test_a_redirect_after_a_failover_is_followed_into_another_pool_or_out_of_every_pool(servers: Servers) -> None:
    """A redirect the backup answered is followed as requests follows any: into another
    pool (which fails over on its own: ``failover.pool`` names it), or to a host outside
    every pool (sent as it is, no ``failover``); ``history`` holds the redirect with its
    own result. With ``allow_redirects=False`` the redirect is the answer, ``next`` its
    target."""
    a, b, c = servers["a"], servers["b"], servers["c"]
    dead, gone = (f"http://127.0.0.1:{closed_port()}" for _ in range(2))
    pools = [Pool("api", [dead, a.url()]), Pool("files", [gone, b.url()])]
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter(pools, fast(sticky=False)))
        a.set(status=302, headers={"Location": b.url() + "/landing"})
        response = session.get(dead + "/go", timeout=10)
        assert (response.status_code, response.url, response.headers["x-served-by"]) == (200, b.url() + "/landing", "b")
        assert (response.failover.pool, response.failover.domain) == ("files", b.url())  # type: ignore[attr-defined]  # the adapter sets it
        assert [(r.status_code, r.url, r.failover.domain) for r in response.history] == [(302, a.url() + "/go", a.url())]  # type: ignore[attr-defined]  # as above
        a.set(status=302, headers={"Location": c.url() + "/out"})
        response = session.get(dead + "/go", timeout=10)
        assert (response.url, response.headers["x-served-by"], hasattr(response, "failover")) == (c.url() + "/out", "c", False)
        assert [r.url for r in response.history] == [a.url() + "/go"]
        held = session.get(dead + "/go", timeout=10, allow_redirects=False)
        assert (held.status_code, held.is_redirect, held.url) == (302, True, a.url() + "/go")
        assert held.next is not None and held.next.url == c.url() + "/out"
        assert c.total == 1  # the held redirect was not followed


def test_a_stale_copy_or_a_fallback_answer_keeps_a_readable_raw_when_streamed(servers: Servers) -> None:
    """A stale copy and a fallback's answer, asked for with ``stream=True``, have a ``raw``
    to read the body from (``shutil.copyfileobj(response.raw, file)``), as any streamed
    answer: their content (a stale copy is kept decoded, without its ``Content-Encoding``)."""
    a = servers["a"]
    policy = fast(stale_on_failure=True, schedule=ExponentialBackoff(base=0.001, max_attempts=1))
    gone = f"http://127.0.0.1:{closed_port()}"
    stale = FailoverAdapter([Pool("api", [a.url()])], policy)
    offline = FailoverAdapter([Pool("api", [gone])], policy, fallback=lambda request, error: httpx.Response(203, content=b"offline copy"))
    with requests.Session() as session:
        session.mount(a.url(), stale)
        session.mount(gone, offline)
        a.set(body=gzip.compress(b'{"cached": 1}'), headers={"Content-Encoding": "gzip", "Cache-Control": "max-age=0, stale-if-error=600"})
        assert session.get(a.url() + "/c", timeout=10).content == b'{"cached": 1}'
        a.set(status=503)
        copy = session.get(a.url() + "/c", timeout=10, stream=True)
        assert copy.headers["x-failover-stale"] == "1" and copy.raw.read() == b'{"cached": 1}'
        answer = session.get(gone + "/c", timeout=10, stream=True)
        assert answer.status_code == 203 and answer.raw.read(7) == b"offline" and answer.raw.read() == b" copy"


def test_a_body_cut_mid_way_fails_over_a_get_never_resends_a_post_and_past_the_limit_is_requests_error(
    servers: Servers,
) -> None:
    """The primary sends half of a declared body, then resets. Within the read limit a GET
    is answered by the backup, and a POST without an idempotency key is not sent again
    (``AllDomainsFailed``, ``not_retryable``). A body declared longer than the limit is
    handed over unread: the break reaches the caller as requests' own error, as from a
    bare session (``ChunkedEncodingError``), and is not re-sent."""
    a, b = servers["a"], servers["b"]
    adapter = FailoverAdapter([Pool("api", [a.url(), b.url()])], fast(read_body_max_bytes=100 << 10, sticky=False))
    with requests.Session() as session, requests.Session() as bare:
        session.mount("http://", adapter)
        a.set(truncate=True, body=b"x" * 1000)
        response = session.get(a.url() + "/small", timeout=10)
        assert response.headers["x-served-by"] == "b"
        first, second = response.failover.attempts  # type: ignore[attr-defined]  # the adapter sets it
        assert first.error_type in {"connection_reset", "remote_protocol_error"} and second.error_type is None  # the RST, or the short read before it
        with pytest.raises(AllDomainsFailed, match="not_retryable"):
            session.post(a.url() + "/orders", data=b"order-1", timeout=10)
        assert b.counts["POST"] == 0
        a.set(truncate=True, body=b"x" * (150 << 10))  # declares 300 KiB
        for client in (bare, session):
            with pytest.raises(requests.exceptions.ChunkedEncodingError):
                client.get(a.url() + "/large", timeout=10)
        assert b.of_path("/large") == 0


def test_pickling_the_adapter_or_its_session_is_a_clear_error() -> None:
    """A ``FailoverAdapter`` holds live state (breakers, budget, connections, threads) that
    a copy in another process cannot share: pickling it, or a session it is mounted on, or
    deep-copying either, raises a ``TypeError`` that says so, rather than making an
    adapter that fails at its first request (requests' ``HTTPAdapter`` pickles its settings
    alone)."""
    adapter = FailoverAdapter([Pool("api", ["http://api.test", "http://api2.test"])])
    with requests.Session() as session:
        session.mount("http://", adapter)
        for copy_of in (pickle.dumps, copy.deepcopy):
            for thing in (adapter, session):
                with pytest.raises(TypeError, match=r"cannot be pickled or copied.*FailoverAdapter"):
                    copy_of(thing)
    adapter.close()


@pytest.mark.parametrize("setting", [{"verify": "/nonexistent/ca.pem"}, {"cert": "/nonexistent/client.pem"}], ids=["verify", "cert"])
def test_a_local_tls_setting_that_cannot_work_is_requests_own_error_and_blames_no_domain(
    servers: Servers, setting: dict[str, str]
) -> None:
    """A CA bundle or client certificate path that does not exist is the caller's set-up,
    not a domain's failure: requests raises its ``OSError`` before connecting, and so does
    the adapter, with the same message, at once: no retry, no other domain tried, no
    failure counted against any."""
    tls, b = servers["tls"], servers["b"]
    adapter = FailoverAdapter([Pool("api", [tls.url(), tls.url("localhost")])], fast(breaker_threshold=1))
    messages = []
    with requests.Session() as session, requests.Session() as bare:
        session.mount("https://", adapter)
        for client in (bare, session):
            with pytest.raises(OSError, match="invalid path") as raised:
                client.get(tls.url() + "/x", timeout=10, **setting)  # type: ignore[arg-type]  # one keyword of send's, as given
            assert not isinstance(raised.value, requests.RequestException)
            messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert [d.consecutive_failures for d in adapter.state().pools["api"].domains] == [0, 0]
    assert tls.total == 0 and b.total == 0


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_a_body_in_memory_of_any_buffer_type_is_sent_again_elsewhere(servers: Servers, kind: type) -> None:
    """A PUT whose body is in memory (``bytes``, a ``bytearray``, a ``memoryview``: requests
    sends each as it is) is sent again on the backup after the primary's 503, the same
    bytes; only a body read as it goes (a generator, a file) cannot be."""
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter([Pool("api", [a.url(), b.url()])], fast(sticky=False)))
        response = session.put(a.url() + "/doc", data=kind(b"document"), timeout=10)
    assert response.status_code == 200 and [r.status for r in response.failover.attempts] == [503, 200]  # type: ignore[attr-defined]  # the adapter sets it
    assert [body for _, _, _, body in b.seen] == [b"document"]


def test_every_attempt_goes_through_the_proxies_chosen_for_the_url_asked_for(
    servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests picks proxies (``HTTP_PROXY``, ``NO_PROXY``) for the URL asked for before
    the adapter sees the request, and the adapter cannot tell the environment's from the
    session's own: every attempt goes the way chosen for that URL. Here the URL asked for
    is exempt (``NO_PROXY``), so the backup is reached directly, where a bare request to
    it would go through the proxy (docs/integrations.md says so)."""
    b, proxy = servers["b"], servers["c"]
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    asked = f"http://127.0.0.1:{closed_port()}"
    with requests.Session() as session, requests.Session() as bare:
        session.mount("http://", FailoverAdapter([Pool("api", [asked, b.url("localhost")])], fast()))
        assert session.get(asked + "/x", timeout=10).headers["x-served-by"] == "b"
        assert bare.get(b.url("localhost") + "/x", timeout=10).headers["x-served-by"] == "c"


def _within(seconds: float, read: Callable[[], object]) -> object:
    """``read()``'s result, or a failure if it has not returned in ``seconds`` (a loop that
    never ends is left in a daemon thread)."""
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(read()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"still reading after {seconds} s"
    return done[0]


@pytest.mark.parametrize("answer", ["read whole", "past the limit", "stale"])
def test_a_streamed_raw_read_in_chunks_as_they_come_ends(servers: Servers, answer: str) -> None:
    """``iter_content(None)`` and ``raw.stream(None)`` (chunks as they come, no size) end
    at the body's end, on an answer the adapter read whole, one past its read limit and a
    stale copy, as they do on a bare session's: urllib3 stops when its file says it is
    closed, which an exhausted ``http.client`` response does."""
    a = servers["a"]
    body = os.urandom(300 << 10 if answer == "past the limit" else 1000)
    a.set(body=body, chunked=True, headers={"Cache-Control": "max-age=0, stale-if-error=600"})
    policy = fast(read_body_max_bytes=100 << 10, stale_on_failure=True, schedule=ExponentialBackoff(base=0.001, max_attempts=1))
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter([Pool("api", [a.url()])], policy))
        if answer == "stale":
            session.get(a.url() + "/f", timeout=10)
            a.set(status=503)
        chunks = _within(10, lambda: list(session.get(a.url() + "/f", timeout=10, stream=True).iter_content(None)))
        assert b"".join(chunks) == body  # type: ignore[arg-type]  # a list of bytes, as read
        raw = session.get(a.url() + "/f", timeout=10, stream=True).raw
        assert b"".join(_within(10, lambda: list(raw.stream(None)))) == body  # type: ignore[arg-type]  # as above


def test_the_proxy_managers_make_announcing_connections_but_a_socks_one() -> None:
    """An HTTP(S) proxy's connections say which request they send, as the adapter's own do
    (the watchdog cuts a head trickled through it: ``test_deadline``); a SOCKS proxy's pools
    are its own (SOCKS connections), untouched."""
    from urllib3.contrib.socks import SOCKSProxyManager
    from urllib3.poolmanager import ProxyManager

    adapter = FailoverAdapter([Pool("api", [f"http://127.0.0.1:{closed_port()}"])])
    http = adapter.proxy_manager_for("http://127.0.0.1:3128")
    socks = adapter.proxy_manager_for("socks5://127.0.0.1:1080")
    assert isinstance(http, ProxyManager) and isinstance(socks, SOCKSProxyManager)
    assert http.pool_classes_by_scheme == adapter.poolmanager.pool_classes_by_scheme
    assert http.pool_classes_by_scheme["http"].__name__ == "AnnouncingHTTPConnectionPool"
    assert socks.pool_classes_by_scheme == SOCKSProxyManager.pool_classes_by_scheme
    adapter.close()


def test_a_request_that_fails_leaves_no_reference_cycle_of_the_adapters() -> None:
    """Every domain refused: the caller gets ``AllDomainsFailed``, and refcounting frees the
    request's lane and exchange. The httpx error the inner transport raised for each
    attempt, kept in a local of the frame its traceback holds, was a cycle with that frame,
    and through it with the request's, in an outage for every request (urllib3 leaves its
    own connect error on a cycle, as without failover: not counted)."""
    from pytest_failover._exchange import Exchange, Lane

    from .garbage import left_for_the_collector

    dead = [f"http://127.0.0.1:{closed_port()}" for _ in range(2)]
    session = requests.Session()
    session.mount("http://", FailoverAdapter([Pool("api", dead)], fast(breaker_threshold=10**6, retry_budget=None)))

    def run() -> None:
        for _ in range(3):
            with pytest.raises(AllDomainsFailed):
                session.get(dead[0] + "/x")

    left = left_for_the_collector(run, (Exchange, Lane))
    session.close()
    assert left == []


def test_a_hedged_request_whose_first_attempt_fails_leaves_no_reference_cycle(servers: Servers) -> None:
    """The adapter's race sends from its threads (its sockets cannot be cut from here) and
    reads each attempt's end from its future: the first attempt's refusal, raised again in
    the waiting frame, held that frame through its traceback, and with it the race and the
    exchange, a cycle for every hedgeable request that failed over."""
    from pytest_failover._exchange import Exchange
    from pytest_failover._race import Race

    from .garbage import left_for_the_collector

    a = servers["a"]
    dead = f"http://127.0.0.1:{closed_port()}"
    session = requests.Session()
    policy = fast(hedging=Hedging(delay=1.0), sticky=False, breaker_threshold=100)
    session.mount("http://", FailoverAdapter([Pool("api", [dead, a.url()])], policy))

    def run() -> None:
        for _ in range(3):
            assert session.get(dead + "/x").headers["X-Served-By"] == "a"

    left = left_for_the_collector(run, (Exchange, Race))
    session.close()
    assert left == []
