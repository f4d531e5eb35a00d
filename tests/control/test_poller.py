"""ControlPoller against real loopback servers: good documents apply, bad ones change nothing, no poll outlives its timeout."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from client.forking import (
    in_child,  # tests/client: a package on the rootdir path, as tests/control is
)

from pytest_failover._policy import ExponentialBackoff
from pytest_failover.control import CONTENT_TYPE, MAX_DOCUMENT_BYTES, ControlDocument, ControlPoller
from pytest_failover.control import _poller as poller_module

from .conftest import (
    ED_PUBLIC,
    HMAC_KEY,
    HMAC_SECRET,
    Clock,
    Served,
    Signer,
    Target,
    run_server,
    trickle_server,
)

Poll = Callable[[ControlPoller], bool]

#: one TLS context for every poller: building one per client costs ~0.1 s (never used on http://)
TLS = ssl.create_default_context()


def _poll_sync(poller: ControlPoller) -> bool:
    return poller.poll_once()


def _poll_async(poller: ControlPoller) -> bool:
    async def once() -> bool:
        try:
            return await poller.poll_once_async()
        finally:
            await poller.aclose()

    return asyncio.run(once())


@pytest.fixture(params=[_poll_sync, _poll_async], ids=["sync", "async"])
def poll(request: pytest.FixtureRequest) -> Poll:
    """Each test body runs once through poll_once and once through poll_once_async."""
    return request.param  # type: ignore[no-any-return]  # pytest's param is Any


def make_poller(url: str, target: Any, signer: Signer, clock: Clock, **kwargs: Any) -> ControlPoller:
    """A poller on ``url`` reading with ``signer``'s key and no jitter."""
    kwargs.setdefault("interval", 1.0)
    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("verify", TLS)
    kwargs.setdefault("rng", lambda: 0.0)
    return ControlPoller(url, target, key=signer.reading, clock=clock, **kwargs)


