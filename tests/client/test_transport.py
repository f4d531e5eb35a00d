"""The transports end to end over real loopback sockets, sync and async alike."""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import trustme

from pytest_failover import (
    ControlDocument,
    ControlError,
    ExponentialBackoff,
    FailoverError,
    FailoverResult,
    FailoverTransport,
    Policy,
    Pool,
)

from .frontends import View, http_of
from .servers import LoopbackServer, closed_port

Servers = dict[str, LoopbackServer]


def fast(**overrides: Any) -> Policy:
    values: dict[str, Any] = {
        "schedule": ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
        "attempt_timeout": 2.0,
        "deadline": 5.0,
    }
    values.update(overrides)
    return Policy(**values)


def info(response: View) -> FailoverResult:
    result = response.failover
    assert isinstance(result, FailoverResult)
    return result


def test_dns_failure_of_the_primary_fails_over_to_the_backup(make_client: Any, servers: Servers) -> None:
    """A real resolution failure of the primary's hostname moves the request."""
    b = servers["b"]
    primary = f"http://primary.invalid:{b.port}"
    client = make_client([Pool("api", [primary, b.url()])], fast())
    response = client.request("GET", f"{primary}/v1/rooms?page=2")
    assert response.status_code == 200 and response.headers["x-served-by"] == "b"
    assert [(a.domain, a.error_type, a.sent) for a in info(response).attempts] == [
        (primary, "dns_error", False),
        (b.url(), None, True),
    ]
    assert b.seen[0][1] == "/v1/rooms?page=2"
    assert b.seen[0][2]["Host"] == f"127.0.0.1:{b.port}"


def test_refused_primary_fails_over(make_client: Any, servers: Servers) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    client = make_client([Pool("api", [dead, servers["a"].url()])], fast())
    response = client.request("GET", dead + "/x")
    assert response.headers["x-served-by"] == "a"
    assert info(response).attempts[0].error_type == "connection_refused"


def test_read_timeout_moves_a_get_to_the_backup(make_client: Any, servers: Servers) -> None:
    a, b = servers["a"], servers["b"]
    a.set(delay=2.0)
    # (the backup's answer has the same time: 0.5 s leaves room for a loaded machine's)
    client = make_client([Pool("api", [a.url(), b.url()])], fast(attempt_timeout=0.5))
    response = client.request("GET", a.url() + "/slow")
    assert response.headers["x-served-by"] == "b"
    assert info(response).attempts[0].error_type == "read_timeout"


def test_reset_mid_response_retries_get_but_never_resends_post(make_client: Any, servers: Servers) -> None:
    """A POST without an idempotency key reaches exactly one domain exactly once."""
    a, b = servers["a"], servers["b"]
    a.set(reset=True)
    client = make_client([Pool("api", [a.url(), b.url()])], fast(sticky=False))
    assert client.request("GET", a.url() + "/r").headers["x-served-by"] == "b"
    with pytest.raises(client.errors.AllDomainsFailed) as caught:
        client.request("POST", a.url() + "/orders", content=b'{"n": 1}')
    assert caught.value.reason == "not_retryable"
    assert a.counts["POST"] == 1 and b.counts["POST"] == 0
    # with an idempotency key it is safe to send it elsewhere
    response = client.request("POST", a.url() + "/orders", content=b"{}", headers={"Idempotency-Key": "k"})
    assert response.headers["x-served-by"] == "b"


def test_streamed_upload_is_never_resent_but_the_failure_moves_the_pool(
    make_client: Any, servers: Servers
) -> None:
    a, b = servers["a"], servers["b"]
    a.set(reset=True)
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    with pytest.raises(client.errors.AllDomainsFailed, match="not_retryable"):
        client.request("PUT", a.url() + "/upload", content=client.stream_body([b"chunk-1", b"chunk-2"]))
    assert a.counts["PUT"] == 1 and b.counts["PUT"] == 0
    # the next request goes elsewhere: the primary failed recently
    assert client.request("GET", a.url() + "/next").headers["x-served-by"] == "b"


