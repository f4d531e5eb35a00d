"""ControlPoller against a real loopback HTTP server: good documents apply, bad ones change nothing."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_failover._control import (
    MAX_DOCUMENT_BYTES,
    ControlDocument,
    ControlPoller,
    poll_delay,
)

from .conftest import HMAC_KEY, PUBLIC_KEY, Clock, Served, Signer, Target, run_server

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


def make_poller(
    served: Served, target: Target, signer: Signer, clock: Clock, **kwargs: Any
) -> ControlPoller:
    kwargs.setdefault("interval", 1.0)
    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("verify", TLS)
    return ControlPoller(
        served.url, target, clock=clock, rng=lambda: 0.0, **signer.verify_with, **kwargs
    )


def test_good_document_is_applied_once(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """A verified newer document reaches the target; serving it again applies nothing more."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}))
    poller = make_poller(served, target, signer, clock)
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
    assert target.version == 2
    assert target.disabled == {"api": frozenset()}
    assert served.requests == 3


def tamper(raw: bytes) -> bytes:
    """Flip one character of the signature."""
    i = raw.rindex(b'"') - 5
    return raw[:i] + (b"A" if raw[i : i + 1] != b"A" else b"B") + raw[i + 1 :]


# each case: (what the server answers, given the signer and the clock) -> words of the warning
BAD: dict[str, Callable[[Signer, Clock], tuple[int, bytes, str]]] = {
    "tampered": lambda s, c: (200, tamper(s.sign(version=5, pools={})), "bad signature"),
    "older version": lambda s, c: (
        200,
        s.sign(version=1, pools={"pay": []}),
        "not newer than version 2",
    ),
    "same version, other content": lambda s, c: (
        200,
        s.sign(version=2, pools={"pay": []}),
        "not newer",
    ),
    "expired": lambda s, c: (
        200,
        s.sign(version=5, pools={}, now=c.now - 120, expires_in=60),
        "expired",
    ),
    "future": lambda s, c: (200, s.sign(version=5, pools={}, now=c.now + 600), "in the future"),
    "malformed": lambda s, c: (200, b"<html>oops</html>", "malformed"),
    "empty": lambda s, c: (200, b"", "malformed"),
    "unknown pool": lambda s, c: (
        200,
        s.sign(version=5, pools={"search": []}),
        "unknown pool 'search'",
    ),
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
    poller = make_poller(served, target, signer, clock)
    assert poll(poller) is True
    before = (target.version, dict(target.disabled), list(target.applied), poller.document)
    status, body, words = BAD[case](signer, clock)
    served.serve(body, status)
    caplog.set_level(logging.WARNING, logger="pytest_failover")
    assert poll(poller) is False
    assert poll(poller) is False
    assert (target.version, dict(target.disabled), list(target.applied), poller.document) == before
    assert poller.failures == poller.consecutive_failures == 2
    assert poller.last_error is not None
    assert words in poller.last_error
    warnings = [
        r for r in caplog.records if r.name == "pytest_failover" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 2
    assert words in warnings[0].getMessage()
    assert "keeping version 2" in warnings[0].getMessage()
    assert "2 failure(s) in a row" in warnings[1].getMessage()


def test_recovers_after_failures(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """After bad answers, the next good document applies and resets the failure streak."""
    poller = make_poller(served, target, signer, clock)
    served.serve(b"garbage")
    assert poll(poller) is False
    assert target.version is None
    assert poller.document is None
    served.serve(signer.sign(version=3, pools={}))
    assert poll(poller) is True
    assert (poller.failures, poller.consecutive_failures) == (1, 0)
    assert [d.version for d in target.applied] == [3]


def test_expiry_is_judged_by_the_pollers_clock(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """The document in force stays applied when the server keeps serving it after it expired."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}, expires_in=60))
    poller = make_poller(served, target, signer, clock)
    assert poll(poller) is True
    clock.now += 61
    assert poll(poller) is False
    assert poller.last_error is not None
    assert "expired" in poller.last_error
    assert target.disabled == {"api": frozenset({"https://api.example.com"})}


def test_unreachable_server(target: Target, signer: Signer, clock: Clock, poll: Poll) -> None:
    """A refused connection is a counted failure, not an exception."""
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    poller = ControlPoller(
        f"http://127.0.0.1:{port}/c.json", target, clock=clock, verify=TLS, **signer.verify_with
    )
    assert poll(poller) is False
    assert poller.failures == 1
    assert poller.last_error is not None
    assert "ConnectError" in poller.last_error


def test_slow_server_times_out(
    served: Served, target: Target, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """A server slower than the poller's timeout is a failure, bounded by that timeout."""
    served.serve(signer.sign(version=1, pools={}))
    served.delay = 3.0
    poller = make_poller(served, target, signer, clock, timeout=0.1)
    started = time.monotonic()
    assert poll(poller) is False
    assert time.monotonic() - started < 2.5
    assert poller.last_error is not None
    assert "ReadTimeout" in poller.last_error


def test_target_bug_does_not_kill_the_poller(
    served: Served, signer: Signer, clock: Clock, poll: Poll
) -> None:
    """An unexpected exception from apply_control is logged and counted like a rejection."""

    class Broken:
        def apply_control(self, doc: ControlDocument) -> None:
            raise RuntimeError("boom")

    served.serve(signer.sign(version=1, pools={}))
    poller = ControlPoller(served.url, Broken(), clock=clock, verify=TLS, **signer.verify_with)
    assert poll(poller) is False
    assert poller.document is None
    assert poller.last_error == "RuntimeError: boom"


def test_log_lines_hide_credentials_and_query(
    served: Served, target: Target, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The control URL appears in warnings without its token or password."""
    served.serve(b"bad")
    url = served.url.replace("http://", "http://user:hunter2@") + "?token=s3cret"
    poller = ControlPoller(url, target, hmac_key=HMAC_KEY, clock=clock, verify=TLS)
    caplog.set_level(logging.WARNING, logger="pytest_failover")
    assert poller.poll_once() is False
    message = caplog.records[-1].getMessage()
    assert "/control.json" in message
    assert "s3cret" not in message
    assert "hunter2" not in message


def test_https_with_a_private_ca(target: Target, signer: Signer, clock: Clock) -> None:
    """``verify`` reaches the poller's own client: a trusted CA works, an unknown one is a failure."""
    trustme = pytest.importorskip("trustme")  # part of the dev install
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    with run_server(server_tls) as served:
        served.serve(signer.sign(version=1, pools={}))
        stranger = make_poller(served, target, signer, clock, verify=TLS)
        assert stranger.poll_once() is False
        assert stranger.last_error is not None
        assert "ConnectError" in stranger.last_error
        assert target.version is None
        poller = make_poller(served, target, signer, clock, verify=trusting)
        assert poller.poll_once() is True
        assert [d.version for d in target.applied] == [1]
        stranger.stop()
        poller.stop()


# ------------------------------------------------------------------ backoff


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [
        (0, 0.0, 10.0),
        (1, 0.0, 20.0),
        (2, 0.0, 40.0),
        (3, 0.0, 60.0),
        (500, 0.0, 60.0),
        (1, 0.5, 19.0),
        (0, 0.999, 9.001),
    ],
)
def test_poll_delay(failures: int, jitter: float, expected: float) -> None:
    """The delay doubles per consecutive failure up to the cap, less up to 10 % jitter."""
    assert poll_delay(10.0, failures, 60.0, jitter) == pytest.approx(expected)


def test_cap_below_interval_never_shortens_the_interval() -> None:
    """A max_backoff smaller than the interval does not make polls more frequent."""
    assert poll_delay(30.0, 4, 5.0, 0.0) == 30.0


def test_poller_backs_off_and_resets(
    served: Served, target: Target, signer: Signer, clock: Clock
) -> None:
    """next_delay grows with consecutive failures, is bounded, and returns to the interval on success."""
    poller = make_poller(served, target, signer, clock, interval=1.0, max_backoff=4.0)
    served.serve(b"bad")
    delays = []
    for _ in range(5):
        poller.poll_once()
        delays.append(poller.next_delay())
    assert delays == [2.0, 4.0, 4.0, 4.0, 4.0]
    served.serve(signer.sign(version=1, pools={}))
    assert poller.poll_once() is True
    assert poller.next_delay() == 1.0


def test_constructor_checks_its_arguments(target: Target) -> None:
    """Bad URLs, targets, intervals and missing keys are usage errors at construction."""
    with pytest.raises(ValueError, match="scheme"):
        ControlPoller("ftp://127.0.0.1/c", target, hmac_key=HMAC_KEY)
    with pytest.raises(TypeError, match="apply_control"):
        ControlPoller("http://127.0.0.1/c", object(), hmac_key=HMAC_KEY)  # type: ignore[arg-type]  # the point
    with pytest.raises(ValueError, match="interval"):
        ControlPoller("http://127.0.0.1/c", target, hmac_key=HMAC_KEY, interval=0)
    with pytest.raises(ValueError, match="pass hmac_key or public_key"):
        ControlPoller("http://127.0.0.1/c", target)
    assert ControlPoller("http://127.0.0.1/c", target, public_key=PUBLIC_KEY).version is None


# ------------------------------------------------------------------ background loops


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_thread_polls_until_stopped(
    served: Served, target: Target, signer: Signer, clock: Clock
) -> None:
    """start() polls at once and on every interval; stop() ends the thread and its requests."""
    served.serve(signer.sign(version=1, pools={"api": ["https://api.example.com"]}))
    poller = make_poller(served, target, signer, clock, interval=0.01)
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


def test_thread_survives_bad_documents(
    served: Served, target: Target, signer: Signer, clock: Clock
) -> None:
    """The background thread keeps polling through failures and applies the next good document."""
    served.serve(b"bad")
    poller = make_poller(served, target, signer, clock, interval=0.005, max_backoff=0.02)
    poller.start()
    try:
        wait_for(lambda: poller.failures >= 3)
        served.serve(signer.sign(version=1, pools={}))
        wait_for(lambda: target.version == 1)
    finally:
        poller.stop()
    assert poller.consecutive_failures == 0


async def test_async_run_until_cancelled(
    served: Served, target: Target, signer: Signer, clock: Clock
) -> None:
    """run() polls on the event loop until cancelled, then closes its client."""
    served.serve(signer.sign(version=1, pools={}))
    poller = make_poller(served, target, signer, clock, interval=0.01)
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
    p1 = make_poller(served, first, signer, clock)
    p2 = make_poller(served, second, signer, clock)
    assert p1.poll_once()
    assert p2.poll_once()
    assert first.version == second.version == 1