def test_good_document_is_applied_once(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """A verified newer document reaches the target; serving it again applies nothing more."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}))
    poller = make_poller(served.url, target, signer, clock)
    assert poll(poller) is True
    assert target.version == 1
    assert target.disabled == {"api": frozenset({"https://api.example.com"})}
    assert poller.version == 1
    assert poller.document == target.applied[0]
    assert poll(poller) is False
    assert len(target.applied) == 1
    assert (poller.failures, poller.consecutive_failures, poller.last_error) == (0, 0, None)
    served.serve(signer.sign(version=2, pools={"api": []}))
    assert poll(poller) is True
    assert (target.version, target.disabled) == (2, {"api": frozenset()})
    assert served.requests == 3


@pytest.mark.parametrize("content_type", [CONTENT_TYPE, "application/json", "application/jwt", "text/plain"])
def test_the_body_is_judged_whatever_its_content_type(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll, content_type: str
) -> None:
    """A document served as application/jose (the agent's, RFC 7515), or as application/json by
    an older agent or a static host, is applied alike; the poller asks for application/jose first."""
    served.content_type = content_type
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}))
    assert poll(make_poller(served.url, target, signer, clock)) is True
    assert target.disabled == {"api": frozenset({"https://api.example.com"})}
    assert served.accept == "application/jose, application/jwt, application/json;q=0.5"


def tamper(raw: bytes) -> bytes:
    """Flip one character in the middle of the signature."""
    i = len(raw) - 10
    return raw[:i] + (b"A" if raw[i : i + 1] != b"A" else b"B") + raw[i + 1 :]


# each case: (what the server answers, given the signer and the clock) -> words of the warning
BAD: dict[str, Callable[[Signer, Clock], tuple[int, bytes, str]]] = {
    "tampered": lambda s, c: (200, tamper(s.sign(version=5, pools={})), "bad signature"),
    "older version": lambda s, c: (200, s.sign(version=1, pools={"pay": []}), "not newer than version 2"),
    "same version, other content": lambda s, c: (200, s.sign(version=2, pools={"pay": []}), "not newer"),
    "expired": lambda s, c: (200, s.sign(version=5, pools={}, now=c.now - 120, expires_in=60), "expired"),
    "future": lambda s, c: (200, s.sign(version=5, pools={}, now=c.now + 600), "in the future"),
    "malformed": lambda s, c: (200, b"<html>oops</html>", "malformed"),
    "trailing newline": lambda s, c: (200, s.sign(version=5, pools={}) + b"\n", "trailing newline"),
    "empty": lambda s, c: (200, b"", "malformed"),
    "unknown pool": lambda s, c: (200, s.sign(version=5, pools={"search": []}), "unknown pool 'search'"),
    "unknown domain": lambda s, c: (
        200,
        s.sign(version=5, pools={"api": ["https://evil.example.com"]}),
        "has no domain https://evil.example.com",
    ),
    "every domain disabled": lambda s, c: (
        200,
        s.sign(version=5, pools={"pay": ["https://pay.example.com", "https://pay2.example.com"]}),
        "every domain of pool 'pay'",
    ),
    "http 500": lambda s, c: (500, s.sign(version=5, pools={}), "HTTP 500"),
    "http 404": lambda s, c: (404, b"", "HTTP 404"),
    "redirect": lambda s, c: (302, b"", "HTTP 302"),
    "too large": lambda s, c: (200, b" " * (MAX_DOCUMENT_BYTES + 1), "larger than"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_document_changes_nothing(
    served: Served,
    target: Target,
    signer: Signer,
    clock: Clock,
    poll: Poll,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bad answer leaves the target and the poller's document as they were, warns and counts."""
    served.serve(signer.sign(version=2, pools={"api": ["https://api.example.com"]}))
    poller = make_poller(served.url, target, signer, clock)
    assert poll(poller) is True
    before = (target.snapshot(), poller.document)
    status, body, words = BAD[case](signer, clock)
    served.serve(body, status)
    caplog.set_level(logging.WARNING, logger="pytest_failover")
    assert poll(poller) is False
    assert poll(poller) is False
    assert (target.snapshot(), poller.document) == before
    assert poller.failures == poller.consecutive_failures == 2
    assert poller.last_error is not None
    assert words in poller.last_error
    warnings = [r for r in caplog.records if r.name == "pytest_failover" and r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert words in warnings[0].getMessage()
    assert "keeping version 2" in warnings[0].getMessage()
    assert "2 failure(s) in a row" in warnings[1].getMessage()


def test_recovers_after_failures(served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll) -> None:
    """After bad answers, the next good document applies and resets the failure streak."""
    poller = make_poller(served.url, target, signer, clock)
    served.serve(b"garbage")
    assert poll(poller) is False
    assert (target.version, poller.document) == (None, None)
    served.serve(signer.sign(version=3, pools={}))
    assert poll(poller) is True
    assert (poller.failures, poller.consecutive_failures) == (1, 0)
    assert [d.version for d in target.applied] == [3]


def test_expiry_is_judged_by_the_pollers_clock(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """The document in force stays applied when the server keeps serving it after it expired."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}, expires_in=60))
    poller = make_poller(served.url, target, signer, clock)
    assert poll(poller) is True
    clock.now += 61
    assert poll(poller) is False
    assert poller.last_error is not None and "expired" in poller.last_error
    assert target.disabled == {"api": frozenset({"https://api.example.com"})}


def test_unreachable_server(target: Target, signer: Signer, clock: Clock, poll: Poll) -> None:
    """A refused connection is a counted failure, not an exception."""
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    poller = make_poller(f"http://127.0.0.1:{port}/c.json", target, signer, clock)
    assert poll(poller) is False
    assert poller.failures == 1
    assert poller.last_error is not None and "ConnectError" in poller.last_error


def test_slow_server_times_out(served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll) -> None:
    """A server slower than the poller's timeout is a failure, bounded by that timeout."""
    served.serve(signer.sign(version=1, pools={}))
    served.delay = 3.0
    poller = make_poller(served.url, target, signer, clock, timeout=0.2)
    started = time.monotonic()
    assert poll(poller) is False
    assert time.monotonic() - started < 0.2 + 0.2
    assert poller.last_error is not None and "timed out" in poller.last_error


@pytest.mark.parametrize(("head_gap", "body_gap"), [(0.0, 0.3), (0.3, 0.0)], ids=["body", "headers"])
def test_a_trickling_server_cannot_hold_a_poll_past_its_timeout(
    target: Target, clock: Clock, poll: Poll, head_gap: float, body_gap: float
) -> None:
    """One byte every 0.3 s keeps every read short, yet the whole poll ends within timeout + 0.5 s
    (the trickle alone would take many seconds; 0.2 s of slack was too little for a timer thread
    on two cores busy with the whole suite: 1.31 s and 1.37 s in two runs)."""
    with trickle_server(head_gap=head_gap, body_gap=body_gap) as url:
        poller = ControlPoller(url, target, key=HMAC_KEY, timeout=1.0, clock=clock)
        started = time.monotonic()
        assert poll(poller) is False
        elapsed = time.monotonic() - started
        poller.stop()
    assert elapsed < 1.0 + 0.5, f"the poll took {elapsed:.2f} s"
    assert elapsed > 0.9  # it did wait for the answer while time was left
    assert poller.last_error is not None and "timed out" in poller.last_error
    assert "within 1 s" in poller.last_error


@pytest.fixture
def loopback_tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for 127.0.0.1 from a throw-away CA, and a client
    context that trusts that CA."""
    trustme = pytest.importorskip("trustme")  # part of the dev install
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    return server_tls, trusting


def test_a_trickle_over_tls_is_cut_too(
    target: Target, clock: Clock, poll: Poll, loopback_tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """The deadline reaches the TLS socket as well as the plain one: each byte its own TLS record."""
    server_tls, trusting = loopback_tls
    with trickle_server(body_gap=0.3, tls=server_tls) as url:
        poller = ControlPoller(url, target, key=HMAC_KEY, timeout=1.0, clock=clock, verify=trusting)
        started = time.monotonic()
        assert poll(poller) is False
        elapsed = time.monotonic() - started
        poller.stop()
    assert elapsed < 1.0 + 0.2, f"the poll took {elapsed:.2f} s"
    assert poller.last_error is not None and "timed out" in poller.last_error
    assert "HTTP 200" in poller.last_error  # the headers came through TLS, the body did not


def test_a_chunked_body_over_the_cap_is_cut(target: Target, clock: Clock, poll: Poll) -> None:
    """Without Content-Length, the body is still read no further than the size cap."""
    sent = threading.Event()

    def endless(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
            try:
                for _ in range(1000):  # 16 MiB at most
                    conn.sendall(chunk)
            except OSError:
                sent.set()  # the client hung up

    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/c.json"
        server = threading.Thread(target=lambda: endless(listener.accept()[0]), daemon=True)
        server.start()
        poller = ControlPoller(url, target, key=HMAC_KEY, timeout=5.0, clock=clock)
        assert poll(poller) is False
        server.join(5)
    assert poller.last_error is not None and f"larger than {MAX_DOCUMENT_BYTES} bytes" in poller.last_error
    assert sent.is_set()


def test_target_bug_does_not_kill_the_poller(served: Served, signer: Signer, clock: Clock, poll: Poll) -> None:
    """An unexpected exception from apply_control is logged and counted like a rejection."""

    class Broken:
        def apply_control(self, doc: ControlDocument) -> None:
            raise RuntimeError("boom")

    served.serve(signer.sign(version=1, pools={}))
    poller = make_poller(served.url, Broken(), signer, clock)
    assert poll(poller) is False
    assert poller.document is None
    assert poller.last_error == "RuntimeError: boom"


def test_log_lines_hide_credentials_and_query(
    served: Served, target: Target, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The control URL appears in warnings without its token or password."""
    served.serve(b"bad")
    url = served.url.replace("http://", "http://user:hunter2@") + "?token=s3cret"
    poller = ControlPoller(url, target, hmac_key=HMAC_SECRET, clock=clock, verify=TLS)
    caplog.set_level(logging.WARNING, logger="pytest_failover")
    assert poller.poll_once() is False
    message = caplog.records[-1].getMessage()
    assert "/control.json" in message
    assert "s3cret" not in message
    assert "hunter2" not in message


def test_https_with_a_private_ca(
    target: Target, signer: Signer, clock: Clock, loopback_tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """``verify`` reaches the poller's own client: a trusted CA works, an unknown one is a failure."""
    server_tls, trusting = loopback_tls
    with run_server(server_tls) as served:
        served.serve(signer.sign(version=1, pools={}))
        stranger = make_poller(served.url, target, signer, clock, verify=TLS)
        assert stranger.poll_once() is False
        assert stranger.last_error is not None and "ConnectError" in stranger.last_error
        assert target.version is None
        trusted = make_poller(served.url, target, signer, clock, verify=trusting)
        assert trusted.poll_once() is True
        assert [d.version for d in target.applied] == [1]
        stranger.stop()
        trusted.stop()


# ------------------------------------------------------------------ backoff


def test_backoff_is_the_policy_exponential_backoff(target: Target) -> None:
    """next_delay is interval plus ExponentialBackoff's full-jitter delay, capped at max_backoff."""
    draws = iter([0.5, 0.25, 0.999, 0.0])
    poller = ControlPoller(
        "http://127.0.0.1:1/c", target, key=HMAC_KEY, interval=10.0, max_backoff=60.0, rng=lambda: next(draws)
    )
    reference = ExponentialBackoff(base=10.0, cap=60.0)
    assert poller.next_delay() == 10.0  # no failure: the interval, no draw
    expected: list[float] = []
    for failures, draw in [(1, 0.5), (2, 0.25), (3, 0.999), (500, 0.0)]:
        poller.consecutive_failures = failures
        expected.append(min(10.0 + reference.delay(min(failures, 64), lambda: draw), 60.0))  # noqa: B023  # used at once
        assert poller.next_delay() == pytest.approx(expected[-1])
    assert expected == pytest.approx([15.0, 15.0, 49.96, 10.0])
    assert not hasattr(poller_module, "poll_delay")


def test_backoff_never_polls_faster_than_the_interval(target: Target) -> None:
    """A max_backoff below the interval does not make polls more frequent, and no streak overflows."""
    poller = ControlPoller("http://127.0.0.1:1/c", target, key=HMAC_KEY, interval=30.0, max_backoff=5.0, rng=lambda: 0.99)
    for failures in (0, 1, 4, 10**9):
        poller.consecutive_failures = failures
        assert poller.next_delay() == 30.0


def test_poller_backs_off_and_resets(served: Served, target: Target, signer: Signer, clock: Clock) -> None:
    """next_delay grows with consecutive failures, is bounded, and returns to the interval on success."""
    poller = make_poller(served.url, target, signer, clock, interval=1.0, max_backoff=4.0, rng=lambda: 0.999)
    served.serve(b"bad")
    delays = []
    for _ in range(5):
        poller.poll_once()
        delays.append(poller.next_delay())
    assert delays == pytest.approx([1.999, 2.998, 4.0, 4.0, 4.0])
    served.serve(signer.sign(version=1, pools={}))
    assert poller.poll_once() is True
    assert poller.next_delay() == 1.0


def test_constructor_checks_its_arguments(target: Target) -> None:
    """Bad URLs, targets, intervals and missing keys are usage errors at construction."""
    with pytest.raises(ValueError, match="scheme"):
        ControlPoller("ftp://127.0.0.1/c", target, key=HMAC_KEY)
    with pytest.raises(TypeError, match="apply_control"):
        ControlPoller("http://127.0.0.1/c", object(), key=HMAC_KEY)  # type: ignore[arg-type]  # the point
    with pytest.raises(ValueError, match="interval"):
        ControlPoller("http://127.0.0.1/c", target, key=HMAC_KEY, interval=0)
    with pytest.raises(ValueError, match="timeout"):
        ControlPoller("http://127.0.0.1/c", target, key=HMAC_KEY, timeout=float("inf"))
    with pytest.raises(TypeError, match="max_skew"):
        ControlPoller("http://127.0.0.1/c", target, key=HMAC_KEY, max_skew=True)
    with pytest.raises(ValueError, match="pass key= or hmac_key="):
        ControlPoller("http://127.0.0.1/c", target)
    assert ControlPoller("http://127.0.0.1/c", target, key=[ED_PUBLIC, HMAC_KEY]).version is None


# ------------------------------------------------------------------ one client each, under one lock


def test_both_shells_share_the_client_lock(target: Target) -> None:
    """Sync and async clients are made once each under the same lock, however many threads ask."""
    poller = ControlPoller("http://127.0.0.1:1/c", target, key=HMAC_KEY)
    made: list[object] = []
    barrier = threading.Barrier(8)

    def grab() -> None:
        barrier.wait()
        made.append(poller._sync_client())
        made.append(poller._async_client_())

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len({id(c) for c in made}) == 2
    assert isinstance(poller._client, httpx.Client) and isinstance(poller._async_client, httpx.AsyncClient)
    poller.stop()
    asyncio.run(poller.aclose())
    assert poller._client is None and poller._async_client is None


# ------------------------------------------------------------------ background loops


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Return once ``condition()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_thread_polls_until_stopped(served: Served, target: Target, signer: Signer, clock: Clock) -> None:
    """start() polls at once and on every interval; stop() ends the thread and its requests."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}))
    poller = make_poller(served.url, target, signer, clock, interval=0.01)
    with poller:
        wait_for(lambda: target.version == 1)
        served.serve(signer.sign(version=2, pools={}))
        wait_for(lambda: target.version == 2)
        with pytest.raises(RuntimeError, match="already started"):
            poller.start()
    count = served.requests
    time.sleep(0.05)
    assert served.requests == count
    assert [d.version for d in target.applied] == [1, 2]
    poller.stop()  # a second stop is harmless


def test_a_forks_child_polls_with_a_thread_of_its_own(served: Served, target: Target, signer: Signer, clock: Clock) -> None:
    """A poller started before the fork (an application's import, under gunicorn
    ``--preload``) polls in the child too: its thread starts again there."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}))
    poller = make_poller(served.url, target, signer, clock, interval=0.01)

    def child() -> str:
        wait_for(lambda: target.version == 2)  # served after the fork: only a poll of the child's applies it here
        return str(target.version)

    with poller:
        wait_for(lambda: target.version == 1)
        later = threading.Timer(0.3, lambda: served.serve(signer.sign(version=2, pools={})))
        later.start()
        try:
            said = in_child(child)
        finally:
            later.join(5.0)
    assert said == "2"


def test_thread_survives_bad_documents(served: Served, target: Target, signer: Signer, clock: Clock) -> None:
    """The background thread keeps polling through failures and applies the next good document."""
    served.serve(b"bad")
    poller = make_poller(served.url, target, signer, clock, interval=0.005, max_backoff=0.02)
    poller.start()
    try:
        wait_for(lambda: poller.failures >= 3)
        served.serve(signer.sign(version=1, pools={}))
        wait_for(lambda: target.version == 1)
    finally:
        poller.stop()
    assert poller.consecutive_failures == 0


async def test_async_run_until_cancelled(served: Served, target: Target, signer: Signer, clock: Clock) -> None:
    """run() polls on the event loop until cancelled, then closes its client."""
    served.serve(signer.sign(version=1, pools={}))
    poller = make_poller(served.url, target, signer, clock, interval=0.01)
    task = asyncio.create_task(poller.run())
    for _ in range(500):
        if target.version == 1 and served.requests >= 3:
            break
        await asyncio.sleep(0.01)
    assert target.version == 1
    assert served.requests >= 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert poller._async_client is None
    assert len(target.applied) == 1


def test_two_pollers_do_not_share_state(served: Served, signer: Signer, clock: Clock) -> None:
    """Each poller keeps its own version and counters (one per target)."""
    served.serve(signer.sign(version=1, pools={}))
    first, second = Target(), Target()
    p1 = make_poller(served.url, first, signer, clock)
    p2 = make_poller(served.url, second, signer, clock)
    assert p1.poll_once()
    assert p2.poll_once()
    assert first.version == second.version == 1