def test_streamed_upload_is_sent_to_the_backup_when_no_byte_left(make_client: Any, servers: Servers) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    b = servers["b"]
    client = make_client([Pool("api", [dead, b.url()])], fast())
    response = client.request("POST", dead + "/u", content=client.stream_body([b"abc"]))
    assert response.headers["x-served-by"] == "b" and b.seen[0][3] == b"abc"


def test_final_retryable_status_is_returned_with_every_attempt(make_client: Any, servers: Servers) -> None:
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    b.set(status=502)
    client = make_client([Pool("api", [a.url(), b.url()])], fast(schedule=ExponentialBackoff(base=0.001, max_attempts=2)))
    response = client.request("GET", a.url() + "/x")
    assert response.status_code == 502
    assert response.json() == {"ok": True}  # the body is still readable
    assert [r.status for r in info(response).attempts] == [503, 502]
    assert info(response).outcome == "failure"


def test_4xx_is_returned_at_once(make_client: Any, servers: Servers) -> None:
    a = servers["a"]
    a.set(status=404)
    client = make_client([Pool("api", [a.url(), servers["b"].url()])], fast())
    assert client.request("GET", a.url() + "/missing").status_code == 404
    assert a.total == 1 and servers["b"].total == 0


def test_retry_after_on_429_is_honoured(make_client: Any, servers: Servers) -> None:
    a, b = servers["a"], servers["b"]
    a.set(status=429, headers={"Retry-After": "1"})
    client = make_client([Pool("api", [a.url(), b.url()])], fast(retry_after_cap=0.05))
    response = client.request("GET", a.url() + "/x")
    assert response.headers["x-served-by"] == "b"
    assert info(response).attempts[0].status == 429


def test_untrusted_certificate_fails_over_to_a_trusted_backup(
    make_client: Any, servers: Servers, ca: trustme.CA
) -> None:
    rogue, good = servers["rogue"], servers["tls"]
    client = make_client([Pool("api", [rogue.url("localhost"), good.url("localhost")])], fast(), trust=ca)
    response = client.request("GET", rogue.url("localhost") + "/secure")
    assert response.headers["x-served-by"] == "tls"
    assert info(response).attempts[0].error_type == "server_certificate_invalid"
    assert rogue.total == 0  # the handshake failed before any request byte


def test_a_request_pinned_to_an_open_domain_fails_fast_without_a_network_call(
    make_client: Any, servers: Servers
) -> None:
    """An open breaker refuses a pinned request before any byte leaves."""
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    client = make_client(
        [Pool("api", [a.url(), b.url()])],
        fast(breaker_threshold=1, schedule=ExponentialBackoff(base=0.001, max_attempts=2)),
    )
    client.request("GET", a.url() + "/x")
    before = a.total
    with pytest.raises(client.errors.CircuitOpenError) as caught:
        client.request("GET", a.url() + "/x", extensions={"failover": {"domain": a.url()}})
    assert a.total == before
    assert caught.value.attempts == ()
    assert isinstance(caught.value, (httpx.TransportError, *client.transport_errors))
    state = client.transport.state().pools["api"]
    assert state.domain(a.url()).breaker == "open" and state.can_request


def test_every_domain_open_one_early_probe_each_and_the_rest_wait_for_them(servers: Servers) -> None:
    """With every breaker open, each domain gets one probe in flight; a request that
    arrives meanwhile sends nothing until a probe answers, then follows it."""
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    b.set(status=503)
    transport = FailoverTransport(
        [Pool("api", [a.url(), b.url()])],
        fast(breaker_threshold=1, breaker_cooldown=2, schedule=ExponentialBackoff(base=0.001, max_attempts=2)),
    )
    with httpx.Client(transport=transport) as client:
        assert client.get(a.url() + "/x").status_code == 503  # both open now
        time.sleep(0.25)  # an open domain rests a tenth of its cooldown before an early probe
        a.set(status=200, delay=0.4)
        b.set(status=200, delay=0.4)
        before = a.total + b.total
        results: list[int] = []
        probes = [threading.Thread(target=lambda: results.append(client.get(a.url() + "/x").status_code)) for _ in range(2)]
        for thread in probes:
            thread.start()
        deadline = time.monotonic() + 5
        while a.total + b.total < before + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        waited = client.get(a.url() + "/x")
        assert waited.status_code == 200 and time.monotonic() - started >= 0.2  # it waited for a probe
        assert len(waited.extensions["failover"].attempts) == 1
        for thread in probes:
            thread.join(5)
        assert results == [200, 200] and a.total + b.total == before + 3
        assert {d.breaker for d in transport.state().pools["api"].domains} == {"closed"}


def test_stale_response_served_when_every_domain_failed(make_client: Any, servers: Servers) -> None:
    a = servers["a"]
    a.set(body=b'{"rooms": [1, 2]}')
    client = make_client([Pool("api", [a.url()])], fast(stale_on_failure=True))
    assert client.request("GET", a.url() + "/rooms?x=1").json() == {"rooms": [1, 2]}
    a.set(status=500)  # a final 500 is RFC 5861's error too: the stored copy answers
    assert client.request("GET", a.url() + "/rooms?x=1").headers["X-Failover-Stale"] == "1"
    a.set(reset=True)
    with pytest.raises(client.errors.FailoverError):  # nothing stale to serve for this URL
        client.request("GET", a.url() + "/never-seen")
    a.set(reset=True)
    stale = client.request("GET", a.url() + "/rooms?x=1")
    assert stale.headers["X-Failover-Stale"] == "1" and stale.json() == {"rooms": [1, 2]}
    assert info(stale).stale


def test_fallback_callable_answers_instead_of_an_error(make_client: Any) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    seen: list[str] = []

    def fallback(request: Any, error: Exception) -> Any:
        seen.append(type(error).__name__)
        return http_of(request).Response(200, json={"offline": True})  # in the front-end's library

    client = make_client([Pool("api", [dead])], fast(), fallback=fallback)
    response = client.request("GET", dead + "/x")
    assert response.json() == {"offline": True} and info(response).fallback
    assert seen == ["AllDomainsFailed"]


def test_opt_out_and_pinning(make_client: Any, servers: Servers) -> None:
    a, b = servers["a"], servers["b"]
    a.set(status=503)
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    assert client.request("GET", a.url(), extensions={"failover": {"enabled": False}}).status_code == 503
    pinned = client.request("GET", a.url() + "/p", extensions={"failover": {"domain": a.url()}})
    assert pinned.status_code == 503 and b.total == 0
    other = client.request("GET", "http://elsewhere.invalid/x", extensions={"failover": {"pool": "api"}})
    assert other.headers["x-served-by"] == "b" and b.seen[-1][1] == "/x"


def test_hosts_outside_every_pool_pass_through(make_client: Any, servers: Servers) -> None:
    c = servers["c"]
    client = make_client([Pool("api", ["http://api.invalid"])], fast())
    response = client.request("GET", c.url() + "/direct")
    assert response.headers["x-served-by"] == "c" and response.failover is None


def test_deadline_bounds_the_whole_call(make_client: Any, servers: Servers) -> None:
    a, b = servers["a"], servers["b"]
    a.set(delay=2)
    b.set(delay=2)
    client = make_client([Pool("api", [a.url(), b.url()])], fast(deadline=0.5, attempt_timeout=5))
    with pytest.raises(client.errors.AllDomainsFailed) as caught:
        client.request("GET", a.url())
    assert sum(r.duration for r in caught.value.attempts) < 0.9


def test_control_document_disables_a_domain_and_a_bad_one_changes_nothing(
    make_client: Any, servers: Servers
) -> None:
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast())
    key = b"k" * 32
    doc = ControlDocument.parse(
        ControlDocument.sign(version=3, pools={"api": [a.url()]}, expires_in=60, hmac_key=key), hmac_key=key
    )
    client.transport.apply_control(doc)
    assert client.request("GET", a.url() + "/x").headers["x-served-by"] == "b"
    assert not client.transport.state().pools["api"].domain(a.url()).enabled
    every = ControlDocument.parse(
        ControlDocument.sign(version=4, pools={"api": [a.url(), b.url()]}, expires_in=60, hmac_key=key),
        hmac_key=key,
    )
    with pytest.raises(ControlError):
        client.transport.apply_control(every)
    older = ControlDocument.parse(
        ControlDocument.sign(version=2, pools={"api": []}, expires_in=60, hmac_key=key), hmac_key=key
    )
    with pytest.raises(ControlError):
        client.transport.apply_control(older)
    state = client.transport.state()
    assert state.control_version == 3 and not state.pools["api"].domain(a.url()).enabled


def test_sticky_domain_survives_a_restart_and_a_corrupt_file_is_ignored(
    make_client: Any, servers: Servers, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = servers["a"], servers["b"]
    path = tmp_path / "sticky.json"
    a.set(status=503)
    first = make_client([Pool("api", [a.url(), b.url()])], fast(sticky_path=str(path)))
    first.request("GET", a.url())
    deadline = time.monotonic() + 5  # an async front-end's request hands the write to a thread
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert json.loads(path.read_text())["pools"] == {"api": b.url()}
    a.set()
    a.reset_records()
    second = make_client([Pool("api", [a.url(), b.url()])], fast(sticky_path=str(path)))
    assert second.request("GET", a.url()).headers["x-served-by"] == "b"
    assert a.total == 0
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="pytest_failover"):
        third = make_client([Pool("api", [a.url(), b.url()])], fast(sticky_path=str(path)))
    assert "ignoring sticky-domain file" in caplog.text
    assert third.request("GET", a.url()).headers["x-served-by"] == "a"


def test_retries_are_logged_without_query_or_credentials(
    make_client: Any, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    client = make_client([Pool("api", [dead, servers["a"].url()])], fast())
    with caplog.at_level(logging.WARNING, logger="pytest_failover"):
        client.request("GET", dead + "/v1?token=secret", headers={"Authorization": "Bearer hunter2"})
    [record] = [r for r in caplog.records if r.name == "pytest_failover"]
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "attempt 1" in text and "connection_refused" in text and dead in text
    assert "secret" not in text and "hunter2" not in text


def test_bad_request_options_are_clear_errors(make_client: Any, servers: Servers) -> None:
    a = servers["a"]
    client = make_client([Pool("api", [a.url()])], fast())
    with pytest.raises(ValueError, match="unknown option"):
        client.request("GET", a.url(), extensions={"failover": {"pinned": a.url()}})
    assert a.total == 0


def test_application_error_predicate_is_final_and_not_held_against_the_domain(
    make_client: Any, servers: Servers
) -> None:
    """A JSON ``code != 0`` answer is returned as is, not retried, breaker untouched."""
    a, b = servers["a"], servers["b"]
    a.set(body=b'{"code": 7, "message": "room is full"}')
    client = make_client(
        [Pool("api", [a.url(), b.url()])],
        fast(is_app_error=lambda r: r.json().get("code", 0) != 0, breaker_threshold=1),
    )
    response = client.request("GET", a.url() + "/rooms/1/join")
    assert response.json()["code"] == 7 and b.total == 0
    assert info(response).attempts[0].error_type == "app_error"
    assert client.transport.state().pools["api"].domain(a.url()).breaker == "closed"


def test_connection_broken_mid_body_fails_over_for_retryable_requests(
    make_client: Any, servers: Servers
) -> None:
    """The body of a retryable request is read inside the transport, so a reset
    after the headers moves the request instead of reaching the caller."""
    a, b = servers["a"], servers["b"]
    a.set(truncate=True)
    client = make_client([Pool("api", [a.url(), b.url()])], fast(sticky=False))
    response = client.request("GET", a.url() + "/big")
    assert response.headers["x-served-by"] == "b"
    assert info(response).attempts[0].error_type in ("remote_protocol_error", "read_error", "connection_reset")
    # a POST that cannot be re-sent is handed over unread: the caller sees the break
    with pytest.raises(client.transport_errors):
        client.request("POST", a.url() + "/orders", content=b"{}")
    assert b.counts["POST"] == 0


def test_a_post_not_resent_has_only_a_body_it_can_read_whole_read_in_the_transport(
    make_client: Any, servers: Servers
) -> None:
    """A request the pool must not re-send has its body read inside the transport only when
    it can be read whole (a declared length, not encoded), so that the client need not read
    it again: a reset there is the attempt's failure, not re-sent, carried by the failover
    error with its attempt. An encoded body is handed over unread: its break reaches the
    caller as the client's own error (aiohttp decodes a body itself, so what its session
    hands over is plain, and read whole)."""
    a, b = servers["a"], servers["b"]
    client = make_client([Pool("api", [a.url(), b.url()])], fast(sticky=False))
    a.set(truncate=True)
    with pytest.raises(client.transport_errors) as whole:
        client.request("POST", a.url() + "/orders", content=b"{}")
    [attempt] = whole.value.attempts  # a failover error's (the harness types it Any)
    assert attempt.domain == a.url() and attempt.sent
    a.set(truncate=True, headers={"Content-Encoding": "identity"})
    with pytest.raises(client.transport_errors) as unread:
        client.request("POST", a.url() + "/orders", content=b"{}")
    assert hasattr(unread.value, "attempts") == (client.kind == "aiohttp")  # else the client's own error
    assert b.counts["POST"] == 0


@pytest.mark.parametrize("content_type", ["text/event-stream", "Text/Event-Stream; charset=utf-8"])
def test_an_event_stream_is_handed_over_unread_and_never_replayed(
    make_client: Any, servers: Servers, content_type: str
) -> None:
    """Server-sent events reach the caller as they come, even for a request that may be
    re-sent: a break mid-stream is the caller's error, and no other domain is asked."""
    a, b = servers["a"], servers["b"]
    a.set(truncate=True, headers={"content-type": content_type})
    client = make_client([Pool("api", [a.url(), b.url()])], fast(sticky=False))
    with pytest.raises(client.transport_errors):
        client.request("GET", a.url() + "/events")
    with pytest.raises(client.transport_errors):
        client.request("POST", a.url() + "/v1/chat", content=b"{}", headers={"Idempotency-Key": "k"})
    assert b.total == 0
    a.set(truncate=True, headers={"content-type": "application/json"})  # the rule's other side
    assert client.request("GET", a.url() + "/rooms").headers["x-served-by"] == "b"


def test_read_body_off_hands_the_stream_over_unread(make_client: Any, servers: Servers) -> None:
    a, b = servers["a"], servers["b"]
    a.set(truncate=True)
    client = make_client([Pool("api", [a.url(), b.url()])], fast(read_body=False))
    with pytest.raises(client.transport_errors):
        client.request("GET", a.url() + "/big")
    assert b.total == 0


def test_stale_cache_keeps_no_body_larger_than_its_limit(make_client: Any, servers: Servers) -> None:
    a = servers["a"]
    a.set(body=b'{"rooms": "' + b"x" * 100 + b'"}')
    client = make_client([Pool("api", [a.url()])], fast(stale_on_failure=True, stale_max_bytes=50))
    assert client.request("GET", a.url() + "/big").status_code == 200
    a.set(reset=True)
    with pytest.raises(client.errors.FailoverError):
        client.request("GET", a.url() + "/big")


def test_a_cancelled_request_counts_nothing_against_the_domain(servers: Servers) -> None:
    """Caller cancellation is not a failure of the domain (semconv: not an error)."""
    import asyncio

    from pytest_failover import AsyncFailoverTransport

    a = servers["a"]
    a.set(delay=1.0)
    transport = AsyncFailoverTransport([Pool("api", [a.url()])], fast(breaker_threshold=1))

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.get(a.url() + "/slow"), 0.1)

    asyncio.run(main())
    [domain] = transport.state().pools["api"].domains
    assert (domain.breaker, domain.consecutive_failures, domain.can_request) == ("closed", 0, True)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_elapsed_is_set_however_the_response_was_made(kind: str, servers: Servers) -> None:
    """``response.elapsed`` works as with bare httpx: for a body the transport read
    (sized, chunked, looked at by the app-error check), one handed over unread, a
    stale copy and a fallback's response."""
    import asyncio

    from pytest_failover import AsyncFailoverTransport

    a = servers["a"]
    dead = f"http://127.0.0.1:{closed_port()}"

    def fallback(request: httpx.Request, error: FailoverError) -> httpx.Response:
        return httpx.Response(200, json={"from": "fallback"})

    cases: list[tuple[str, list[Pool], Policy, dict[str, Any]]] = [
        ("sized", [Pool("api", [a.url()])], fast(), {}),
        ("chunked", [Pool("api", [a.url()])], fast(), {"chunked": True}),
        ("app check", [Pool("api", [a.url()])], fast(is_app_error=lambda r: r.json().get("ok") is not True), {}),
        ("unread", [Pool("api", [a.url()])], fast(read_body=False), {}),
        ("fallback", [Pool("api", [dead])], fast(), {}),
    ]
    elapsed: dict[str, datetime.timedelta] = {}

    async def run_async() -> None:
        for name, pools, policy, behaviour in cases:
            a.set(**behaviour)
            async with httpx.AsyncClient(transport=AsyncFailoverTransport(pools, policy, fallback=fallback)) as client:
                elapsed[name] = (await client.get(pools[0].domains[0].url + "/x")).elapsed
        a.set()
        async with httpx.AsyncClient(transport=AsyncFailoverTransport([Pool("api", [a.url()])], fast(stale_on_failure=True))) as client:
            await client.get(a.url() + "/x")
            a.set(reset=True)
            stale = await client.get(a.url() + "/x")
            assert stale.extensions["failover"].outcome == "stale"
            elapsed["stale"] = stale.elapsed

    if kind == "async":
        asyncio.run(run_async())
    else:
        for name, pools, policy, behaviour in cases:
            a.set(**behaviour)
            with httpx.Client(transport=FailoverTransport(pools, policy, fallback=fallback)) as client:
                elapsed[name] = client.get(pools[0].domains[0].url + "/x").elapsed
        a.set()
        with httpx.Client(transport=FailoverTransport([Pool("api", [a.url()])], fast(stale_on_failure=True))) as client:
            client.get(a.url() + "/x")
            a.set(reset=True)
            stale = client.get(a.url() + "/x")
            assert stale.extensions["failover"].outcome == "stale"
            elapsed["stale"] = stale.elapsed
    assert sorted(elapsed) == ["app check", "chunked", "fallback", "sized", "stale", "unread"]
    assert all(datetime.timedelta(0) < value < datetime.timedelta(seconds=5) for value in elapsed.values()), elapsed


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("looked_at", [False, True])
def test_a_body_read_by_the_transport_still_streams_raw(
    kind: str, chunked: bool, looked_at: bool, servers: Servers
) -> None:
    """The transport reads a small body before the caller sees it, yet the caller gets
    what bare httpx gives from ``client.stream``: the raw bytes (still compressed),
    the decoded content, and ``elapsed``; also when the app-error check looked at it."""
    import asyncio
    import gzip

    from pytest_failover import AsyncFailoverTransport

    a = servers["a"]
    text = b'{"rooms": ["a", "b"]}'
    a.set(body=gzip.compress(text), headers={"Content-Encoding": "gzip"}, chunked=chunked)
    pools = [Pool("api", [a.url()])]
    policy = fast(is_app_error=lambda r: "rooms" not in r.json()) if looked_at else fast()
    if kind == "sync":
        with httpx.Client(transport=FailoverTransport(pools, policy)) as client:
            with client.stream("GET", a.url() + "/rooms") as response:
                raw = b"".join(response.iter_raw())
            elapsed = response.elapsed
            plain = client.get(a.url() + "/rooms")
    else:

        async def main() -> tuple[bytes, datetime.timedelta, httpx.Response]:
            async with httpx.AsyncClient(transport=AsyncFailoverTransport(pools, policy)) as client:
                async with client.stream("GET", a.url() + "/rooms") as response:
                    raw = b"".join([chunk async for chunk in response.aiter_raw()])
                return raw, response.elapsed, await client.get(a.url() + "/rooms")

        raw, elapsed, plain = asyncio.run(main())
    assert gzip.decompress(raw) == text and elapsed > datetime.timedelta(0)
    assert plain.content == text and plain.extensions["failover"].outcome == "success"
    if not looked_at:  # read and closed by the client, as bare httpx's (a body looked at is read already)
        assert plain.is_stream_consumed and plain.is_closed


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_plain_body_read_whole_reaches_the_caller_as_the_clients_own_read_leaves_it(
    kind: str, http: ModuleType, servers: Servers
) -> None:
    """A body of declared length and no ``Content-Encoding``, which the transport reads
    whole, is handed over as the response's content (``Lane.read_whole``), so that the
    client's read finds it instead of reading the bytes again: the caller sees what bare
    httpx (httpx2) gives, the content, the bytes downloaded and ``elapsed``; streamed,
    the raw bytes (read to their end, which closes the response, as httpx's do) and the
    content in chunks of the size asked for. (That the client's read is skipped is held by the count of every
    frame's opcodes, ``tests/benchmarks/test_opcodes.py``.)"""
    import asyncio

    if http is httpx:
        from pytest_failover import AsyncFailoverTransport, FailoverTransport
    else:
        from pytest_failover.httpx2 import AsyncFailoverTransport, FailoverTransport  # type: ignore[assignment]  # the same API over httpx2

    a = servers["a"]
    body = b'{"rooms": ["a", "b"]}'
    a.set(body=body)
    pools, url = [Pool("api", [a.url()])], a.url() + "/rooms"
    if kind == "sync":
        with http.Client(transport=FailoverTransport(pools, fast())) as client:
            got = client.get(url)
            with client.stream("GET", url) as streamed:
                raw = b"".join(streamed.iter_raw(5))
            with client.stream("GET", url) as chunked:
                chunks = list(chunked.iter_bytes(4))
    else:

        async def main() -> tuple[Any, bytes, Any, list[bytes]]:
            async with http.AsyncClient(transport=AsyncFailoverTransport(pools, fast())) as client:
                got = await client.get(url)
                async with client.stream("GET", url) as streamed:
                    raw = b"".join([chunk async for chunk in streamed.aiter_raw(5)])
                async with client.stream("GET", url) as chunked:
                    chunks = [chunk async for chunk in chunked.aiter_bytes(4)]
            return got, raw, streamed, chunks

        got, raw, streamed, chunks = asyncio.run(main())
    assert got.extensions["failover"].outcome == "success"
    assert got.content == body and got.json() == {"rooms": ["a", "b"]}
    assert got.num_bytes_downloaded == len(body)
    assert datetime.timedelta(0) < got.elapsed < datetime.timedelta(seconds=5)
    assert raw == body and streamed.is_closed and streamed.is_stream_consumed
    assert b"".join(chunks) == body and {len(chunk) for chunk in chunks[:-1]} == {4}


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_request_that_fails_leaves_no_reference_cycle(side: str) -> None:
    """Every domain refused: the caller gets ``AllDomainsFailed`` and, once it lets go
    of it, refcounting frees the rest. The error kept in a local of the frame that
    raised it, and the last attempt's error kept by the exchange, were two cycles
    through their tracebacks: 121 objects a failed request for the cyclic GC, and in an
    outage every request fails."""
    import asyncio

    from pytest_failover import AsyncFailoverTransport
    from pytest_failover._exchange import Exchange

    from .garbage import left_for_the_collector

    dead = [f"http://127.0.0.1:{closed_port()}" for _ in range(2)]
    pools = [Pool("api", dead)]
    policy = fast(breaker_threshold=10**6, retry_budget=None)
    sync_client = httpx.Client(transport=FailoverTransport(pools, policy))

    def run_sync() -> None:
        for _ in range(3):
            with pytest.raises(FailoverError):
                sync_client.get(dead[0] + "/x")

    async def run_async() -> None:
        async with httpx.AsyncClient(transport=AsyncFailoverTransport(pools, policy)) as client:
            for _ in range(3):
                with pytest.raises(FailoverError):
                    await client.get(dead[0] + "/x")

    run = run_sync if side == "sync" else lambda: asyncio.run(run_async())
    left = left_for_the_collector(run, (Exchange, BaseException))
    sync_client.close()
    assert left == []
